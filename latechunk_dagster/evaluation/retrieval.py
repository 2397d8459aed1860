"""Late vs naive retrieval over chunk rows: naive embeddings, exact cosine top-k, per-query metrics.

* **late**: the ``vector`` column of the chunk rows, as written by the pipeline (of a blended table:
  solved from it and the naive vector, :mod:`latechunk_dagster.evaluation.blends`).
* **blend a=0.25/0.5/0.75** (``blend25`` ...): the late and naive vectors mixed (issue 48).
* **naive**: each chunk's own ``text`` embedded alone by the same chunker (model, prefix, head):
  ``chunker.chunk([text], FixedTokens(chunk_size=WHOLE))`` is one span over all of the text's
  tokens, i.e. the mean of all its tokens then the head, which is the model's ordinary sequence
  embedding. Same boundaries, same engine, nothing written.
* **retrieval**: exact cosine similarity over every candidate row in numpy (no ANN index, so the
  comparison carries no approximate-search noise); ties keep the row order.
* **hybrid** (:func:`evaluate_table` on a table with the full-text index on ``text``): what
  ``search(..., mode="hybrid", exact=True)`` returns, LanceDB's BM25 full-text search and the
  exact cosine search over the late vectors fused by LanceDB's ``RRFReranker``, over the same
  candidate rows.

Rows without a char range (a chunk of special tokens only) have no text to embed naively; they
are left out of both candidate sets and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from latechunk_dagster.core.blending import WHOLE
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import FixedTokens
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.tokenization import check_query
from latechunk_dagster.evaluation.blends import ranked_vectors, table_blend
from latechunk_dagster.evaluation.metrics import Hit, judge, metric_names, query_metrics
from latechunk_dagster.evaluation.queries import LabeledQuery, QueryFileError
from latechunk_dagster.evaluation.report import EvalReport
from latechunk_dagster.sink.queries import hybrid_query
from latechunk_dagster.sink.search import lineage_difference

#: Columns read from the chunk table.
COLUMNS = [
    "chunk_id", "doc_id", "partition", "char_start", "char_end", "text", "vector",
    "model_sha256", "model_name", "head", "strategy", "strategy_params",
]  # fmt: skip


#: Read too where the table has it (a granularity's parent links, issue 29).
PARENT_COLUMN = "parent_chunk_id"


def read_chunk_rows(table: Any, where: str | None = None) -> pa.Table:
    """The :data:`COLUMNS` (and :data:`PARENT_COLUMN` where the table has it) of every row of a
    LanceDB chunk table matching ``where`` (LanceDB SQL)."""
    columns = COLUMNS + ([PARENT_COLUMN] if PARENT_COLUMN in table.schema.names else [])
    query = table.search().select(columns).limit(None)
    if where:
        query = query.where(where)
    return query.to_arrow()


def naive_vectors(chunker: LateChunker, texts: Sequence[str], ids: Sequence[str] | None = None) -> np.ndarray:
    """Each text embedded alone (mean of all its tokens, then the head): float32 ``[len(texts), dim]``.

    All texts go to the engine in one call. A text longer than the model is encoded in windows
    like any document (never truncated).

    Raises:
        ValueError: a text could not be embedded; names the first few ids and reasons (the
            documents' errors: e.g. the character that is not valid Unicode).
    """
    if not texts:
        return np.zeros((0, chunker.embedding_dim), dtype=np.float32)
    # prepared by the host part at blend=1: a whole text's late vector is its naive one, so a blending
    # chunker's second pass over the same text would only double the cost (core/blending.py)
    prepared = replace(chunker.host, blend=1.0).prepare(list(texts), FixedTokens(chunk_size=WHOLE), doc_ids=ids)
    results = chunker.pool_results(chunker.encode(prepared), errors="return")
    bad = [r for r in results if isinstance(r, DocumentError)]
    if bad:
        detail = "; ".join(str(r) for r in bad[:3])
        raise ValueError(f"{len(bad)} of {len(results)} texts could not be embedded alone ({detail})")
    return np.stack([r.vectors[0] for r in results]).astype(np.float32)


def top_k(queries: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` most cosine-similar candidates per query, best first.

    Args:
        queries: float ``[n_queries, dim]``; candidates: float ``[n_candidates, dim]``.

    Returns:
        int64 ``[n_queries, min(k, n_candidates)]``; equal scores keep candidate order (stable sort).
    """
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    c = candidates / np.maximum(np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
    scores = q.astype(np.float64) @ c.astype(np.float64).T  # shape: [n_queries, n_candidates]
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def evaluate_rows(
    chunker: LateChunker,
    rows: pa.Table,
    queries: Sequence[LabeledQuery],
    *,
    k: int = 10,
    bootstrap_samples: int = 2000,
    seed: int = 0,
    hybrid: Any = None,
) -> EvalReport:
    """Late vs naive on ``rows`` (:data:`COLUMNS`): rank every candidate row for every query, score both.

    Queries none of whose documents are among the rows are skipped (counted in the report).

    Args:
        hybrid: ``(table, where)``: also score LanceDB's hybrid search on ``table`` (the one the
            rows were read from, with ``where`` their filter; module docstring); ``None``: not.

    Raises:
        ValueError: the rows hold vectors the query model cannot reproduce (another model
            fingerprint or head: :func:`~latechunk_dagster.sink.search.lineage_difference`); no row; no query
            left to evaluate; a naive embedding failed; a query that is not valid Unicode
            (``InvalidQueryError``, before anything is embedded).
        QueryFileError: a passage starts beyond the end of its document's chunks (a label for
            another version of the document); names the query file line.
    """
    names = metric_names(k)
    usable = usable_rows(chunker, rows)
    kept, skipped = kept_queries(queries, {"": usable})
    stored = np.asarray(usable.column("vector").to_pylist(), dtype=np.float32)  # shape: [n_chunks, dim]
    naive = naive_vectors(chunker, usable.column("text").to_pylist(), usable.column("chunk_id").to_pylist())
    weight = table_blend(usable)
    if weight == 0.0:
        raise ValueError("the chunk rows were written with blend=0 (chunks alone): no late vector to compare")
    qvecs = chunker.embed_queries([q.query for q in kept])  # shape: [n_queries, dim]
    hits = row_hits(usable)
    ranked: dict[str, list[list[Hit]]] = {}
    for method, vectors in ranked_vectors(stored, naive, weight).items():  # late, blends, naive
        order = top_k(qvecs, vectors, k)
        ranked[method] = [[hits[j] for j in order[i]] for i in range(len(kept))]
    if hybrid is not None:
        ranked["hybrid"] = hybrid_hits(hybrid[0], hybrid[1], [q.query for q in kept], qvecs, k)
    per_method = {method: score_rankings(lists, kept, k) for method, lists in ranked.items()}
    return EvalReport(
        k=k,
        metrics=names,
        queries=[q.query for q in kept],
        late=per_method.pop("late"),
        naive=per_method.pop("naive"),
        hybrid=per_method.pop("hybrid", None),
        blends=per_method,
        blend=weight,
        chunks=usable.num_rows,
        chunks_without_text=rows.num_rows - usable.num_rows,
        skipped=skipped,
        strategies=sorted(set(usable.column("strategy").to_pylist())),
        bootstrap_samples=bootstrap_samples,
        seed=seed,
    )


def usable_rows(chunker: LateChunker, rows: pa.Table) -> pa.Table:
    """The rows with a char range (the candidates), after checking their lineage against ``chunker``.

    Raises:
        ValueError: the rows hold vectors the query model cannot reproduce
            (:func:`~latechunk_dagster.sink.search.lineage_difference`); no row has a char range.
    """
    lineage = [c for c in ("model_sha256", "model_name", "head") if c in rows.column_names]
    for row in rows.select(lineage).group_by(lineage).aggregate([]).to_pylist():  # one row per distinct lineage
        why = lineage_difference(chunker, row)
        if why is not None:
            raise ValueError(f"the chunk rows hold {why}")
    usable = rows.filter(pc.is_valid(rows.column("char_start")))
    if usable.num_rows == 0:
        raise ValueError("no chunk rows with text to evaluate (empty table or filter)")
    return usable


def kept_queries(
    queries: Sequence[LabeledQuery], candidates: Mapping[str, pa.Table]
) -> tuple[list[LabeledQuery], list[str]]:
    """The queries to evaluate and the texts of those skipped: a query is kept when one of its
    documents is among the candidate rows of every entry of ``candidates`` (one entry per
    granularity, :func:`usable_rows`).

    Raises:
        QueryFileError: a passage starts at or after the end of its document's last chunk (a label
            for another version of the document); names the query file line.
        ValueError: no query is left; a query that is not valid Unicode (``InvalidQueryError``).
    """
    doc_end: dict[str, int] = {}
    present_in: dict[str, int] = {}
    for usable in candidates.values():
        ends: dict[str, int] = {}
        for d, end in zip(usable.column("doc_id").to_pylist(), usable.column("char_end").to_pylist()):
            ends[d] = max(ends.get(d, 0), end)
        for d, end in ends.items():
            doc_end[d] = max(doc_end.get(d, 0), end)
            present_in[d] = present_in.get(d, 0) + 1
    everywhere = {d for d, n in present_in.items() if n == len(candidates)}
    kept, skipped = [], []
    for q in queries:
        check_query(q.query)  # a LabeledQuery built in code is not checked like a query file's line
        present = [p for p in q.passages if p.doc_id in everywhere]
        if not present:
            skipped.append(q.query)
            continue
        for p in present:
            if p.char_range is not None and p.char_range[0] >= doc_end[p.doc_id]:
                raise QueryFileError(
                    f"line {p.line}: passage [{p.char_range[0]}, {p.char_range[1]}) of {p.doc_id!r} starts after "
                    f"the document's last chunk (ends at {doc_end[p.doc_id]}); query {q.query!r}"
                )
        kept.append(q)
    if not kept:
        rows = sum(t.num_rows for t in candidates.values())
        raise ValueError(f"none of the {len(queries)} queries has its document among the {rows} rows")
    return kept, skipped


def row_hits(rows: pa.Table) -> list[Hit]:
    """``(doc_id, char range)`` of each row, as the relevance rule sees a retrieved chunk."""
    starts, ends = rows.column("char_start").to_pylist(), rows.column("char_end").to_pylist()
    return [(d, (s, e) if s is not None else None) for d, s, e in zip(rows.column("doc_id").to_pylist(), starts, ends)]


def score_rankings(rankings: Sequence[Sequence[Hit]], queries: Sequence[LabeledQuery], k: int) -> np.ndarray:
    """Per-query metrics of one method: float64 ``[n_queries, n_metrics]`` in [0, 1], columns
    :func:`~latechunk_dagster.evaluation.metrics.metric_names` ``(k)``; ``rankings[i]`` ranks for ``queries[i]``."""
    names = metric_names(k)
    table = np.zeros((len(queries), len(names)))
    for i, q in enumerate(queries):
        gains, found = judge(rankings[i], q.passages)
        m = query_metrics(gains, found, k)
        table[i] = [m[n] for n in names]
    return table


def hybrid_hits(table: Any, where: str | None, queries: Sequence[str], vectors: np.ndarray, k: int) -> list[list[Hit]]:
    """Per query, the ``(doc_id, char range)`` of the top ``k`` of LanceDB's hybrid search
    (:func:`~latechunk_dagster.sink.queries.hybrid_query`, exact vector leg, default reranker) over
    the rows matching ``where`` that have a char range (the candidate rows of :func:`evaluate_rows`).

    Args:
        queries: the query texts (full-text leg); vectors: their float32 ``[n_queries, dim]`` embeddings.
    """
    scope = "char_start IS NOT NULL" + (f" AND ({where})" if where else "")
    out = []
    for text, vec in zip(queries, vectors):
        # no select: each leg of the hybrid query would take it, and lance warns where it names neither
        # `_distance` nor `_score` (sink.hits.ranked_hits says more); the k rows are read whole
        rows = hybrid_query(table, vec, text, k, exact=True).where(scope, prefilter=True).to_arrow()
        rows = rows.select(["doc_id", "char_start", "char_end"]).to_pylist()
        out.append([(r["doc_id"], (r["char_start"], r["char_end"])) for r in rows])
    return out
