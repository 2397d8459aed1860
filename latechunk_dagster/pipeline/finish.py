"""The host work of a batch on both sides of the engine, in one home for the threads and the workers.

* :func:`given_chunks`: what ``LateChunker.prepare`` takes as ``chunks=`` for a batch (each
  document's own chunks, when a granularity is ``GivenChunks``);
* :func:`finish_rows`: means and head (``pool_results`` of the chunker or of its host part), then
  the Arrow rows of every granularity table that needs them.

Called by the calling and writer threads of an in-process stream and by a host worker process
(:mod:`latechunk_dagster.pipeline.hostpool`), so both turn a batch into the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from latechunk_dagster.core.chunker import EncodedBatch, LateChunker
from latechunk_dagster.core.chunker_host import ChunkerHost
from latechunk_dagster.core.chunking import ChunkingStrategy, GivenChunks
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.sink.rows import chunk_batch
from latechunk_dagster.sources.documents import Document

#: ``(partition, {granularity: row lineage}, vector width, {granularity: next granularity or None})``.
RowContext = tuple[str, Mapping[str, Mapping[str, Any]], int, Mapping[str, str | None]]


def given_chunks(
    batch: Sequence[Document], strategy: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy]
) -> list[Any] | None:
    """``[d.chunks for d in batch]`` when a granularity of ``strategy`` is :class:`GivenChunks`, else ``None``
    (a document's chunks are then only part of its ``sha256``)."""
    if any(isinstance(s, GivenChunks) for _, s in Granularities.of(strategy).items()):
        return [d.chunks for d in batch]
    return None


def finish_rows(
    chunker: LateChunker | ChunkerHost,
    encoded: EncodedBatch,
    batch: list[Document],
    context: RowContext,
    needs: Sequence[Sequence[str]],
) -> tuple[list[ChunkedDocument | DocumentError], dict[str, Any]]:
    """``chunker.pool_results(encoded)`` (a chunker, or its host part in a host worker) and the Arrow
    rows of its chunked documents, per granularity.

    Args:
        batch: the batch's documents, in the order they were prepared.
        context: :data:`RowContext` for :func:`~latechunk_dagster.sink.rows.chunk_batch`.
        needs: per document, the granularities whose tables take its rows (the others keep theirs).

    Returns:
        (one result per document, in batch order: a granularity's ``ChunkedDocument``, all of whose
        tokens, windows and path are every granularity's, or the ``DocumentError`` that refused the
        document in every granularity; ``{granularity: pyarrow.RecordBatch}`` of the granularities
        that got rows).
    """
    partition, lineages, dim, parents = context
    results = chunker.pool_results(encoded, errors="return")
    rows: dict[str, Any] = {}
    if encoded.prepared.granularities.single:  # one strategy: each result is its ChunkedDocument
        [(g, row_lineage)] = lineages.items()
        good = [(d, r) for d, r, need in zip(batch, results, needs) if not isinstance(r, DocumentError) and g in need]
        if good:
            rows[g] = chunk_batch(good, partition, dict(row_lineage), dim, parents[g])
        return results, rows
    for g, row_lineage in lineages.items():
        good = [
            (d, r[g]) for d, r, need in zip(batch, results, needs) if not isinstance(r, DocumentError) and g in need
        ]
        if good:
            rows[g] = chunk_batch(good, partition, dict(row_lineage), dim, parents[g])
    first = [r if isinstance(r, DocumentError) else next(iter(r.values())) for r in results]
    return first, rows
