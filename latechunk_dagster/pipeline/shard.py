"""One shard run for both orchestrators: the strategy rule, the settings, the run with its error
recording, and one summary whose names both publish.

Dagster's chunk asset (:mod:`latechunk_dagster.integration.assets`) and Airflow's
``LateChunkShardOperator`` (:mod:`latechunk_dagster.airflow.tasks`) call these, and nothing of
their own between the store and :func:`~latechunk_dagster.pipeline.materialize_partition`:

* :func:`strategy_from_run_config`: a strategy from a name and parameters over the default one
  (one default per strategy: the default strategy's own parameters, none for another strategy),
  or several named ones (granularities, ``strategies={"small": {"name": ..., **params}, ...}``,
  finest first: issue 29);
* :class:`ShardSettings`: every partition setting, checked once, reachable from both (Dagster's
  run config, the Airflow operator's ``settings``; the engine's values are in
  :mod:`latechunk_dagster.pipeline.engine_settings`);
* :func:`run_shard`: the partition materialized (into the granularity tables it opens or
  creates, :func:`open_chunk_tables`, with several strategies); a shard that cannot be read or fails
  systemically (:data:`~latechunk_dagster.pipeline.partition.SHARD_ERRORS`) is recorded in the
  rejected table with one ``*`` row and the same log line, then raised;
* :func:`shard_summary`: the counts under one set of names (:data:`SUMMARY_KEYS`): Dagster's
  partition metadata and Airflow's XCom value; per granularity table under
  :data:`GRANULARITY_KEYS` (the ``granularities`` entry).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy, GivenChunks, strategy_from_config
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.pipeline.accounting import PartitionReport
from latechunk_dagster.pipeline.config import check_host_workers, is_single, normalised
from latechunk_dagster.pipeline.partition import SHARD_ERRORS, materialize_partition, record_shard_failure
from latechunk_dagster.pipeline.summary import GRANULARITY_KEYS as GRANULARITY_KEYS  # re-exported
from latechunk_dagster.pipeline.summary import SUMMARY_KEYS as SUMMARY_KEYS  # re-exported
from latechunk_dagster.pipeline.summary import Strategies as Strategies  # re-exported
from latechunk_dagster.pipeline.summary import describe_strategies as describe_strategies  # re-exported
from latechunk_dagster.pipeline.summary import shard_summary as shard_summary  # re-exported
from latechunk_dagster.sink.generations import tag_commit
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sources.chunk_column import check_chunks_column
from latechunk_dagster.sources.documents import Document, RejectedRow
from latechunk_dagster.sources.text_files import UnconvertedFile

CHAR_SPANS_REFUSAL = "char_spans needs per-document spans; call LateChunker.chunk directly"


def strategy_from_run_config(
    name: str | None,
    params: Mapping[str, Any] | None,
    default: ChunkingStrategy,
    *,
    strategies: Mapping[str, Mapping[str, Any] | ChunkingStrategy] | None = None,
) -> Strategies:
    """The strategy of a run: ``name`` with ``params`` (``None``: ``default``'s name); or, with
    ``strategies``, several named ones.

    One rule for both orchestrators: ``default``'s own parameters are the defaults of its name, and
    a strategy of another name has no default parameter (``fixed_tokens`` needs its ``chunk_size``).
    A value that is the text of an integer (``"64"``, what an Airflow template renders) is that integer.

    Args:
        strategies: the granularities of the table definition, finest first (each chunk's parent is
            in the next one): ``{granularity: {"name": strategy name, **its params}}`` (a missing or
            empty ``"name"``: ``default``'s), or ``{granularity: strategy}``; names are letters,
            digits and ``_`` (they name tables: :func:`~latechunk_dagster.sink.schema.granularity_table`).
            ``given_chunks`` takes each document's own chunks (a store's chunks column). ``name``
            and ``params`` must then be unset.

    Returns:
        One strategy, or ``{granularity: strategy}`` in the order given when ``strategies`` is set.

    Raises:
        ValueError: an unknown name or parameter, a missing one, ``char_spans`` (spans per
            document do not come from run config; ``given_chunks`` reads them from the store), a
            bad or empty granularity mapping, or ``strategies`` beside ``name`` / ``params``.
    """
    if strategies is not None:
        if name or params:
            raise ValueError("give either one strategy (name and params) or several named strategies, not both")
        return _named_strategies(strategies, default)
    chosen = name or default.name
    if chosen == "char_spans":
        raise ValueError(CHAR_SPANS_REFUSAL)
    merged = dict(default.params()) if chosen == default.name else {}
    merged.update({k: _int_text(v) for k, v in (params or {}).items() if v is not None})
    return strategy_from_config(chosen, merged)


def _named_strategies(
    strategies: Mapping[str, Mapping[str, Any] | ChunkingStrategy], default: ChunkingStrategy
) -> dict[str, ChunkingStrategy]:
    """``{granularity: strategy}`` of run config's several named strategies (:func:`strategy_from_run_config`)."""
    if not isinstance(strategies, Mapping) or not strategies:
        raise ValueError(
            f"strategies must be a non-empty mapping of granularity names to strategies, got {strategies!r}"
        )
    out: dict[str, ChunkingStrategy] = {}
    for g, spec in strategies.items():
        if isinstance(spec, ChunkingStrategy):
            if spec.name == "char_spans":
                raise ValueError(f"granularity {g!r}: {CHAR_SPANS_REFUSAL}")
            out[g] = spec
            continue
        if not isinstance(spec, Mapping):
            raise ValueError(f"granularity {g!r}: expected {{'name': strategy, **params}}, got {spec!r}")
        params = {k: v for k, v in spec.items() if k != "name"}
        try:
            out[g] = strategy_from_run_config(spec.get("name") or None, params, default)  # type: ignore[assignment]
        except ValueError as exc:
            raise ValueError(f"granularity {g!r}: {exc}") from None
    return Granularities.of(out)


def _int_text(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    return value


@dataclass(frozen=True)
class ShardSettings:
    """The settings of a shard run, checked when built (:func:`run_shard`).

    Attributes:
        batch_tokens: document tokens per engine call (``None`` or 0: the default, 8,192 on CPU,
            131,072 on GPU: :func:`~latechunk_dagster.pipeline.config.default_batch_tokens`).
        force: re-encode every document, not only new or changed ones.
        max_rejected_share, systemic_min_documents: the systemic-failure rule of
            :mod:`latechunk_dagster.pipeline.partition` (a reason that rejects at least this share of
            at least this many documents fails the shard, keeping its old rows).
        host_workers: host worker processes (``None``: the default, ``LATECHUNK_HOST_WORKERS`` or 0,
            document files then converted in :func:`~latechunk_dagster.pipeline.config.conversion_workers`
            processes; ``0`` given: everything in the run's process).
        chunks_column: the store column holding each document's own chunks
            (``DocumentStore(chunks_column=...)``, ``iter_table_documents(chunks_column=...)``), read by
            a ``given_chunks`` strategy; ``None``: none (a ``given_chunks`` strategy is then refused
            by :func:`run_shard`).

    Raises:
        ValueError: a value out of range, naming the setting.
    """

    batch_tokens: int | None = None
    force: bool = False
    max_rejected_share: float = 0.5
    systemic_min_documents: int = 10
    host_workers: int | None = None
    chunks_column: str | None = None

    def __post_init__(self) -> None:
        if self.batch_tokens is not None and (isinstance(self.batch_tokens, bool) or self.batch_tokens < 0):
            raise ValueError(f"batch_tokens must be an integer >= 0 (0: the default), got {self.batch_tokens!r}")
        share = self.max_rejected_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not (0 < share <= 1):
            raise ValueError(f"max_rejected_share must be a number in (0, 1], got {share!r}")
        if not math.isfinite(float(share)):
            raise ValueError(f"max_rejected_share must be finite, got {share!r}")
        n = self.systemic_min_documents
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"systemic_min_documents must be an integer >= 1, got {n!r}")
        if self.host_workers is not None:
            check_host_workers(self.host_workers)
        check_chunks_column(self.chunks_column)

    def check_strategies(self, strategy: Strategies) -> Granularities:
        """The run's granularities (:class:`~latechunk_dagster.core.granularities.Granularities`),
        checked against :attr:`chunks_column`.

        Raises:
            ValueError: a ``given_chunks`` strategy without a ``chunks_column`` (naming the granularity),
                or a bad granularity mapping.
        """
        granularities = Granularities.of(strategy)
        given = [g for g, s in granularities.items() if isinstance(s, GivenChunks)]
        if given and self.chunks_column is None:
            which = "the strategy" if given == [""] else f"granularity {given[0]!r}"
            raise ValueError(
                f"{which} is given_chunks, which needs each document's own chunks: set chunks_column "
                "(the store column that holds them)"
            )
        return granularities


def open_chunk_tables(
    db: Any, table_name: str, strategy: Strategies | Granularities, dim: int, warn: Any = None
) -> Any:
    """The chunk table(s) of a run, opened or created: ``db.chunk_table(table_name, dim)`` for one
    strategy; ``{granularity: db.chunk_table(granularity_table(table_name, granularity), dim)}``
    (finest first) for several. First the definition's tables that no granularity writes any more
    (a granularity removed from it) are dropped, one line each on ``warn`` (contract section 7),
    where ``db`` can (``drop_leftover_tables``).

    Args:
        db: anything with ``chunk_table(name, dim)``: a
            :class:`~latechunk_dagster.sink.database.LanceDBSettings`, Dagster's ``LanceDBResource``.
        strategy: the run's granularities as its edge normalised them
            (:class:`~latechunk_dagster.core.granularities.Granularities`; a bare strategy is the one granularity).

    Raises:
        ValueError: as ``db.chunk_table`` (a table of another schema).
    """
    granularities = normalised(strategy)
    single = is_single(granularities)
    drop = getattr(db, "drop_leftover_tables", None)
    if drop is not None:
        drop(table_name, [] if single else list(granularities), warn)
    if single:
        return db.chunk_table(table_name, dim)
    return {g: db.chunk_table(granularity_table(table_name, g), dim) for g in granularities}


def run_shard(
    chunker: LateChunker,
    documents: Iterable[Document | RejectedRow | UnconvertedFile],
    partition: str,
    strategy: Strategies,
    *,
    chunk_table: Any = None,
    rejected_table: Any,
    run_id: str,
    settings: ShardSettings,
    expected_documents: int | None = None,
    log: logging.Logger | Any | None = None,
    db: Any = None,
    table_name: str | None = None,
    granularities: Granularities | None = None,
) -> PartitionReport:
    """:func:`~latechunk_dagster.pipeline.materialize_partition` of one shard, with the shared
    error recording and log lines of both orchestrators.

    Args:
        strategy: one strategy, or several granularities ``{name: strategy}`` finest first
            (:func:`strategy_from_run_config` with ``strategies=``), encoded once per document.
        chunk_table: the open chunk table (one strategy) or ``{granularity: open table}``; or
            ``None`` with ``db`` and ``table_name``: the table(s) are opened or created here
            (:func:`open_chunk_tables`: ``table_name`` itself for one strategy, ``table_name_<granularity>``
            for each of several).
        db: anything with ``chunk_table(name, dim)`` (``LanceDBSettings``, Dagster's ``LanceDBResource``).
        settings: :class:`ShardSettings` (its ``chunks_column`` is what ``given_chunks`` needs).
        granularities: ``strategy`` as the caller's edge normalised and checked it already
            (:meth:`ShardSettings.check_strategies`: the shard job's); ``None``: checked here, once.

    Raises:
        ValueError: ``given_chunks`` without ``settings.chunks_column``; neither ``chunk_table`` nor
            ``db`` and ``table_name``; as :func:`~latechunk_dagster.pipeline.materialize_partition`.
        SHARD_ERRORS: the shard cannot be read, or its documents failed for one reason; nothing
            was written to the chunk table, and the shard's rejection rows were replaced by one row
            naming the error (``doc_id`` ``"*"``). Any other error (a bad setting, a table of
            another schema, a bug) propagates with nothing recorded.
    """
    log = log or logging.getLogger(__name__)
    if granularities is None:  # the API's edge: normalised and checked once, then passed down
        granularities = settings.check_strategies(strategy)
    if settings.chunks_column is not None and not any(isinstance(s, GivenChunks) for s in granularities.values()):
        log.warning(
            f"partition {partition}: chunks_column {settings.chunks_column!r} is read, but no strategy is "
            "given_chunks: the documents' own chunks are not used (they only count in each document's sha256)"
        )
    if chunk_table is None:
        if db is None or not table_name:
            raise ValueError("run_shard needs chunk_table, or db and table_name to open the chunk tables")
        chunk_table = open_chunk_tables(db, table_name, granularities, chunker.embedding_dim, log.warning)
    try:
        report = materialize_partition(
            chunker,
            documents,
            partition,
            strategy,
            chunk_table=chunk_table,
            rejected_table=rejected_table,
            run_id=run_id,
            batch_tokens=settings.batch_tokens or None,
            force=settings.force,
            max_rejected_share=settings.max_rejected_share,
            systemic_min_documents=settings.systemic_min_documents,
            expected_documents=expected_documents,
            host_workers=settings.host_workers,
            log=log,
            granularities=granularities,
        )
    except SHARD_ERRORS as exc:
        reason = record_shard_failure(rejected_table, partition, exc, run_id)
        log.error(f"partition {partition}: {reason}, its old rows are kept: {exc}")
        raise
    tag_commits(report, chunk_table, run_id)
    if report.rejected:
        log.warning(
            f"partition {partition}: {report.rejected} of {report.documents} documents rejected "
            f"{report.rejected_reasons} (see the rejected-documents table)"
        )
    return report


def tag_commits(report: PartitionReport, chunk_table: Any, run_id: str) -> None:
    """Tag the table version each granularity table's commit made with the run
    (:func:`~latechunk_dagster.sink.generations.tag_commit`); tables the run did not change get none."""
    tables = chunk_table if isinstance(chunk_table, Mapping) else {"": chunk_table}
    for g, part in report.granularities.items():
        if part.write is not None and g in tables:
            tag_commit(tables[g], part.write.version, run_id, report.partition)
