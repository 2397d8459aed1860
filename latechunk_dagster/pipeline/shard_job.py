"""The shard job: everything both orchestrators do around one shard run, in one place.

Dagster's chunk asset (:func:`~latechunk_dagster.integration.assets.materialize_chunks`) and
Airflow's late-chunk task (:func:`~latechunk_dagster.airflow.tasks.chunk_shard`) each make one
:class:`ShardJob` and call it; what they add is only their own orchestration (where documents come
from, how an engine is started, how a summary is published). In order:

1. :class:`ShardJob` (before the engine loads): the strategy is normalised and checked against the
   settings (``given_chunks`` without a ``chunks_column`` is refused) before any connection, then
   the rejected-documents table is opened, so a bad database URI fails before the engine loads;
2. :meth:`ShardJob.open` (once the engine is up: the table definition's key needs the model's
   lineage; with the run's lineage id): the run's tables
   (:func:`~latechunk_dagster.pipeline.run_tables.open_run_tables`: the generation of the run's
   vector configuration under generations, else the configured names);
3. :meth:`ShardJob.run` per shard: :func:`~latechunk_dagster.pipeline.shard.run_shard` and its
   :func:`~latechunk_dagster.pipeline.shard.shard_summary` under one table URI form
   (:meth:`~latechunk_dagster.sink.database.LanceDBSettings.table_uri`, no doubled ``/``) and the
   first (finest) table's version.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.granularities import SINGLE, Granularities
from latechunk_dagster.pipeline.config import is_single
from latechunk_dagster.pipeline.run_tables import RunTables, lance_settings, open_run_tables
from latechunk_dagster.pipeline.shard import ShardSettings, Strategies, run_shard, shard_summary
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sources.documents import Document, RejectedRow
from latechunk_dagster.sources.text_files import UnconvertedFile


class ShardJob:
    """One run's shard job over a LanceDB database (module docstring).

    Args:
        db: a ``LanceDBSettings``, Dagster's ``LanceDBResource`` or Airflow's ``LanceDBHook`` (whose
            connection is read after the strategy check); :attr:`db` is its ``LanceDBSettings``.
        strategy: one strategy, or the granularities ``{name: strategy}`` finest first, as the
            front's edge normalised them (run config, operator arguments).
        settings: the shard run's :class:`~latechunk_dagster.pipeline.shard.ShardSettings`.
        table_name, rejected_name: the configured table definition and rejected-documents table.
        generations: put the definition under generations first (Dagster's ``generations=True``).
        log: where progress and warnings go (a ``logging.Logger``, Dagster's ``context.log``).
        chunks_column_hint: where the front's user sets ``chunks_column``, appended to the
            strategy's refusal (``"DocumentStoreResource(chunks_column=...)"``); ``None``: none.

    Raises:
        ValueError: ``given_chunks`` without ``settings.chunks_column`` (before any engine loads);
            as ``db.rejected_table`` (a database that cannot be opened).
    """

    def __init__(
        self,
        db: Any,
        strategy: Strategies,
        settings: ShardSettings,
        *,
        table_name: str,
        rejected_name: str,
        generations: bool = False,
        log: logging.Logger | Any | None = None,
        chunks_column_hint: str | None = None,
    ) -> None:
        self.strategy, self.settings = strategy, settings
        self.table_name, self.rejected_name = table_name, rejected_name
        self.run_id = ""
        self.generations = generations
        self.log = log or logging.getLogger(__name__)
        try:  # the run's edge: normalised and checked once (before any connection), then passed down
            self.granularities: Granularities = settings.check_strategies(strategy)
        except ValueError as exc:
            if chunks_column_hint:
                raise ValueError(f"{exc}: {chunks_column_hint}") from None
            raise
        self.db: LanceDBSettings = lance_settings(db)  # a hook reads its connection here
        self.db.rejected_table(rejected_name)  # a bad URI fails before the engine loads
        self._chunker: LateChunker | None = None
        self._target: RunTables | None = None

    @property
    def single(self) -> bool:
        """One strategy (one table, ``table_name`` itself), not several granularities."""
        return is_single(self.granularities)

    def open(self, chunker: LateChunker, run_id: str) -> RunTables:
        """Open (or create) the run's tables for ``chunker``'s vectors; every :meth:`run` writes them.

        Args:
            run_id: the lineage run id of every row the run writes.

        Returns:
            The :class:`~latechunk_dagster.pipeline.run_tables.RunTables` written (a generation's
            names under generations).

        Raises:
            ValueError: as :func:`~latechunk_dagster.pipeline.run_tables.open_run_tables` (a table
                of another schema).
        """
        self._chunker, self.run_id = chunker, run_id
        self._target = open_run_tables(
            self.db,
            self.table_name,
            self.rejected_name,
            self.granularities,
            chunker,
            run_id=self.run_id,
            generations=self.generations,
            warn=self.log.warning,
        )
        target = self._target
        if target.generation is not None:  # which generation this run writes; a warning when it is not served
            say = self.log.info if target.served == target.generation else self.log.warning
            say(f"{self.table_name!r}: {target.describe()}")
        return target

    @property
    def target(self) -> RunTables:
        """The tables :meth:`open` opened (``RuntimeError`` before it)."""
        if self._target is None:
            raise RuntimeError("ShardJob.open(chunker, run_id) first: the run's tables open once the engine is up")
        return self._target

    @property
    def tables(self) -> dict[str, Any]:
        """``{granularity: open table}`` finest first (``{"": table}`` for one strategy)."""
        opened = self.target.chunk_table
        return {SINGLE: opened} if self.single else dict(opened)

    @property
    def table_uri(self) -> str:
        """Where the written table definition lives: ``<database uri>/<table>`` (one ``/``)."""
        return self.db.table_uri(self.target.table_name)

    def run(
        self,
        partition: str,
        documents: Iterable[Document | RejectedRow | UnconvertedFile],
        expected_documents: int | None = None,
    ) -> dict[str, Any]:
        """Late-chunk one shard into the open tables (:func:`~latechunk_dagster.pipeline.shard.run_shard`).

        Args:
            partition: the shard (partition key).
            documents: its documents and reader rejections, read lazily (document files may come
                unconverted: :meth:`DocumentStore.iter_shard`'s ``defer_conversion``).
            expected_documents: how many the store holds (progress lines), ``None``: unknown.

        Returns:
            :func:`~latechunk_dagster.pipeline.shard.shard_summary` (keys
            :data:`~latechunk_dagster.pipeline.shard.SUMMARY_KEYS`: JSON-able, no vectors).

        Raises:
            RuntimeError: before :meth:`open`.
            SHARD_ERRORS: as ``run_shard`` (recorded in the rejected table, old rows kept).
        """
        target, chunker = self.target, self._chunker
        assert chunker is not None
        report = run_shard(
            chunker,
            documents,
            partition,
            self.strategy,
            chunk_table=target.chunk_table,
            rejected_table=target.rejected_table,
            run_id=self.run_id,
            settings=self.settings,
            expected_documents=expected_documents,
            log=self.log,
            granularities=self.granularities,
        )
        return shard_summary(
            report,
            chunker,
            self.granularities,
            table_uri=self.table_uri,
            table_name=target.table_name,
            table_version=next(iter(self.tables.values())).version,
            run_id=self.run_id,
            generation=target.generation,
        )
