"""Dagster assets: the document shards (observed), the chunk table (partitioned) and its index.

* ``documents``: observable source asset; one data version per shard = the shard's content
  fingerprint, so the UI marks a ``chunk_vectors`` partition stale when a document changes.
* ``chunk_vectors``: one partition per shard; each partition is streamed in bounded batches
  through the engine (one encoder pass per document), only new or changed documents are
  encoded, and its rows are replaced in LanceDB in one commit
  (:func:`latechunk_dagster.pipeline.materialize_partition`).
  Backfills of many partitions run in one run with one engine load
  (``BackfillPolicy.single_run()``); the ``latechunk_engine`` pool keeps two runs off one GPU.
* ``chunk_index``: ANN, full-text and scalar indexes over the whole table, then compaction.
"""

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import Field

from latechunk_dagster import __version__, sink
from latechunk_dagster.core.chunking import ChunkingStrategy, strategy_from_config
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.pipeline import PartitionReport, SystemicFailureError, materialize_partition
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sink.rows import rejection_row

document_shards = dg.DynamicPartitionsDefinition(name="document_shards")

#: Dagster concurrency pool of the encoder: set its limit to the number of GPUs
#: (``dagster instance concurrency set latechunk_engine 1``).
ENGINE_POOL = "latechunk_engine"

#: Changes when the package's chunking semantics change; with the observed document
#: versions it drives Dagster's staleness of ``chunk_vectors`` partitions.
CODE_VERSION = f"latechunk-{__version__}"

#: ``doc_id`` of the rejection row that stands for a whole shard that could not be read.
UNREADABLE_SHARD = "*"


class ChunkingConfig(dg.Config):
    """Run config of ``chunk_vectors``: which strategy cuts documents into chunks (recorded in lineage).

    ``strategy`` is one of ``fixed_tokens`` (uses ``chunk_size``), ``sentences``, ``paragraphs``,
    ``markdown_sections`` (use ``max_tokens`` and ``language``). ``char_spans`` needs spans per
    document and is not available from run config.
    """

    strategy: str = Field(default="sentences", description="fixed_tokens | sentences | paragraphs | markdown_sections")
    chunk_size: int = Field(default=64, description="Tokens per chunk for fixed_tokens (special tokens count).")
    max_tokens: int = Field(default=128, description="Token budget per chunk for the boundary strategies.")
    language: str = Field(default="en", description="Sentence segmenter language (pySBD).")
    force: bool = Field(default=False, description="Re-encode every document, not only new or changed ones.")
    batch_tokens: int = Field(
        default=0, description="Document tokens per engine call; 0: the default (8,192 on CPU, 131,072 on GPU)."
    )

    def build(self) -> ChunkingStrategy:
        if self.strategy == "fixed_tokens":
            return strategy_from_config("fixed_tokens", {"chunk_size": self.chunk_size})
        if self.strategy == "char_spans":
            raise ValueError("char_spans needs per-document spans; call LateChunker.chunk directly")
        return strategy_from_config(self.strategy, {"max_tokens": self.max_tokens, "language": self.language})


@dg.observable_source_asset(
    partitions_def=document_shards,
    description="Shards of the document store; data version = sha256 of the shard's (doc_id, sha256) pairs.",
    group_name="latechunk",
)
def documents(context: dg.AssetExecutionContext, store: DocumentStoreResource) -> dg.DataVersionsByPartition:
    st = store.get_store()
    known = set(st.shards())
    keys = context.instance.get_dynamic_partitions(document_shards.name)
    return dg.DataVersionsByPartition({k: st.shard_fingerprint(k) for k in keys if k in known})


@dg.asset(
    partitions_def=document_shards,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool=ENGINE_POOL,
    deps=[documents],
    code_version=CODE_VERSION,
    kinds={"lancedb", "vllm"},
    group_name="latechunk",
    description="Late-chunked vectors of every document of a shard (one encoder pass per document).",
)
def chunk_vectors(
    context: dg.AssetExecutionContext,
    config: ChunkingConfig,
    engine: VLLMEngineResource,
    lancedb: LanceDBResource,
    store: DocumentStoreResource,
) -> dg.MaterializeResult:
    strategy = config.build()
    chunker = engine.get_chunker()
    st = store.get_store()
    table = lancedb.chunk_table(chunker.embedding_dim)
    rejected_table = lancedb.rejected_table()
    totals: dict[str, float] = dict.fromkeys(
        ("documents", "chunks", "rejected", "tokens", "seconds", "unreadable_shards"), 0
    )
    for partition in context.partition_keys:
        try:
            out = materialize_partition(
                chunker,
                st.iter_shard(partition),
                partition,
                strategy,
                chunk_table=table,
                rejected_table=rejected_table,
                run_id=context.run.run_id,
                batch_tokens=config.batch_tokens or None,
                force=config.force,
                expected_documents=st.count_documents(partition),
                log=context.log,
            )
        except (ValueError, KeyError, OSError, SystemicFailureError) as exc:
            # The shard cannot be read (gone, a file unreadable) or its documents failed for one
            # reason: its old chunk rows are kept, the reason is recorded, and the blocking
            # `documents_accounted` check fails for it, while the other partitions of the run are
            # written and recorded as usual.
            reason = "systemic_failure" if isinstance(exc, SystemicFailureError) else "unreadable_shard"
            _record_unreadable_shard(context, rejected_table, partition, exc, reason)
            totals["unreadable_shards"] += 1
            continue
        md = _partition_metadata(out, table)
        md["embedding_dim"] = dg.MetadataValue.int(chunker.embedding_dim)
        context.add_asset_metadata(md, partition_key=partition)
        if out.rejected:
            context.log.warning(
                f"partition {partition}: {out.rejected} of {out.documents} documents rejected "
                f"{out.rejected_reasons} (see table {lancedb.rejected_table_name})"
            )
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
            "dagster/uri": dg.MetadataValue.text(f"{lancedb.uri}/{lancedb.table_name}"),
            "dagster/column_schema": _column_schema(table.schema),
            "lancedb_version": dg.MetadataValue.int(table.version),
            "run_documents_in": dg.MetadataValue.int(int(totals["documents"])),
            "run_chunks_out": dg.MetadataValue.int(int(totals["chunks"])),
            "run_rejected": dg.MetadataValue.int(int(totals["rejected"])),
            "run_unreadable_shards": dg.MetadataValue.int(int(totals["unreadable_shards"])),
            "run_tokens_per_second": dg.MetadataValue.float(totals["tokens"] / max(totals["seconds"], 1e-9)),
            "model": dg.MetadataValue.text(chunker.card.name),
            "model_sha256": dg.MetadataValue.text(chunker.card.fingerprint),
            "strategy": dg.MetadataValue.text(strategy.describe()),
            "engine_path": dg.MetadataValue.text(chunker.path),
            "vllm_version": dg.MetadataValue.text(chunker.vllm_version),
            "code_version": dg.MetadataValue.text(CODE_VERSION),
        }
    )


def _record_unreadable_shard(
    context: dg.AssetExecutionContext, rejected_table: Any, partition: str, exc: Exception, reason: str
) -> None:
    context.log.error(f"partition {partition}: {reason}, its old rows are kept: {exc}")
    row = rejection_row(UNREADABLE_SHARD, "", partition, reason, str(exc), context.run.run_id, datetime.now(UTC))
    sink.replace_partition(
        rejected_table, "rejection_id", partition, pa.Table.from_pylist([row], schema=sink.REJECTED_SCHEMA)
    )
    context.add_asset_metadata(
        {"shard_error": dg.MetadataValue.text(str(exc)), "partition_row_count": dg.MetadataValue.int(-1)},
        partition_key=partition,
    )


def _partition_metadata(out: PartitionReport, table: Any) -> dict[str, Any]:
    written = out.write
    return {
        "partition_row_count": dg.MetadataValue.int(out.partition_rows),
        "documents_in": dg.MetadataValue.int(out.documents),
        "chunks_out": dg.MetadataValue.int(out.chunks_written),
        "rejected": dg.MetadataValue.int(out.rejected),
        "rejected_reasons": dg.MetadataValue.json(out.rejected_reasons),
        "tokens": dg.MetadataValue.int(out.tokens_encoded),
        "encoder_windows": dg.MetadataValue.int(out.windows),
        "documents_over_model_length": dg.MetadataValue.int(out.windowed_documents),
        "encoded_tokens": dg.MetadataValue.int(out.encoded_tokens),
        "tokens_per_second": dg.MetadataValue.float(out.tokens_encoded / max(out.engine_seconds, 1e-9)),
        "engine_seconds": dg.MetadataValue.float(out.engine_seconds),
        "engine_paths": dg.MetadataValue.json(out.paths),
        "documents_skipped": dg.MetadataValue.int(out.documents_skipped),
        "documents_reencoded": dg.MetadataValue.int(out.documents_reencoded),
        "documents_deleted": dg.MetadataValue.int(out.documents_deleted),
        "tokens_encoded": dg.MetadataValue.int(out.tokens_encoded),
        "rows_inserted": dg.MetadataValue.int(written.inserted if written else 0),
        "rows_updated": dg.MetadataValue.int(written.updated if written else 0),
        "rows_deleted": dg.MetadataValue.int(written.deleted if written else 0),
        "lancedb_version": dg.MetadataValue.int(written.version if written else table.version),
        "shard_fingerprint": dg.MetadataValue.text(out.fingerprint),
        "doc_ids_sha256": dg.MetadataValue.text(hashlib.sha256(json.dumps(out.chunked_doc_ids).encode()).hexdigest()),
    }


def _column_schema(schema: Any) -> dg.TableSchemaMetadataValue:
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in schema]))


@dg.asset(
    deps=[chunk_vectors],
    kinds={"lancedb"},
    group_name="latechunk",
    description="ANN index on vector (brute force below the size where one pays), FTS on text, "
    "scalar indexes on doc_id/partition; old versions compacted.",
)
def chunk_index(context: dg.AssetExecutionContext, lancedb: LanceDBResource) -> dg.MaterializeResult:
    table = lancedb.open_chunk_table()
    if table is None:
        raise dg.Failure(f"no table {lancedb.table_name!r} at {lancedb.uri}: materialize chunk_vectors first")
    report = refresh_indexes(table)
    context.log.info(f"indexes: {report}")
    return dg.MaterializeResult(metadata={k: dg.MetadataValue.text(str(v)) for k, v in report.items()})
