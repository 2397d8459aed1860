"""Asset builders of one late-chunked table (used by :func:`~latechunk_dagster.late_chunk_assets`).

* documents: an observable source asset over the document-store resource; one data version
  per shard = the shard's content fingerprint, so the UI marks a chunk partition stale when a
  document changes. (Or any upstream asset of the user's that yields documents.)
* chunks: one partition per shard; each partition is streamed in bounded batches through the
  engine (one encoder pass per document), only new or changed documents are encoded, and its
  rows are replaced in LanceDB in one commit (:func:`latechunk_dagster.pipeline.materialize_partition`).
  Backfills of many partitions run in one run with one engine load
  (``BackfillPolicy.single_run()`` by default); the pool keeps two runs off one GPU.
* index: ANN, full-text and scalar indexes over the whole table, then compaction.
"""

from typing import Any

import dagster as dg
from pydantic import Field

from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.integration.wiring import TableWiring
from latechunk_dagster.pipeline.partition import SHARD_ERRORS
from latechunk_dagster.pipeline.partition import UNREADABLE_SHARD as UNREADABLE_SHARD  # re-exported
from latechunk_dagster.pipeline.shard import (
    CHAR_SPANS_REFUSAL,
    ShardSettings,
    run_shard,
    shard_summary,
    strategy_from_run_config,
)
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sources.documents import UnknownShardError
from latechunk_dagster.sources.frames import iter_table_documents, partition_tables


class ChunkingConfig(dg.Config):
    """Run config of a chunk asset: which strategy cuts documents into chunks (recorded in lineage).

    Every field left empty takes the factory's default strategy. ``strategy`` is one of
    ``fixed_tokens`` (uses ``chunk_size``), ``sentences``, ``paragraphs``, ``markdown_sections``
    (use ``max_tokens`` and ``language``). ``char_spans`` needs spans per document and is not
    available from run config.
    """

    strategy: str | None = Field(
        default=None, description="fixed_tokens | sentences | paragraphs | markdown_sections (empty: the default)."
    )
    chunk_size: int | None = Field(
        default=None, description="Tokens per chunk for fixed_tokens (special tokens count)."
    )
    max_tokens: int | None = Field(default=None, description="Token budget per chunk for the boundary strategies.")
    segmenter: str | None = Field(default=None, description="Sentence segmenter: sentencex (default) or pysbd.")
    language: str | None = Field(
        default=None, description="Segmenter language; an unsupported one fails the run before the engine loads."
    )

    force: bool = Field(default=False, description="Re-encode every document, not only new or changed ones.")
    batch_tokens: int = Field(
        default=0, description="Document tokens per engine call; 0: the default (8,192 on CPU, 131,072 on GPU)."
    )
    max_rejected_share: float = Field(
        default=ShardSettings.max_rejected_share,
        description="A reason that rejects at least this share of a shard's documents fails the shard (old rows kept).",
    )
    systemic_min_documents: int = Field(
        default=ShardSettings.systemic_min_documents,
        description="...of at least this many documents (fewer: only all-rejected fails the shard).",
    )

    def shard_settings(self, host_workers: int | None) -> ShardSettings:
        """The shard run's settings (the same :class:`ShardSettings` Airflow's operator builds).

        Raises:
            ValueError: a setting out of range, naming it.
        """
        return ShardSettings(
            batch_tokens=self.batch_tokens,
            force=self.force,
            max_rejected_share=self.max_rejected_share,
            systemic_min_documents=self.systemic_min_documents,
            host_workers=host_workers,
        )

    def build(self, default: ChunkingStrategy) -> ChunkingStrategy:
        """The strategy of this run: ``default`` with the fields that are set replaced.

        Raises:
            ValueError: unknown strategy, ``char_spans``, a missing parameter (``fixed_tokens``
                without ``chunk_size``, unless it is the default strategy), parameter values the
                strategy refuses, or a field that the chosen strategy does not take (``chunk_size``
                with ``sentences``, ``language`` with ``fixed_tokens``...: set, it would be ignored).
                The rule is Airflow's too (:func:`~latechunk_dagster.pipeline.shard.strategy_from_run_config`).
        """
        name = self.strategy or default.name
        if name == "char_spans":
            raise ValueError(CHAR_SPANS_REFUSAL)
        unused = ["max_tokens", "language", "segmenter"] if name == "fixed_tokens" else ["chunk_size"]
        ignored = [f for f in unused if getattr(self, f) is not None]
        if ignored:
            raise ValueError(
                f"run config sets {', '.join(f'{f}={getattr(self, f)!r}' for f in ignored)}, which strategy "
                f"{name!r} does not take; remove it or choose a strategy that uses it"
            )
        params = {f: getattr(self, f) for f in ("chunk_size", "max_tokens", "language", "segmenter")}
        return strategy_from_run_config(self.strategy, params, default)


def build_documents_asset(w: TableWiring, spec: dg.AssetSpec) -> dg.AssetsDefinition:
    """The observable source asset over the document-store resource ``w.store_key``, carrying ``spec`` whole."""

    @dg.observable_source_asset(key=spec.key, partitions_def=w.partitions_def, required_resource_keys={w.store_key})
    def _documents(context: dg.AssetExecutionContext) -> dg.DataVersionsByPartition:
        fingerprints = w.resource(context, w.store_key).get_store().fingerprints()  # one pass over the store
        keys = w.all_partition_keys(context.instance)
        return dg.DataVersionsByPartition({k: fingerprints[k] for k in keys if k in fingerprints})

    return _observable_with_spec(_documents, spec)


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
    w: TableWiring, spec: dg.AssetSpec, backfill_policy: dg.BackfillPolicy | None
) -> dg.AssetsDefinition:
    """The partitioned chunk asset (see the module docstring), carrying ``spec`` whole."""
    keys = {w.engine_key, w.lancedb_key} | (set() if w.documents_from_asset else {w.store_key})
    ins = {"documents": dg.AssetIn(key=w.documents_key)} if w.documents_from_asset else {}

    def decorate(fn: Any) -> dg.AssetsDefinition:
        return dg.multi_asset(
            specs=[spec],
            name=spec.key.to_python_identifier(),
            ins=ins,
            partitions_def=w.partitions_def,
            backfill_policy=backfill_policy,
            pool=w.pool,
            required_resource_keys=keys,
        )(fn)

    if w.documents_from_asset:

        def _chunks_from_asset(
            context: dg.AssetExecutionContext, config: ChunkingConfig, documents: Any
        ) -> dg.MaterializeResult:
            return materialize_chunks(context, w, config, documents, spec.code_version)

        return decorate(_chunks_from_asset)

    def _chunks(context: dg.AssetExecutionContext, config: ChunkingConfig) -> dg.MaterializeResult:
        return materialize_chunks(context, w, config, None, spec.code_version)

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
            docs = iter_table_documents(value, w.id_column, w.text_column, where=f"partition {partition!r}")
            yield partition, docs, getattr(value, "num_rows", None)
        return
    st = w.resource(context, w.store_key).get_store()
    # one scan of a single-file store, one listing of a directory store, for the whole run (not
    # one per partition: shards x rows)
    keys = list(context.partition_keys)
    counts = st.count_shards(keys)
    for partition, docs in st.iter_shards(keys):
        yield partition, docs, counts[partition]


def _raise(exc: Exception) -> Any:
    raise exc
    yield  # a generator: raises on the first next()


def materialize_chunks(
    context: dg.AssetExecutionContext, w: TableWiring, config: ChunkingConfig, upstream: Any, code_version: str | None
) -> dg.MaterializeResult:
    """Late-chunk every partition of the run into the chunk table (one commit per partition), each
    with the shard run Airflow calls too (:func:`~latechunk_dagster.pipeline.shard.run_shard`); its
    :func:`~latechunk_dagster.pipeline.shard.shard_summary` is the partition's metadata."""
    strategy = config.build(w.strategy)
    lancedb = w.resource(context, w.lancedb_key)
    rejected_table = lancedb.rejected_table(w.rejected_table_name)  # a bad URI fails before the engine loads
    engine = w.resource(context, w.engine_key)
    settings = config.shard_settings(getattr(engine, "host_workers", None))
    chunker = engine.get_chunker()
    table = lancedb.chunk_table(w.table_name, chunker.embedding_dim)
    table_uri = f"{lancedb.uri}/{w.table_name}"
    totals: dict[str, float] = dict.fromkeys(
        ("documents", "chunks", "rejected", "tokens", "seconds", "unreadable_shards"), 0
    )
    for partition, documents, expected in _partition_sources(context, w, upstream):
        try:
            out = run_shard(
                chunker,
                documents,
                partition,
                strategy,
                chunk_table=table,
                rejected_table=rejected_table,
                run_id=context.run.run_id,
                settings=settings,
                expected_documents=expected,
                log=context.log,
            )
        except SHARD_ERRORS as exc:
            # The shard cannot be read or its documents failed for one reason: its old chunk rows
            # are kept, the reason is recorded (run_shard), and the blocking `documents_accounted`
            # check fails for it, while the other partitions of the run are written as usual.
            context.add_asset_metadata(
                {"shard_error": dg.MetadataValue.text(str(exc)), "partition_rows": dg.MetadataValue.int(-1)},
                partition_key=partition,
            )
            totals["unreadable_shards"] += 1
            continue
        summary = shard_summary(
            out,
            chunker,
            strategy,
            table_uri=table_uri,
            table_name=w.table_name,
            table_version=table.version,
            run_id=context.run.run_id,
        )
        context.add_asset_metadata({k: _metadata_value(v) for k, v in summary.items()}, partition_key=partition)
        for k, v in (
            ("documents", out.documents),
            ("chunks", out.chunks_written),
            ("rejected", out.rejected),
            ("tokens", out.tokens_encoded),
            ("seconds", out.engine_seconds),
        ):
            totals[k] += v
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(table.count_rows()),
            "dagster/uri": dg.MetadataValue.text(table_uri),
            "dagster/column_schema": _column_schema(table.schema),
            "version": dg.MetadataValue.int(table.version),
            "run_documents_in": dg.MetadataValue.int(int(totals["documents"])),
            "run_chunks_written": dg.MetadataValue.int(int(totals["chunks"])),
            "run_documents_rejected": dg.MetadataValue.int(int(totals["rejected"])),
            "run_unreadable_shards": dg.MetadataValue.int(int(totals["unreadable_shards"])),
            "run_tokens_per_second": dg.MetadataValue.float(totals["tokens"] / max(totals["seconds"], 1e-9)),
            "model": dg.MetadataValue.text(chunker.card.name),
            "model_sha256": dg.MetadataValue.text(chunker.card.fingerprint),
            "strategy": dg.MetadataValue.text(strategy.describe()),
            "engine_path": dg.MetadataValue.text(chunker.path),
            "engine": dg.MetadataValue.text(chunker.settings.engine),
            "vllm_version": dg.MetadataValue.text(chunker.settings.engine_record),
            "code_version": dg.MetadataValue.text(code_version or ""),
        }
    )


def _metadata_value(value: Any) -> Any:
    """A summary value as Dagster metadata (ints, floats, text; dicts as JSON)."""
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    if isinstance(value, dict):
        return dg.MetadataValue.json(value)
    return dg.MetadataValue.text(str(value))


def _column_schema(schema: Any) -> dg.TableSchemaMetadataValue:
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in schema]))


def build_index_asset(w: TableWiring, spec: dg.AssetSpec) -> dg.AssetsDefinition:
    """The index asset over the whole chunk table, carrying ``spec`` whole."""

    @dg.multi_asset(specs=[spec], name=spec.key.to_python_identifier(), required_resource_keys={w.lancedb_key})
    def _index(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        lancedb = w.resource(context, w.lancedb_key)
        table = lancedb.open_table(w.table_name)
        if table is None:
            raise dg.Failure(f"no table {w.table_name!r} at {lancedb.uri}: materialize {w.chunk_key.to_user_string()}")
        report = refresh_indexes(table)
        context.log.info(f"indexes: {report}")
        return dg.MaterializeResult(metadata={k: dg.MetadataValue.text(str(v)) for k, v in report.items()})

    return _index
