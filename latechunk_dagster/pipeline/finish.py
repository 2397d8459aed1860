"""The one finish step of a batch: means and head (``LateChunker.finish``), then its Arrow rows.

Called by the writer thread of an in-process stream and by a host worker process
(:mod:`latechunk_dagster.pipeline.hostpool`), so both turn an encoded batch into the same rows.
"""

from __future__ import annotations

from typing import Any

from latechunk_dagster.core.chunker import EncodedBatch, LateChunker
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.sink.rows import chunk_batch
from latechunk_dagster.sources.documents import Document


def finish_rows(
    chunker: LateChunker, encoded: EncodedBatch, batch: list[Document], context: tuple[str, dict[str, Any], int]
) -> tuple[list[ChunkedDocument | DocumentError], Any]:
    """``chunker.finish(encoded)`` and the Arrow rows of its chunked documents.

    Args:
        batch: the batch's documents, in the order they were prepared.
        context: ``(partition, row lineage, vector width)`` for :func:`~latechunk_dagster.sink.rows.chunk_batch`.

    Returns:
        (one result per document, in batch order; a ``pyarrow.RecordBatch`` of their chunk rows,
        or ``None`` when no document was chunked).
    """
    partition, row_lineage, dim = context
    results = chunker.finish(encoded, errors="return")
    good = [(d, r) for d, r in zip(batch, results) if isinstance(r, ChunkedDocument)]
    return results, (chunk_batch(good, partition, row_lineage, dim) if good else None)
