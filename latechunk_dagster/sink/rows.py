"""Late-chunked documents turned into Arrow rows for :mod:`latechunk_dagster.sink`. No Dagster here.

:func:`chunk_batch` builds the chunk rows of a batch of documents column by column: the vectors
are one ``float32`` numpy block wrapped as a ``fixed_size_list`` column without a copy per value
(no Python lists of floats), the lineage columns are constants repeated by Arrow.
:func:`rejection_row` / :func:`rejected_row` build the rows of the rejected-documents table
(contract section 6). The sink only writes: the engine runs and the counts are kept in
:mod:`latechunk_dagster.pipeline`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from latechunk_dagster import __version__
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.results import ChunkedDocument, ChunkerSettings
from latechunk_dagster.sink.schema import METADATA_FIELDS, chunk_id, chunk_schema, metadata_type, rejection_id
from latechunk_dagster.sources.documents import Document, RejectedRow

_TS = pa.timestamp("us", tz="UTC")
#: The fields of one box of the ``boxes`` column (sink.schema.BOX_TYPE), in a box tuple's order.
BOX_KEYS = ("page", "x0", "y0", "x1", "y1")


def lineage(
    settings: ChunkerSettings,
    strategy: ChunkingStrategy,
    run_id: str,
    now: datetime,
    vector_config: str | None = None,
    granularity: str = "",
) -> dict[str, Any]:
    """The lineage columns every chunk row of one run (of one granularity) carries, constant over
    the run: ``strategy`` / ``strategy_params`` are the granularity's own (``strategy_params`` also holds
    the ``blend`` weight of blended vectors, :mod:`latechunk_dagster.core.blending`, where it is not 1),
    ``granularity`` its name (``""``: a single strategy)."""
    blend = {} if settings.blend == 1.0 else {"blend": settings.blend}
    return {
        "model_name": settings.model_name,
        "model_sha256": settings.model_sha256,
        "head": settings.head,
        "opt_ins": ",".join(settings.opt_ins),
        "strategy": strategy.describe(),
        # a blended table's weight (issue 48) with its chunking: what the evaluation reads back
        "strategy_params": json.dumps({"name": strategy.name, **strategy.params(), **blend}, sort_keys=True),
        "vllm_version": settings.engine_record,  # names the engine where it is not vLLM
        "package_version": __version__,
        "run_id": run_id,
        "materialized_at": now,
        "vector_config": vector_config,
        "granularity": granularity,
    }


def chunk_batch(
    pairs: Sequence[tuple[Document, ChunkedDocument]],
    partition: str,
    lineage: dict[str, Any],
    dim: int,
    parent_granularity: str | None = None,
) -> pa.RecordBatch:
    """Chunk rows (:func:`~latechunk_dagster.sink.chunk_schema`) of successfully chunked documents.

    Args:
        pairs: (document, its ``ChunkedDocument`` of one granularity); vectors float32 ``[n_chunks, dim]``.
        partition: the partition key; lineage: :func:`lineage` (its ``granularity`` names the rows'
            granularity and is part of their ``chunk_id``); dim: vector width.
        parent_granularity: the next (coarser) granularity's name, whose chunk ids the rows'
            ``parent_chunk_id`` are (from :attr:`ChunkedDocument.parents`); ``None``: the coarsest
            granularity or a single strategy (``parent_chunk_id`` NULL).

    Raises:
        ValueError: vectors of another shape than the chunks; ``parent_granularity`` given for a
            result without parents.

    Returns:
        One record batch, one row per chunk, in document then chunk order.
    """
    schema = chunk_schema(dim)
    chunks = [(doc, res, c) for doc, res in pairs for c in res.chunks]
    n = len(chunks)
    # shape: [n_chunks, dim], float32; one block, wrapped without a per-value copy
    vectors = (
        np.concatenate([res.vectors for _, res in pairs]).astype(np.float32, copy=False)
        if pairs
        else np.zeros((0, dim), np.float32)
    )
    if vectors.shape != (n, dim):
        raise ValueError(f"vectors of shape {vectors.shape} for {n} chunks of width {dim}")
    g = lineage.get("granularity") or ""
    parents: list[str | None] = [None] * n
    if parent_granularity is not None:
        if any(res.parents is None for _, res in pairs):
            raise ValueError(
                f"granularity {g!r}: parent granularity {parent_granularity!r} given for chunks without parents"
            )
        parents = [
            chunk_id(partition, doc.doc_id, p, parent_granularity)
            for doc, res in pairs
            for p in res.parents  # type: ignore[union-attr]
        ]
    columns: dict[str, pa.Array] = {
        "chunk_id": pa.array([chunk_id(partition, doc.doc_id, c.index, g) for doc, _, c in chunks], pa.string()),
        "doc_id": pa.array([doc.doc_id for doc, _, _ in chunks], pa.string()),
        "partition": pa.repeat(pa.scalar(partition, pa.string()), n),
        "chunk_index": pa.array([c.index for *_, c in chunks], pa.int32()),
        "token_start": pa.array([c.token_range[0] for *_, c in chunks], pa.int32()),
        "token_end": pa.array([c.token_range[1] for *_, c in chunks], pa.int32()),
        "char_start": pa.array([c.char_range[0] if c.char_range else None for *_, c in chunks], pa.int32()),
        "char_end": pa.array([c.char_range[1] if c.char_range else None for *_, c in chunks], pa.int32()),
        "text": pa.array([c.text for *_, c in chunks], pa.string()),
        "headings": pa.array([list(c.headings) for *_, c in chunks], pa.list_(pa.string())),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        "doc_sha256": pa.array([doc.sha256 for doc, _, _ in chunks], pa.string()),
        "doc_tokens": pa.array([len(res.token_ids) for _, res, _ in chunks], pa.int32()),
        "windows": pa.array([res.windows for _, res, _ in chunks], pa.int32()),
        "engine_path": pa.array([res.path for _, res, _ in chunks], pa.string()),
    }
    for name, value in lineage.items():
        columns[name] = pa.repeat(pa.scalar(value, schema.field(name).type), n)
    # a converted document's converter and pages (sources.converters): its own, per row
    converters = [doc.converter for doc, _, _ in chunks]
    if any(converters) and lineage.get("vector_config") is not None:
        configs = [doc.vector_config(lineage["vector_config"]) for doc, _, _ in chunks]
        columns["vector_config"] = pa.array(configs, pa.string())
    pages = [doc.page_range(c.char_range) for doc, _, c in chunks]
    columns["converter"] = pa.array(converters, pa.string())
    columns["page_start"] = pa.array([p[0] if p else None for p in pages], pa.int32())
    columns["page_end"] = pa.array([p[1] if p else None for p in pages], pa.int32())
    # a PDF chunk's boxes (sources.converters.pdf_boxes): from its char range, when the rows are made
    boxes = [doc.chunk_boxes(c.char_range) for doc, _, c in chunks]
    columns["boxes"] = pa.array(
        [None if b is None else [dict(zip(BOX_KEYS, box, strict=True)) for box in b] for b in boxes],
        schema.field("boxes").type,
    )
    columns["source_stamp"] = pa.array([doc.source_stamp for doc, _, _ in chunks], pa.string())
    # the columns of the stock LangChain / LlamaIndex stores: copies of the ones above (sink.schema)
    columns["id"] = columns["chunk_id"]
    columns["metadata"] = pa.StructArray.from_arrays(
        [columns[name] for name in METADATA_FIELDS], fields=list(metadata_type())
    )
    columns["parent_chunk_id"] = pa.array(parents, pa.string())
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def rejection_row(
    doc_id: str, doc_sha256: str, partition: str, reason: str, detail: str, run_id: str, now: datetime
) -> dict:
    """One row of the rejected-documents table (:data:`latechunk_dagster.sink.REJECTED_SCHEMA`)."""
    return {
        "rejection_id": rejection_id(partition, doc_id),
        "doc_id": doc_id,
        "partition": partition,
        "reason": reason,
        "detail": detail,
        "doc_sha256": doc_sha256,
        "run_id": run_id,
        "rejected_at": now,
    }


def rejected_row(row: RejectedRow, partition: str, run_id: str, now: datetime) -> dict:
    """The rejected-documents row of a store row that made no document. Its ``rejection_id`` also
    covers ``where`` (a later duplicate shares its doc_id with the document that is kept)."""
    out = rejection_row(row.doc_id, "", partition, row.reason, row.detail, run_id, now)
    out["rejection_id"] = rejection_id(partition, row.doc_id, row.where)
    return out
