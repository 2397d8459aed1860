"""One ranked query of a chunk table and its rows as :class:`Hit` objects (vector or hybrid).

:func:`~latechunk_dagster.sink.search.search` returns these hits; small-to-big search
(:mod:`latechunk_dagster.sink.small_to_big`) ranks the fine chunks with the same query and then
reads their parents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from latechunk_dagster.sink.queries import hybrid_query, vector_query

#: ``vector``: nearest chunks by cosine distance; ``hybrid``: LanceDB's full-text search on ``text``
#: and the vector search fused by a reranker (LanceDB's ``RRFReranker`` unless one is given).
SEARCH_MODES = ("vector", "hybrid")

#: The columns a :class:`Hit` is made of, in its fields' order.
HIT_COLUMNS = ("doc_id", "partition", "chunk_index", "char_start", "char_end", "text", "chunk_id")


@dataclass(frozen=True)
class Hit:
    """One search result: where the chunk lies, its text, its cosine ``distance`` to the query
    (0 = same direction, 1 = orthogonal) and, in hybrid mode, the reranker's ``relevance``
    (higher is better; for RRF the sum of ``1 / (60 + rank)`` over the two result lists), and for a
    PDF chunk its ``boxes``: ``((page from 1, x0, y0, x1, y1), ...)`` in PDF points, one per line
    (the rows' ``boxes`` column; ``None`` for other documents and tables written before it)."""

    doc_id: str
    partition: str
    chunk_index: int
    char_range: tuple[int, int] | None
    text: str | None
    distance: float
    chunk_id: str = ""
    relevance: float | None = None
    boxes: tuple[tuple[int, float, float, float, float], ...] | None = None


def ranked_hits(
    table: Any,
    vector: np.ndarray,
    query: str,
    n: int,
    *,
    where: str | None,
    exact: bool,
    mode: str,
    reranker: Any,
    extra: tuple[str, ...] = (),
) -> tuple[list[Hit], dict[str, list[Any]]]:
    """The best ``n`` rows of ``table`` for the query, best first, as :class:`Hit` objects.

    Args:
        vector: float32 ``[dim]``, the query's vector (the space of the table's vectors).
        query: the query's text (the full-text half of ``mode="hybrid"``).
        where: LanceDB SQL filter applied before the search (prefilter), or ``None``.
        exact, mode, reranker: as :func:`~latechunk_dagster.sink.search.search`.
        extra: more columns to read beside the hits' (e.g. ``parent_chunk_id``).

    Returns:
        The hits (vector mode: LanceDB's cosine ``_distance``; hybrid: the reranker's order and
        score, and the cosine distance of each hit's stored vector computed here in float64), and
        ``{column: values}`` of ``extra``, row for row with the hits.
    """
    boxed = "boxes" in table.schema.names  # a table written before the column has none
    columns = [*HIT_COLUMNS, *(["boxes"] if boxed else []), *extra]
    q: Any
    if mode == "hybrid":
        q = hybrid_query(table, vector, query, n, exact=exact, reranker=reranker)
        columns.append("vector")
    else:
        q = vector_query(table, vector, n, exact=exact)
        columns.append("_distance")
    if where:
        q = q.where(where, prefilter=True)
    # hybrid: no select. Each leg of LanceDB's hybrid query takes the selection, and lance warns
    # (a deprecation) where it names neither `_distance` (vector leg) nor `_score` (full-text leg),
    # while neither leg accepts the other's; the k rows are read whole and the columns taken here.
    rows = q.to_arrow().select(columns + ["_relevance_score"]) if mode == "hybrid" else q.select(columns).to_arrow()
    if mode == "hybrid":
        distances = cosine_distances(vector, rows.column("vector").combine_chunks())
        relevance = rows.column("_relevance_score").to_pylist()
    else:
        distances = np.asarray(rows.column("_distance").to_pylist(), dtype=np.float64)
        relevance = [None] * rows.num_rows
    hits = [
        Hit(
            r["doc_id"],
            r["partition"],
            r["chunk_index"],
            (r["char_start"], r["char_end"]) if r["char_start"] is not None else None,
            r["text"],
            float(d),
            r["chunk_id"],
            None if s is None else float(s),
            _boxes(b),
        )
        for r, d, s, b in zip(
            rows.select(list(HIT_COLUMNS)).to_pylist(),
            distances,
            relevance,
            rows.column("boxes").to_pylist() if boxed else [None] * rows.num_rows,
            strict=True,
        )
    ]
    return hits, {name: rows.column(name).to_pylist() for name in extra}


def _boxes(value: list[dict] | None) -> tuple[tuple[int, float, float, float, float], ...] | None:
    """A row's ``boxes`` as tuples ``(page, x0, y0, x1, y1)``."""
    if value is None:
        return None
    return tuple((b["page"], b["x0"], b["y0"], b["x1"], b["y1"]) for b in value)


def cosine_distances(query: np.ndarray, vectors: Any) -> np.ndarray:
    """``1 - cos`` between ``query`` (float ``[dim]``) and each row of ``vectors`` (an Arrow
    ``fixed_size_list<float32>[dim]`` array), in float64: float64 ``[n]``."""
    dim = len(query)
    v = vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float64)  # shape: [n, dim]
    q = np.asarray(query, dtype=np.float64)
    norms = np.maximum(np.linalg.norm(v, axis=1) * np.linalg.norm(q), 1e-300)
    return 1.0 - (v @ q) / norms
