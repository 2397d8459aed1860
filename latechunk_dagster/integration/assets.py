"""Asset builders of one late-chunked table (used by :func:`~latechunk_dagster.late_chunk_assets`).

* documents: an observable source asset over the document-store resource; one data version
  per shard = the shard's content fingerprint, so the UI marks a chunk partition stale when a
  document changes. (Or any upstream asset of the user's that yields documents.)
* chunks: one partition per shard; each partition is streamed in bounded batches through the
  engine (one encoder pass per document), only new or changed documents are encoded, and its
  rows are replaced in LanceDB in one commit (:func:`latechunk_dagster.pipeline.materialize_partition`).
  With several granularities, one multi-asset of one asset per granularity table, all written by
  that one step (one commit per table, finest first), each with its own metadata.
  Backfills of many partitions run in one run with one engine load
  (``BackfillPolicy.single_run()`` by default); the pool keeps two runs off one GPU.
* index: ANN, full-text and scalar indexes over the whole table (each granularity table), then compaction.

Run config: :mod:`latechunk_dagster.integration.run_config`.
"""

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

from latechunk_dagster.core.granularities import SINGLE
from latechunk_dagster.integration.chunk_metadata import (
    RunTotals,
    granularity_summary,
    partition_metadata,
    shard_error_metadata,
    table_metadata,
)
from latechunk_dagster.integration.run_config import ChunkingConfig as ChunkingConfig  # re-exported
from latechunk_dagster.integration.run_config import StrategyConfig as StrategyConfig  # re-exported
from latechunk_dagster.integration.wiring import Granularity, TableWiring
from latechunk_dagster.pipeline.partition import SHARD_ERRORS
from latechunk_dagster.pipeline.partition import UNREADABLE_SHARD as UNREADABLE_SHARD  # re-exported
from latechunk_dagster.pipeline.shard_job import ShardJob
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sources.documents import UnknownShardError
from latechunk_dagster.sources.frames import iter_table_documents, partition_tables


def build_documents_asset(w: TableWiring, spec: dg.AssetSpec) -> dg.AssetsDefinition:
    """The observable source asset over the document-store resource ``w.store_key``, carrying ``spec`` whole.

    ``observable_source_asset`` and ``DataVersionsByPartition`` are beta APIs of Dagster 1.13 (the ones
    that report a data version per partition); their ``BetaWarning`` is this package's choice, not the
    user's, so it is not shown at every ``dagster`` command that loads the definitions."""

    from dagster_shared.utils.warnings import BetaWarning

    def documents(context: dg.AssetExecutionContext) -> dg.DataVersionsByPartition:
        fingerprints = w.resource(context, w.store_key).get_store().fingerprints()  # one pass over the store
        keys = w.all_partition_keys(context.instance)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BetaWarning)
            return dg.DataVersionsByPartition({k: fingerprints[k] for k in keys if k in fingerprints})

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        decorate = dg.observable_source_asset(
            key=spec.key, partitions_def=w.partitions_def, required_resource_keys={w.store_key}
        )
        return _observable_with_spec(decorate(documents), spec)


def _observable_with_spec(source: dg.SourceAsset, spec: dg.AssetSpec) -> dg.AssetsDefinition:
    """``source`` as the asset definition Dagster makes of an observable source asset, with ``spec``
    as its spec: every attribute a translator set, including those a ``SourceAsset`` cannot hold
    (owners, freshness policy, code version).

    The conversion is the one ``dg.Definitions`` applies to every ``SourceAsset`` (a private module
    of Dagster 1.13); ``dg.multi_observable_source_asset``, which takes specs, cannot report one data
    version per partition (``DataVersionsByPartition``), which the documents asset needs.
    """
    from dagster._core.definitions.external_asset import create_external_asset_from_source_asset

    built = create_external_asset_from_source_asset(source)
    return built.map_asset_specs(lambda s: spec.replace_attributes(partitions_def=s.partitions_def))


def build_chunk_asset(
    w: TableWiring, specs: Sequence[dg.AssetSpec], backfill_policy: dg.BackfillPolicy | None
) -> dg.AssetsDefinition:
    """The partitioned chunk asset (see the module docstring): one ``AssetSpec`` per granularity
    table (``specs``, finest first, each carried whole), all materialized by one step that encodes
    each document once. The granularities are not subsettable: a chunk's parent link needs the
    next granularity's chunks of the same encode."""
    keys = {w.engine_key, w.lancedb_key} | (set() if w.documents_from_asset else {w.store_key})
    ins = {"documents": dg.AssetIn(key=w.documents_key)} if w.documents_from_asset else {}
    name = specs[0].key.to_python_identifier() if w.single else f"{w.op_name}_chunks"
    code_versions = {spec.key: spec.code_version for spec in specs}

    def decorate(fn: Any) -> dg.AssetsDefinition:
        return dg.multi_asset(
            specs=list(specs),
            name=name,
            ins=ins,
            partitions_def=w.partitions_def,
            backfill_policy=backfill_policy,
            pool=w.pool,
            required_resource_keys=keys,
        )(fn)

    if w.documents_from_asset:

        def _chunks_from_asset(
            context: dg.AssetExecutionContext, config: ChunkingConfig, documents: Any
        ) -> Iterator[dg.MaterializeResult]:
            yield from materialize_chunks(context, w, config, documents, code_versions)

        return decorate(_chunks_from_asset)

    def _chunks(context: dg.AssetExecutionContext, config: ChunkingConfig) -> Iterator[dg.MaterializeResult]:
        yield from materialize_chunks(context, w, config, None, code_versions)

    return decorate(_chunks)


def _partition_sources(context: dg.AssetExecutionContext, w: TableWiring, upstream: Any) -> Any:
    """``(partition, documents, expected_count)`` per partition of the run; ``documents`` is an iterator
    of ``Document | RejectedRow`` read lazily (from the store resource or the upstream asset's value)."""
    if w.documents_from_asset:
        tables = partition_tables(upstream, list(context.partition_keys))
        for partition in context.partition_keys:
            if partition not in tables:
                yield (
                    partition,
                    iter(_raise(UnknownShardError(f"the upstream asset has no data for partition {partition!r}"))),
                    None,
                )
                continue
            value = tables[partition]
            docs = iter_table_documents(
                value, w.id_column, w.text_column, where=f"partition {partition!r}", chunks_column=w.chunks_column
            )
            yield partition, docs, getattr(value, "num_rows", None)
        return
    st = w.resource(context, w.store_key).get_store()
    # one scan of a single-file store, one listing of a directory store, for the whole run (not
    # one per partition: shards x rows)
    keys = list(context.partition_keys)
    counts = st.count_shards(keys)
    # document files are converted in the host workers (when there are any), not while the store is read
    for partition, docs in st.iter_shards(keys, defer_conversion=True):
        yield partition, docs, counts[partition]


def _text_or_null(value: Any) -> dg.MetadataValue:
    """A report value as Dagster metadata: its text, or null for ``None`` (never the text "None")."""
    return dg.MetadataValue.null() if value is None else dg.MetadataValue.text(str(value))


def _raise(exc: Exception) -> Any:
    raise exc
    yield  # a generator: raises on the first next()


def chunks_column(w: TableWiring, context: Any) -> str | None:
    """The documents' column of their own chunks: the upstream asset's (``late_chunk_assets(chunks_column=)``)
    or the store resource's (``DocumentStoreResource(chunks_column=)``); ``None``: none."""
    if w.documents_from_asset:
        return w.chunks_column
    return w.resource(context, w.store_key).get_store().chunks_column


def materialize_chunks(
    context: dg.AssetExecutionContext,
    w: TableWiring,
    config: ChunkingConfig,
    upstream: Any,
    code_versions: Mapping[dg.AssetKey, str | None],
) -> Iterator[dg.MaterializeResult]:
    """Late-chunk every partition of the run into every granularity table (one commit per table per
    partition, each document encoded once) with the shard job Airflow runs too
    (:class:`~latechunk_dagster.pipeline.shard_job.ShardJob`); each shard's summary, per granularity
    (:func:`~latechunk_dagster.integration.chunk_metadata.partition_metadata`), is the partition's
    metadata of that granularity's asset. Yields one ``MaterializeResult`` per granularity asset,
    finest first."""
    strategies = config.build_granularities(w.strategies)
    engine = w.resource(context, w.engine_key)
    job = ShardJob(
        w.resource(context, w.lancedb_key),
        strategies[SINGLE] if w.single else strategies,
        config.shard_settings(getattr(engine, "host_workers", None), chunks_column(w, context)),
        table_name=w.table_name,
        rejected_name=w.rejected_table_name,
        generations=w.generations,
        log=context.log,
        chunks_column_hint=_chunks_column_hint(w),
    )  # a bad URI, or given_chunks without a column of chunks: refused before the engine loads
    chunker = engine.get_chunker()
    job.open(chunker, context.run.run_id)
    totals = {g.name: RunTotals() for g in w.granularities}
    for partition, documents, expected in _partition_sources(context, w, upstream):
        try:
            summary = job.run(partition, documents, expected)
        except SHARD_ERRORS as exc:
            # The shard cannot be read or its documents failed for one reason: its old chunk rows
            # are kept in every granularity table, the reason is recorded (run_shard), and the
            # blocking `documents_accounted` checks fail for it, while the other partitions of the
            # run are written as usual.
            for g in w.granularities:
                context.add_asset_metadata(shard_error_metadata(exc), asset_key=g.chunk_key, partition_key=partition)
                totals[g.name].unreadable_shards += 1
            continue
        for g in w.granularities:
            mine = granularity_summary(summary, g.name)
            context.add_asset_metadata(
                partition_metadata(summary, g.name), asset_key=g.chunk_key, partition_key=partition
            )
            totals[g.name].add(mine)
    for g in w.granularities:
        yield dg.MaterializeResult(
            asset_key=g.chunk_key,
            metadata=_run_metadata(w, g, job, chunker, totals[g.name], code_versions.get(g.chunk_key)),
        )


def _chunks_column_hint(w: TableWiring) -> str:
    """Where a user of this table sets the documents' column of their own chunks."""
    if w.documents_from_asset:
        return "late_chunk_assets(chunks_column=...)"
    return "DocumentStoreResource(chunks_column=...)"


def _run_metadata(
    w: TableWiring, g: Granularity, job: ShardJob, chunker: Any, totals: RunTotals, code_version: str | None
) -> dict[str, Any]:
    """A granularity asset's metadata of a whole run: its table, the run's totals, the engine."""
    table = job.tables[g.name]
    metadata = {
        **table_metadata(table, job.db.table_uri(table.name)),
        **totals.metadata(),
        "model": dg.MetadataValue.text(chunker.card.name),
        "model_sha256": dg.MetadataValue.text(chunker.card.fingerprint),
        "strategy": dg.MetadataValue.text(job.granularities[g.name].describe()),
        "engine_path": dg.MetadataValue.text(chunker.path),
        "engine": dg.MetadataValue.text(chunker.settings.engine),
        "vllm_version": dg.MetadataValue.text(chunker.settings.engine_record),
        "code_version": dg.MetadataValue.text(code_version or ""),
    }
    if job.target.generation is not None:
        metadata["generation"] = dg.MetadataValue.int(job.target.generation)
    if not w.single:
        metadata["granularity"] = dg.MetadataValue.text(g.name)
        metadata["parent_table"] = dg.MetadataValue.text(w.chunk_tables[g.parent] if g.parent else "")
    return metadata


def build_index_asset(w: TableWiring, specs: Sequence[dg.AssetSpec]) -> dg.AssetsDefinition:
    """The index assets, one per granularity table (``specs`` in the order of ``w.granularities``,
    each carried whole), each indexing its whole chunk table; subsettable, so one table's index is
    refreshed alone.

    Under generations each indexes the table readers are served (the current generation's) and, when
    a newer one is being built, that one too (so it is indexed when promoted, issue 51); its
    metadata is the served table's report with ``table`` (the physical name, e.g.
    ``chunks_minilm__g2``), and ``built_table`` and ``built_rows`` for the one being built; the log
    names each physical table."""
    tables = {spec.key: g for spec, g in zip(specs, w.granularities, strict=True)}
    name = specs[0].key.to_python_identifier() if w.single else f"{w.op_name}_indexes"

    @dg.multi_asset(specs=list(specs), name=name, can_subset=not w.single, required_resource_keys={w.lancedb_key})
    def _index(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult]:
        lancedb = w.resource(context, w.lancedb_key)
        served, built = w.served_tables(lancedb), w.built_tables(lancedb)[0]
        for key in [k for k in tables if k in context.selected_asset_keys]:
            g = tables[key]
            names = list(dict.fromkeys([served[g.name], built[g.name]]))  # the served one first
            reports = {}
            for name in names:
                table = lancedb.open_table(name)
                if table is None:
                    raise dg.Failure(f"no table {name!r} at {lancedb.uri}: materialize {g.chunk_key.to_user_string()}")
                reports[name] = refresh_indexes(table)
                role = "served" if name == served[g.name] else "being built"
                context.log.info(f"indexes of {name!r} ({role}, table definition {g.table_name!r}): {reports[name]}")
            metadata = {k: _text_or_null(v) for k, v in {**reports[names[0]], "table": names[0]}.items()}
            if len(names) > 1:
                metadata |= {"built_table": dg.MetadataValue.text(names[1]), "built_rows": reports[names[1]]["rows"]}
            yield dg.MaterializeResult(asset_key=key, metadata=metadata)

    return _index
