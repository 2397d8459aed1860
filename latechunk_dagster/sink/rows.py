"""One partition of the store, late-chunked into table rows. No Dagster here.

:func:`chunk_partition` reads a shard, sends all its documents to the engine in one
batched call (one encoder pass per document), and turns the results into Arrow rows
for :mod:`latechunk_dagster.sink`: chunk rows for the documents that worked, rejection
rows (doc_id, partition, reason) for those that did not (SPEC section 6).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from latechunk_dagster import __version__
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_id, chunk_schema
from latechunk_dagster.sources.files import Document


@dataclass
class PartitionOutput:
    """Rows and counts of one partition.

    Attributes:
        chunks: chunk rows (:func:`latechunk_dagster.sink.chunk_schema`).
        rejected: rejection rows (:data:`latechunk_dagster.sink.REJECTED_SCHEMA`).
        documents, tokens, windows, encoded_tokens: documents read; document tokens pooled;
            encoder inputs; tokens sent to the encoder (> ``tokens`` when windows overlap).
        windowed_documents: documents longer than the model (encoded in several windows).
        seconds: wall time of the engine call.
        paths: documents per engine path.
    """

    chunks: pa.Table
    rejected: pa.Table
    documents: int
    tokens: int
    windows: int
    encoded_tokens: int
    seconds: float
    windowed_documents: int = 0
    paths: dict[str, int] = field(default_factory=dict)
    rejected_reasons: dict[str, int] = field(default_factory=dict)


def chunk_partition(
    chunker: LateChunker, docs: list[Document], partition: str, strategy: ChunkingStrategy, run_id: str
) -> PartitionOutput:
    """Late-chunk the documents of one partition (one ``chunker.chunk`` call) into rows."""
    texts = [d.text for d in docs]
    t0 = time.perf_counter()
    results = chunker.chunk(texts, strategy, doc_ids=[d.doc_id for d in docs], errors="return")
    seconds = time.perf_counter() - t0
    now = datetime.now(UTC)
    lineage = {
        "model_name": chunker.card.name,
        "model_sha256": chunker.card.fingerprint,
        "head": chunker.head.describe(),
        "opt_ins": ",".join(chunker.opt_ins),
        "strategy": strategy.describe(),
        "strategy_params": json.dumps({"name": strategy.name, **strategy.params()}, sort_keys=True),
        "vllm_version": chunker.vllm_version,
        "package_version": __version__,
        "run_id": run_id,
        "materialized_at": now,
    }
    rows: list[dict] = []
    rejected: list[dict] = []
    out = PartitionOutput(pa.table({}), pa.table({}), len(docs), 0, 0, 0, seconds)
    for doc, res in zip(docs, results):
        if isinstance(res, DocumentError):
            rejected.append(rejection_row(doc.doc_id, doc.sha256, partition, res.reason, res.detail, run_id, now))
            out.rejected_reasons[res.reason] = out.rejected_reasons.get(res.reason, 0) + 1
            continue
        assert isinstance(res, ChunkedDocument)
        out.tokens += len(res.token_ids)
        out.windows += res.windows
        out.windowed_documents += res.windows > 1
        out.paths[res.path] = out.paths.get(res.path, 0) + 1
        rows.extend(_chunk_rows(doc, res, partition, lineage))
    out.encoded_tokens = _encoded_tokens(chunker, results)
    out.chunks = pa.Table.from_pylist(rows, schema=chunk_schema(chunker.embedding_dim))
    out.rejected = pa.Table.from_pylist(rejected, schema=REJECTED_SCHEMA)
    return out


def _encoded_tokens(chunker: LateChunker, results: list) -> int:
    total = 0
    for r in results:
        if isinstance(r, ChunkedDocument):
            n = len(r.token_ids)
            total += n if r.windows == 1 else min(n, chunker.window_length) * r.windows
    return total


def _chunk_rows(doc: Document, res: ChunkedDocument, partition: str, lineage: dict) -> list[dict]:
    return [
        {
            "chunk_id": chunk_id(partition, doc.doc_id, c.index),
            "doc_id": doc.doc_id,
            "partition": partition,
            "chunk_index": c.index,
            "token_start": c.token_range[0],
            "token_end": c.token_range[1],
            "char_start": c.char_range[0] if c.char_range else None,
            "char_end": c.char_range[1] if c.char_range else None,
            "text": c.text,
            "headings": list(c.headings),
            "vector": res.vectors[c.index].tolist(),
            "doc_sha256": doc.sha256,
            "doc_tokens": len(res.token_ids),
            "windows": res.windows,
            "engine_path": res.path,
            **lineage,
        }
        for c in res.chunks
    ]


def rejection_row(
    doc_id: str, doc_sha256: str, partition: str, reason: str, detail: str, run_id: str, now: datetime
) -> dict:
    """One row of the rejected-documents table (:data:`latechunk_dagster.sink.REJECTED_SCHEMA`)."""
    return {
        "rejection_id": chunk_id(partition, doc_id, -1),
        "doc_id": doc_id,
        "partition": partition,
        "reason": reason,
        "detail": detail,
        "doc_sha256": doc_sha256,
        "run_id": run_id,
        "rejected_at": now,
    }
