"""What the Airflow operators do, as plain functions over the shared core (no Airflow import).

The operators of :mod:`latechunk_dagster.airflow.operators` are thin: they read connections
(hooks), open the engine (:mod:`latechunk_dagster.airflow.engine`) and call these. These call
exactly what the Dagster assets call: :func:`~latechunk_dagster.pipeline.shard.run_shard` for a
shard, :func:`~latechunk_dagster.sink.validation.check_partitions` for the checks and
:func:`~latechunk_dagster.sink.indexing.refresh_indexes` for the indexes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.pipeline.config import DEFAULT_STRATEGY
from latechunk_dagster.pipeline.shard import (
    CHAR_SPANS_REFUSAL,
    ShardSettings,
    run_shard,
    shard_summary,
    strategy_from_run_config,
)
from latechunk_dagster.sink import validation
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sink.writes import stored_partitions
from latechunk_dagster.sources.files import DocumentStore
from latechunk_dagster.sources.listing import IncompleteListingError, Listing


class ChecksFailedError(Exception):
    """At least one table check failed; ``outcomes`` holds every check's ``(passed, details)``."""

    def __init__(self, outcomes: Mapping[str, validation.Outcome]) -> None:
        self.outcomes = dict(outcomes)
        failed = {name: details for name, (passed, details) in outcomes.items() if not passed}
        super().__init__(f"table checks failed: {sorted(failed)}: {failed}")


def lineage_run_id(run_id: str, map_index: int | None = None) -> str:
    """The ``run_id`` recorded on the rows: the Airflow run id, plus ``#<map index>`` for a mapped task."""
    return f"{run_id}#{map_index}" if map_index is not None and map_index >= 0 else run_id


def resolve_strategy(
    strategy: str | ChunkingStrategy | None = None, params: Mapping[str, Any] | None = None
) -> ChunkingStrategy:
    """The chunking strategy of a task (-> :class:`~latechunk_dagster.core.chunking.ChunkingStrategy`).

    Args:
        strategy: a strategy, a strategy name (``fixed_tokens``, ``sentences``, ``paragraphs``,
            ``markdown_sections``) or ``None`` (the default, sentences of at most 128 tokens, as
            Dagster's factory).
        params: the named strategy's parameters (``{"chunk_size": 64}``), by the one rule of both
            orchestrators (:func:`~latechunk_dagster.pipeline.shard.strategy_from_run_config`). Not
            allowed with a strategy object.

    Raises:
        ValueError: an unknown name or parameter, a missing one, ``char_spans`` (needs spans per
            document), or params with a strategy object.
    """
    if isinstance(strategy, ChunkingStrategy):
        if params:
            raise ValueError("strategy_params apply to a strategy name, not to a strategy object")
        if strategy.name == "char_spans":
            raise ValueError(CHAR_SPANS_REFUSAL)
        return strategy
    return strategy_from_run_config(strategy, params, DEFAULT_STRATEGY)


def list_shards(store_path: str, log: logging.Logger | Any | None = None) -> Listing:
    """The store's :class:`~latechunk_dagster.sources.listing.Listing` (its ``shards``, sorted: one
    mapped late-chunk task per shard).

    Every entry not read (a shard name that cannot be a task's shard, a ``.jsonl.gz`` file, a
    FIFO...) and every part of the store that could not be listed gets a warning on ``log``
    (default: this module's logger), as Dagster's partition sync does.

    Raises:
        FileNotFoundError: nothing at ``store_path``. ValueError: no documents of a known kind there.
        IncompleteListingError: the store could not be listed at all (a single-file store cut off
            while it is rewritten); the message names the file.
    """
    listing = DocumentStore.from_path(store_path).listing()
    for line in listing.warnings():
        (log or logging.getLogger(__name__)).warning(line)
    if listing.gaps and not listing.shards:
        raise IncompleteListingError(listing.incomplete_reason())
    return listing


def drop_removed_shards(
    db: LanceDBSettings, listing: Listing, table_names: list[str], log: logging.Logger | Any | None = None
) -> list[str]:
    """Delete, from each of ``table_names``, the rows of every partition they hold whose shard left
    the store (so search never returns documents that left the store, as Dagster's partition sync
    does). Which partitions those are is :meth:`Listing.removed
    <latechunk_dagster.sources.listing.Listing.removed>`: none when the listing saw only part of
    the store, never one a skipped entry stands for.

    Returns:
        The partitions whose rows were deleted, sorted.
    """
    removed = listing.removed(stored_partitions(db.connect(), table_names))
    if removed:
        deleted = db.drop_partitions(table_names, removed)
        (log or logging.getLogger(__name__)).info(
            f"shards gone from the store: {removed[:20]}; {deleted} rows deleted from {table_names}"
        )
    return removed


def chunk_shard(
    chunker: LateChunker,
    db: LanceDBSettings,
    store_path: str,
    shard: str,
    strategy: ChunkingStrategy,
    *,
    table_name: str,
    rejected_table_name: str,
    run_id: str,
    settings: ShardSettings | None = None,
    log: logging.Logger | Any | None = None,
) -> dict[str, Any]:
    """Late-chunk one shard of a store into ``table_name``: the shard run both orchestrators call
    (:func:`~latechunk_dagster.pipeline.shard.run_shard`).

    Streaming batches, incremental skip, one atomic commit, rejected rows in
    ``rejected_table_name``, progress lines on ``log``.

    Returns:
        :func:`~latechunk_dagster.pipeline.shard.shard_summary` (small and JSON-able: counts,
        table URI and version, never vectors; the names Dagster's partition metadata has too).

    Raises:
        SystemicFailureError, and a shard that cannot be read (``sources.documents.READ_ERRORS``):
            as :func:`~latechunk_dagster.pipeline.shard.run_shard` (recorded, old rows kept).
    """
    rejected_table = db.rejected_table(rejected_table_name)  # a bad URI fails before the shard is read
    table = db.chunk_table(table_name, chunker.embedding_dim)
    settings = settings or ShardSettings()
    store = DocumentStore.from_path(store_path, chunks_column=settings.chunks_column)
    report = run_shard(
        chunker,
        store.iter_shard(shard),
        shard,
        strategy,
        chunk_table=table,
        rejected_table=rejected_table,
        run_id=run_id,
        settings=settings,
        expected_documents=store.count_documents(shard),
        log=log,
    )
    return shard_summary(
        report,
        chunker,
        strategy,
        table_uri=db.table_uri(table_name),
        table_name=table_name,
        table_version=table.version,
        run_id=run_id,
    )


def check_shards(
    db: LanceDBSettings,
    store_path: str,
    *,
    table_name: str,
    rejected_table_name: str,
    results: Iterable[Mapping[str, Any] | None] = (),
    shards: Iterable[str] = (),
) -> dict[str, validation.Outcome]:
    """The Dagster asset checks' assertions (:data:`validation.CHECKS`) over the shards of ``results``.

    Args:
        results: the late-chunk tasks' XCom values (:func:`shard_summary`); each gives a shard and
            the rows its commit left (``row_count_matches``) and the vector width. ``None`` items
            (a task that returned nothing) are skipped.
        shards: more shards to check; one without a result fails ``row_count_matches``.

    Returns:
        ``{check name: (passed, details)}`` in :data:`validation.CHECKS` order. A missing chunk
        table fails every check.

    Memory: one partition's rows and one shard's documents at a time (:func:`validation.check_partitions`).
    """
    reported = {r["partition"]: r for r in results if r}
    partitions = sorted(set(reported) | set(shards))
    table = db.open_table(table_name)
    if table is None:
        return {name: (False, {"reason": f"no table {table_name!r} at {db.uri}"}) for name in validation.CHECKS}
    dims = {int(r["embedding_dim"]) for r in reported.values() if "embedding_dim" in r}
    dim = dims.pop() if len(dims) == 1 else table.schema.field("vector").type.list_size
    return validation.check_partitions(  # one partition at a time: memory bounded by a partition
        table,
        db.open_table(rejected_table_name),
        partitions,
        dim=dim,
        expected_rows={p: (int(reported[p]["partition_rows"]) if p in reported else None) for p in partitions},
        store=DocumentStore.from_path(store_path),
    )


def refresh_table_indexes(db: LanceDBSettings, table_name: str) -> dict[str, Any]:
    """:func:`~latechunk_dagster.sink.indexing.refresh_indexes` on ``table_name`` (what Dagster's index asset does).

    Returns:
        Its report with every value JSON-able (numbers, booleans and text).

    Raises:
        LookupError: no table ``table_name``.
    """
    table = db.open_table(table_name)
    if table is None:
        raise LookupError(f"no table {table_name!r} at {db.uri}: late-chunk a shard first")
    report = refresh_indexes(table)
    return {k: v if isinstance(v, bool | int | float | str) or v is None else str(v) for k, v in report.items()}
