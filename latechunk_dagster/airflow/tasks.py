"""What the Airflow operators do, as plain functions over the shared core (no Airflow import).

The operators of :mod:`latechunk_dagster.airflow.operators` are thin: they read connections
(hooks), open the engine (:mod:`latechunk_dagster.airflow.engine`) and call these. These call
exactly what the Dagster assets call: :func:`~latechunk_dagster.pipeline.shard.run_shard` for a
shard, :func:`~latechunk_dagster.sink.validation.check_partitions` for the checks and
:func:`~latechunk_dagster.sink.indexing.refresh_indexes` for the indexes.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.pipeline.config import DEFAULT_STRATEGY
from latechunk_dagster.pipeline.removals import check_removals
from latechunk_dagster.pipeline.shard import CHAR_SPANS_REFUSAL, ShardSettings, Strategies, strategy_from_run_config
from latechunk_dagster.pipeline.shard_job import ShardJob
from latechunk_dagster.pipeline.table_checks import granularity_table_outcomes
from latechunk_dagster.sink import validation
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.generations import built_table
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sources.files import DocumentStore
from latechunk_dagster.sources.listing import IncompleteListingError, Listing


class ChecksFailedError(Exception):
    """At least one table check failed; ``outcomes`` holds every check's ``(passed, details)``, of
    the granularity ``granularity`` (``""``: a table of one strategy) in the table ``table``."""

    def __init__(self, outcomes: Mapping[str, validation.Outcome], granularity: str = "", table: str = "") -> None:
        self.outcomes, self.granularity, self.table = dict(outcomes), granularity, table
        failed = {name: details for name, (passed, details) in outcomes.items() if not passed}
        where = f" in granularity {granularity!r} (table {table!r})" if granularity else ""
        super().__init__(f"table checks failed{where}: {sorted(failed)}: {failed}")


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


def resolve_strategies(
    strategy: str | ChunkingStrategy | None = None,
    params: Mapping[str, Any] | None = None,
    strategies: Mapping[str, Mapping[str, Any] | ChunkingStrategy] | None = None,
) -> Strategies:
    """The strategy of a task (:func:`resolve_strategy`), or with ``strategies`` its granularities.

    Args:
        strategies: several named strategies, finest first (each chunk's parent is in the next):
            ``{granularity: {"name": strategy name, **its params}}`` or ``{granularity: strategy}``,
            the run-config form of :func:`~latechunk_dagster.pipeline.shard.strategy_from_run_config`
            (``"64"`` from a template is 64; ``given_chunks`` reads the store's ``chunks_column``).

    Returns:
        One strategy, or ``{granularity: strategy}`` in the order given.

    Raises:
        ValueError: ``strategies`` beside ``strategy`` or ``params`` (naming both); as
            :func:`resolve_strategy` and ``strategy_from_run_config`` (naming the granularity).
    """
    check_strategy_form(strategy, params, strategies)
    if strategies is None:
        return resolve_strategy(strategy, params)
    return strategy_from_run_config(None, None, DEFAULT_STRATEGY, strategies=strategies)


def check_strategy_form(strategy: Any, params: Any, strategies: Any) -> None:
    """A task takes one strategy (``strategy``, ``params``) or several (``strategies``), not both.

    Raises:
        ValueError: both given, naming the values.
    """
    if strategies is not None and (strategy is not None or params):
        raise ValueError(
            "give either strategy (with strategy_params) or strategies (several named strategies), not both; "
            f"got strategy={strategy!r} and strategies={strategies!r}"
        )


def table_names(table_name: str, granularities: Iterable[str] = ()) -> list[str]:
    """The tables of a table definition: ``[table_name]``, or with ``granularities`` each one's table
    (:func:`~latechunk_dagster.sink.schema.granularity_table`), in the order given."""
    names = list(granularities)
    return [granularity_table(table_name, g) for g in names] if names else [table_name]


def built_table_names(db: LanceDBSettings, table_name: str, granularities: Iterable[str] = ()) -> list[str]:
    """The tables of a table definition the late-chunk tasks write now (:func:`table_names`): under
    generations the newest generation's (:func:`~latechunk_dagster.sink.generations.built_table`,
    what Dagster's index asset and both fronts' checks read), else the configured names."""
    return table_names(built_table(db.connect(), table_name)[0], granularities)


def list_shards(
    store_path: str,
    log: logging.Logger | Any | None = None,
    storage_options: Mapping[str, str] | None = None,
    store_settings: Mapping[str, Any] | None = None,
) -> Listing:
    """The store's :class:`~latechunk_dagster.sources.listing.Listing` (its ``shards``, sorted: one
    mapped late-chunk task per shard).

    Every entry not read (a shard name that cannot be a task's shard, a ``.jsonl.gz`` file, a
    FIFO...) and every part of the store that could not be listed gets a warning on ``log``
    (default: this module's logger), as Dagster's partition sync does.

    ``store_path``: a local path or an ``s3://``, ``gs://``, ``az://`` URI, read with
    ``storage_options`` (LanceDB's form; none: the cloud's standard chain). ``store_settings``: how
    its documents are read (``ocr``, ``converters``: :func:`~latechunk_dagster.airflow.hooks.store.store_settings`;
    the same in every task of a store, since its own converters' suffixes are its documents too).

    Raises:
        FileNotFoundError: nothing at ``store_path``. ValueError: no documents of a known kind there.
        IncompleteListingError: the store could not be listed at all (a single-file store cut off
            while it is rewritten, a bucket that cannot be reached or listed whole); the message
            names the file or bucket.
    """
    listing = DocumentStore.from_path(store_path, storage_options=storage_options, **(store_settings or {})).listing()
    for line in listing.warnings():
        (log or logging.getLogger(__name__)).warning(line)
    if listing.gaps and not listing.shards:
        raise IncompleteListingError(listing.incomplete_reason())
    return listing


def drop_removed_shards(
    db: LanceDBSettings,
    listing: Listing,
    table_names: list[str],
    log: logging.Logger | Any | None = None,
    max_delete: float | str | None = None,
) -> list[str]:
    """Delete, from each of ``table_names``, the rows of every partition they hold whose shard left
    the store (so search never returns documents that left the store, as Dagster's partition sync
    does). Which partitions those are is :meth:`Listing.removed
    <latechunk_dagster.sources.listing.Listing.removed>`: none when the listing saw only part of
    the store, never one a skipped entry stands for.

    Args:
        max_delete: the share of the tables' partitions that may be removed at once (``0.5``,
            ``"50%"``; default ``$LATECHUNK_MAX_DELETE`` or 50%:
            :func:`~latechunk_dagster.pipeline.removals.max_delete_share`).

    Returns:
        The partitions whose rows were deleted, sorted.

    Raises:
        TooManyRemovalsError: more than ``max_delete`` of the partitions would go; nothing deleted.
    """
    conn = db.connect()
    stored = db.stored_partitions(table_names)  # every live generation's
    removed = listing.removed(stored)
    how = "ListShardsOperator(max_delete=1.0) for one run"
    check_removals(removed, stored, max_delete, how=how, db=conn, table_names=table_names)
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
    strategy: Strategies,
    *,
    table_name: str,
    rejected_table_name: str,
    run_id: str,
    settings: ShardSettings | None = None,
    log: logging.Logger | Any | None = None,
    storage_options: Mapping[str, str] | None = None,
    store_settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Late-chunk one shard of a store into ``table_name`` (read with ``store_settings``:
    :func:`list_shards`): the shard job both orchestrators run
    (:class:`~latechunk_dagster.pipeline.shard_job.ShardJob`).

    Streaming batches, incremental skip, one atomic commit (per granularity table with several
    strategies ``{granularity: strategy}``: each ``granularity_table(table_name, granularity)``,
    every document encoded once), rejected rows in ``rejected_table_name``, progress lines on ``log``.
    A definition under generations (:mod:`latechunk_dagster.sink.generations`) is written in the
    generation of the run's vector configuration (``table``, ``generation`` in the summary), and the
    summary's ``tag`` names the table version its commit made (``table.checkout(tag)``).

    Returns:
        :func:`~latechunk_dagster.pipeline.shard.shard_summary` (small and JSON-able: counts,
        table URI and version, never vectors; the names Dagster's partition metadata has too).

    Raises:
        SystemicFailureError, and a shard that cannot be read (``sources.documents.READ_ERRORS``):
            as :func:`~latechunk_dagster.pipeline.shard.run_shard` (recorded, old rows kept).
    """
    job = ShardJob(
        db,
        strategy,
        settings or ShardSettings(),
        table_name=table_name,
        rejected_name=rejected_table_name,
        log=log,
    )  # a bad URI, or given_chunks without a chunks_column: refused before the shard is read
    return run_store_shard(job, chunker, run_id, store_path, shard, storage_options, store_settings)


def run_store_shard(
    job: ShardJob,
    chunker: LateChunker,
    run_id: str,
    store_path: str,
    shard: str,
    storage_options: Mapping[str, str] | None = None,
    store_settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``job`` (:class:`~latechunk_dagster.pipeline.shard_job.ShardJob`) on ``chunker`` over one shard
    of the store at ``store_path`` (read with ``job.settings.chunks_column`` and ``store_settings``:
    :func:`list_shards`), its rows' lineage ``run_id``.

    Returns:
        The shard's summary (:meth:`ShardJob.run <latechunk_dagster.pipeline.shard_job.ShardJob.run>`).

    Raises:
        As :meth:`ShardJob.open <latechunk_dagster.pipeline.shard_job.ShardJob.open>` and ``ShardJob.run``.
    """
    job.open(chunker, run_id)
    store = DocumentStore.from_path(
        store_path, chunks_column=job.settings.chunks_column, storage_options=storage_options, **(store_settings or {})
    )
    # document files are converted in the host workers (when there are any), not while the store is read
    return job.run(shard, store.iter_shard(shard, defer_conversion=True), store.count_documents(shard))


def check_shards(
    db: LanceDBSettings,
    store_path: str,
    *,
    table_name: str,
    rejected_table_name: str,
    results: Iterable[Mapping[str, Any] | None] = (),
    shards: Iterable[str] = (),
    granularity: str = "",
    parent: str | None = None,
    chunks_column: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    store_settings: Mapping[str, Any] | None = None,
) -> dict[str, validation.Outcome]:
    """The Dagster asset checks' assertions (:data:`validation.CHECKS`) over the shards of ``results``,
    in one table: ``table_name``, or the table of ``granularity`` of the table definition ``table_name``
    (:func:`~latechunk_dagster.sink.schema.granularity_table`).

    Args:
        results: the late-chunk tasks' XCom values (:func:`shard_summary`); each gives a shard and
            the rows its commit left (``row_count_matches``; a granularity's own count, from the
            summary's ``granularities``) and the vector width. ``None`` items (a task that returned
            nothing) are skipped.
        shards: more shards to check; one without a result fails ``row_count_matches``.
        granularity: the granularity whose table is checked (``""``: ``table_name`` itself).
        parent: the next (coarser) granularity, whose table holds this one's parents: adds
            :data:`~latechunk_dagster.sink.parents.PARENT_CHECK` (``parents_exist``); ``None``: none.
        chunks_column: the store column of the documents' own chunks, as the late-chunk task read it
            (a document's ``doc_sha256`` covers its chunks, so ``documents_accounted`` reads them too).
        store_settings: how the store's documents are read, as the late-chunk task read them (:func:`list_shards`).

    Returns:
        ``{check name: (passed, details)}`` in :data:`validation.CHECKS` order, then ``parents_exist``
        with a ``parent``. A missing chunk table fails every check.

    Memory: one partition's rows and one shard's documents at a time (:func:`validation.check_partitions`).
    """
    reported = {r["partition"]: r for r in results if r}
    # each partition's own report: its granularity's entry of the summary (its count of rows)
    own = {p: (r.get("granularities") or {}).get(granularity, r) if granularity else r for p, r in reported.items()}
    # under generations: the newest generation's tables (what the shard tasks wrote)
    table_name, rejected = built_table(db.connect(), table_name)
    return granularity_table_outcomes(
        db,
        granularity_table(table_name, granularity),
        rejected or rejected_table_name,
        sorted(set(reported) | set(shards)),
        expected_rows=lambda p: int(own[p]["partition_rows"]) if p in own else None,
        reported_dim=lambda p: reported[p].get("embedding_dim") if p in reported else None,
        parent_table=granularity_table(table_name, parent) if parent is not None else None,
        store=DocumentStore.from_path(
            store_path, chunks_column=chunks_column, storage_options=storage_options, **(store_settings or {})
        ),
    )[1]


def check_granularity_tables(
    db: LanceDBSettings,
    store_path: str,
    *,
    table_name: str,
    rejected_table_name: str,
    granularities: Sequence[str] = (),
    results: Iterable[Mapping[str, Any] | None] = (),
    shards: Iterable[str] = (),
    chunks_column: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    store_settings: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, validation.Outcome]]:
    """:func:`check_shards` of every granularity table of a table definition, finest first, each
    granularity but the last with ``parents_exist`` against the next one's table.

    Args:
        granularities: the granularity names, finest first; empty: those of ``results``
            (:func:`result_granularities`), and ``[""]`` (``table_name`` itself) when they have none.

    Returns:
        ``{granularity: {check name: (passed, details)}}`` (``{"": ...}`` for a table of one strategy).

    Raises:
        ValueError: results that name different granularities.
    """
    results = [r for r in results if r]
    names = list(granularities) or result_granularities(results)
    return {
        g: check_shards(
            db,
            store_path,
            table_name=table_name,
            rejected_table_name=rejected_table_name,
            results=results,
            shards=shards,
            granularity=g,
            parent=names[i + 1] if i + 1 < len(names) else None,
            chunks_column=chunks_column,
            storage_options=storage_options,
            store_settings=store_settings,
        )
        for i, g in enumerate(names)
    }


def check_granularities(*args: Any, **kwargs: Any) -> dict[str, dict[str, validation.Outcome]]:
    """Deprecated name of :func:`check_granularity_tables` (``check_granularities`` is
    :func:`latechunk_dagster.core.granularities.check_granularities`, the strategy mapping's check)."""
    warnings.warn(
        "latechunk_dagster.airflow.tasks.check_granularities is deprecated: use check_granularity_tables",
        DeprecationWarning,
        stacklevel=2,
    )
    return check_granularity_tables(*args, **kwargs)


def result_granularities(results: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """The granularity names the late-chunk tasks' summaries name (their ``granularities`` keys,
    finest first); ``[""]`` (one strategy) when there is none.

    Raises:
        ValueError: two summaries that name different granularities (naming both lists).
    """
    seen = {tuple(r.get("granularities") or ("",)) for r in results if r}
    if len(seen) > 1:
        raise ValueError(f"the late-chunk results name different granularities: {sorted(seen)}")
    return list(seen.pop()) if seen else [""]


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


def xcom_list(values: Any) -> list[Any]:
    """A templated list argument as a list (``[]`` for ``None``). A mapped task's XCom values
    (``chunk.output``: Airflow's ``LazyXComSequence``) are read with one slice request: iterating
    one fetches offset after offset until the one past the end answers 404, which Airflow's API
    client logs as ``[error] XCom not found`` in every successful run (issue 40.5)."""
    if not values:
        return []
    if isinstance(values, Sequence) and not isinstance(values, str):
        return list(values[:])
    return list(values)
