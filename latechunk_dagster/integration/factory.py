"""The asset factory: one call = the assets, checks, sensor and jobs of one late-chunked table.

Nothing here is fixed at import: keys, group, partitions, pool, resource keys and table names
are arguments, and a :class:`~latechunk_dagster.integration.translator.LateChunkTranslator`
turns them into asset specs. Two calls (two models, two tables) live side by side in one
``Definitions`` (the example of :func:`late_chunk_assets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from latechunk_dagster.core.chunking import ChunkingStrategy, GivenChunks
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.integration.table_definitions import UNSET, FactoryArgs, build_table_definitions
from latechunk_dagster.integration.table_definitions import LateChunkDefinitions as LateChunkDefinitions  # re-exported
from latechunk_dagster.integration.translator import LateChunkTranslator
from latechunk_dagster.pipeline.config import DEFAULT_STRATEGY as DEFAULT_STRATEGY  # re-exported
from latechunk_dagster.sink import CHUNK_TABLE, REJECTED_TABLE

#: Default Dagster concurrency pool of the encoder: set its limit to the number of GPUs
#: (``dagster instance concurrency set latechunk_engine 1``).
ENGINE_POOL = "latechunk_engine"


def _granularities(
    strategy: ChunkingStrategy | None, strategies: Mapping[str, ChunkingStrategy] | None
) -> dict[str, ChunkingStrategy]:
    """``{granularity: strategy}`` of a factory call, finest first (``{"": strategy}`` for one strategy).

    Raises:
        ValueError: both arguments; a bad granularity name; ``char_spans`` (spans per document
            cannot be a table's default: ``GivenChunks()`` reads each document's own).
        TypeError: a value that is not a strategy.
    """
    if strategy is not None and strategies is not None:
        raise ValueError("pass strategy= (one table) or strategies= (a table per granularity), not both")
    if strategies is not None and not isinstance(strategies, Mapping):
        raise TypeError(f"strategies must be a mapping {{name: strategy}}, got {strategies!r}")
    granularities = Granularities.of(strategies if strategies is not None else strategy or DEFAULT_STRATEGY)
    for g, s in granularities.items():
        if s.name == "char_spans":
            where = f"granularity {g!r}: " if g else ""
            raise ValueError(
                f"{where}char_spans needs per-document spans and cannot be a table's default strategy "
                "(GivenChunks() reads each document's own chunks from a column)"
            )
    return granularities


def _check_chunks_column(
    granularities: dict[str, ChunkingStrategy], documents: object, chunks_column: str | None
) -> None:
    """``chunks_column`` reads an upstream asset's column, which ``given_chunks`` then needs.

    Raises:
        ValueError: ``chunks_column`` without ``documents``; ``given_chunks`` with ``documents`` but
            no ``chunks_column``.
    """
    if chunks_column is not None and documents is None:
        raise ValueError(
            "chunks_column reads an upstream asset's column (documents=...); a store's column is "
            "DocumentStoreResource(chunks_column=...)"
        )
    given = [g for g, s in granularities.items() if s.name == GivenChunks.name]
    if given and documents is not None and chunks_column is None:
        raise ValueError(
            "given_chunks reads each document's own chunks from a column: pass chunks_column= with documents="
        )


def _checked_granularities(args: FactoryArgs) -> dict[str, ChunkingStrategy]:
    """The call's granularities (:func:`_granularities`), its ``chunks_column`` checked against them."""
    granularities = _granularities(args.strategy, args.strategies)
    _check_chunks_column(granularities, args.documents, args.chunks_column)
    return granularities


def late_chunk_assets(
    *,
    name: str = "chunk_vectors",
    key_prefix: str | Sequence[str] | None = None,
    group_name: str = "latechunk",
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = UNSET,
    pool: str | None = ENGINE_POOL,
    engine_resource_key: str = "engine",
    lancedb_resource_key: str = "lancedb",
    store_resource_key: str = "store",
    documents: dg.AssetKey | str | Sequence[str] | dg.AssetsDefinition | None = None,
    id_column: str = "id",
    text_column: str = "text",
    chunks_column: str | None = None,
    table_name: str = CHUNK_TABLE,
    rejected_table_name: str = REJECTED_TABLE,
    strategy: ChunkingStrategy | None = None,
    strategies: Mapping[str, ChunkingStrategy] | None = None,
    model: str | None = None,
    translator: LateChunkTranslator | None = None,
    automation_condition: dg.AutomationCondition | None = None,
    index: bool = True,
    sensor: bool = True,
    parity_check: bool = True,
    job_name: str | None = None,
    index_job_name: str | None = None,
    sensor_name: str | None = None,
    queries: str | Path | None = None,
    eval_margin: float = 5.0,
    generations: bool = False,
) -> LateChunkDefinitions:
    """Build the assets, checks, sensor and jobs of one late-chunked LanceDB table.

    Args:
        name: name of the chunk asset (its key is ``key_prefix + [name]``).
        key_prefix: asset key prefix of every asset of the table (``"e5"`` or ``["search", "e5"]``).
        group_name: Dagster group of the assets.
        partitions_def: any Dagster partitions definition; default: a
            ``DynamicPartitionsDefinition`` named ``<prefix>_document_shards`` (one partition per
            shard of the store, kept in sync by the sensor).
        backfill_policy: default ``BackfillPolicy.single_run()`` (one run and one engine load for a
            backfill of many partitions); ``None`` for one run per partition.
        pool: Dagster concurrency pool of the steps that run the encoder (``None``: no pool).
        engine_resource_key, lancedb_resource_key, store_resource_key: resource keys of a
            :class:`~latechunk_dagster.integration.resources.VLLMEngineResource` (or any resource with
            ``get_chunker()``), a ``LanceDBResource`` and a ``DocumentStoreResource``.
        documents: an upstream asset (key or definition) whose value per partition is a table of
            documents (``pyarrow.Table``, pandas or polars ``DataFrame``) with ``id_column`` and
            ``text_column``, partitioned like the chunk asset. ``None`` (default): the store resource,
            observed by a ``documents`` source asset.
        chunks_column: with ``documents``: the column of each document's own chunks (ranges or
            texts, for ``GivenChunks()``); ``None``: none. A store's column is the store resource's
            ``DocumentStoreResource(chunks_column=...)``.
        table_name, rejected_table_name: LanceDB tables of chunks and of rejected documents (with
            ``strategies``: each granularity ``g`` is the table ``f"{table_name}_{g}"``,
            :func:`~latechunk_dagster.sink.schema.granularity_table`; one rejected table for all).
        strategy: default chunking strategy (run config may choose another per run); default
            ``Sentences(max_tokens=128)``.
        strategies: instead of ``strategy``, several granularities ``{name: strategy}``, finest first
            (:meth:`~latechunk_dagster.core.granularities.Granularities.of`): each document is
            encoded once and every granularity is pooled from that pass into its own table; each
            chunk records its parent chunk in the next granularity (``parent_chunk_id``). The chunk
            asset is then a multi-asset of one asset per granularity table (key
            ``key_prefix + [f"{name}_{g}"]``), materialized together by one step, each with its own
            blocking checks and index asset.
        model: model directory whose fingerprint enters the code version (so a model change marks
            every partition stale); default: not part of the code version.
        translator: maps the table to asset specs (keys, descriptions, code version, owners, tags,
            automation...); each spec reaches Dagster whole.
        automation_condition: Dagster declarative automation of the chunk asset, e.g.
            ``dg.AutomationCondition.eager()`` (new shards and shards whose data version changed are
            requested) or ``...on_cron("0 3 * * *")``, evaluated by the automation sensor (``dagster
            dev`` / the daemon); ``None`` (default): runs come from the store sensor, a job or the UI.
        index: add the index asset; sensor: add the store sensor (dynamic partitions over a store);
        parity_check: add the ``parity_sample`` check (re-embeds two documents per partition).
        job_name, index_job_name, sensor_name: names of the two jobs and the sensor (default
            ``<prefix>_<name>_job``, ``..._index_job``, ``..._store_sensor``).
        queries: a labeled query file (JSONL, :mod:`latechunk_dagster.evaluation.queries`): adds the
            ``retrieval_eval`` asset (late vs naive on this table; with ``strategies``, every
            granularity side by side with small-to-big) and its check ``late_not_below_naive``
            (a warning when the table's default configuration, small-to-big at its blend weight where
            there are granularities, is below naive nDCG@k of the finest granularity by more than
            ``eval_margin`` points).
        generations: put the table definition under generations (:mod:`latechunk_dagster.sink.generations`,
            contract section 8): a run whose vector configuration is new writes a generation of its
            own beside the served one, the checks and the index read the generation being built,
            and the ``promote`` asset (key ``key_prefix + [f"{name}_promote"]``) switches readers to
            it once every partition was written into it and passed its blocking checks.

    Returns:
        :class:`LateChunkDefinitions` (``.to_definitions()`` gives a ``dg.Definitions``).

    Raises:
        ValueError: a ``char_spans`` default strategy; both ``strategy`` and ``strategies``; a bad
            granularity name (:meth:`~latechunk_dagster.core.granularities.Granularities.of`);
            ``chunks_column`` without ``documents`` (the store resource has its own), or
            ``GivenChunks()`` with ``documents`` but no ``chunks_column``. ``sensor=True`` with
            upstream documents is ignored.
        TypeError: a ``strategies`` value that is not a strategy.

    Example (two models, two tables, one store)::

        import dagster as dg
        from latechunk_dagster import (DocumentStoreResource, FixedTokens, LanceDBResource,
                                       VLLMEngineResource, late_chunk_assets)

        shards = dg.DynamicPartitionsDefinition(name="shards")
        minilm = late_chunk_assets(key_prefix="minilm", table_name="chunks_minilm", partitions_def=shards)
        e5 = late_chunk_assets(key_prefix="e5", table_name="chunks_e5", partitions_def=shards,
                               engine_resource_key="e5_engine", strategy=FixedTokens(chunk_size=256), sensor=False)
        resources = {"engine": VLLMEngineResource(model="/models/all-MiniLM-L6-v2"),
                     "e5_engine": VLLMEngineResource(model="/models/e5-base-v2", prefix="passage: "),
                     "lancedb": LanceDBResource(uri="/tmp/latechunk-example/lancedb"),
                     "store": DocumentStoreResource(path="/tmp/latechunk-example/documents")}
        defs = dg.Definitions.merge(minilm.to_definitions(), e5.to_definitions(), dg.Definitions(resources=resources))
    """
    args = FactoryArgs(**locals())
    return build_table_definitions(args, _checked_granularities(args))
