"""A partition chunked in one engine call, into rows in memory: the form for small callers.

The evaluation's temporary tables and some benchmarks use it; partitions of a real table are
materialized as a bounded stream by :func:`latechunk_dagster.pipeline.materialize_partition`.
Both count their results with :func:`~latechunk_dagster.pipeline.accounting.account_results`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.pipeline.accounting import PartitionReport, account_results
from latechunk_dagster.sink.rows import chunk_batch, lineage, rejection_row
from latechunk_dagster.sink.schema import REJECTED_SCHEMA
from latechunk_dagster.sources.documents import Document


@dataclass
class PartitionRows:
    """Rows of one partition chunked in one engine call (:func:`chunk_partition`).

    Attributes:
        chunks: chunk rows; rejected: rejection rows.
        report: the counts; ``engine_seconds`` is the wall time of the ``chunker.chunk`` call.
    """

    chunks: pa.Table
    rejected: pa.Table
    report: PartitionReport


def chunk_partition(
    chunker: LateChunker,
    docs: list[Document],
    partition: str,
    strategy: ChunkingStrategy,
    run_id: str,
    vector_config: str | None = None,
) -> PartitionRows:
    """Late-chunk the documents of one partition in one ``chunker.chunk`` call, into rows."""
    t0 = time.perf_counter()
    results = chunker.chunk([d.text for d in docs], strategy, doc_ids=[d.doc_id for d in docs], errors="return")
    report = PartitionReport(partition, documents=len(docs), engine_seconds=time.perf_counter() - t0, batches=1)
    now = datetime.now(UTC)
    good, failed = account_results(report, docs, results, chunker.window_length)
    rejected = [rejection_row(d.doc_id, d.sha256, partition, e.reason, e.detail, run_id, now) for d, e in failed]
    report.rejected = len(rejected)
    settings = chunker.settings
    row_lineage = lineage(settings, strategy, run_id, now, vector_config)
    batch = chunk_batch(good, partition, row_lineage, settings.embedding_dim)
    report.chunks_written = batch.num_rows
    report.seconds = time.perf_counter() - t0
    return PartitionRows(pa.Table.from_batches([batch]), pa.Table.from_pylist(rejected, schema=REJECTED_SCHEMA), report)
