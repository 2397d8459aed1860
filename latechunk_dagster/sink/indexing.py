"""Indexes over the chunk table, built with LanceDB's own APIs, and the vector query every search uses.

The vector index and its search settings were chosen by measurement (``bench/ann_recall.py``):
on 12,000 clustered unit vectors (384 dims, 300 topics, neighbours close together, the hard
case for quantization) LanceDB's previous default, ``IVF_PQ`` with ``sqrt(rows)`` partitions
and 48 sub-vectors searched with LanceDB's defaults, found 0.25-0.28 of the exact top 10.
``IVF_HNSW_SQ`` (a graph per partition over 8-bit scalar-quantized vectors), searched with
``ef=SEARCH_EF`` and the candidates re-ranked on the full vectors (``refine_factor``), found
0.98-1.0 of them. :func:`refresh_indexes` measures the recall again on a sample of the real
table every time it builds the index and reports it, so a table where it is lower is seen.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
from lancedb.index import FTS, Bitmap, BTree

from latechunk_dagster.sink.retry import retry_commit

T = TypeVar("T")

log = logging.getLogger(__name__)
#: Below this many rows a flat (brute-force) scan is exact and fast enough; an index needs
#: enough rows to train its partitions and pays off only on large tables.
ANN_MIN_ROWS = 50_000
#: Rows per IVF partition of the HNSW index (one graph per partition); LanceDB probes
#: ``nprobes`` partitions (at least 20 by default), so below 20M rows every partition is searched.
ROWS_PER_PARTITION = 1_000_000
#: HNSW graph degree and build beam: m=32 measured 1.0 recall@10 where m=20 gave 0.96-0.98.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 300
#: Search beam of the HNSW graph (candidates examined per partition); at least ``k``.
SEARCH_EF = 200
#: Re-rank ``refine_factor * k`` candidates on the full float32 vectors (the index holds 8-bit ones).
SEARCH_REFINE_FACTOR = 5
#: Stored vectors used as queries when :func:`refresh_indexes` measures recall@10.
RECALL_SAMPLE = 50
#: Recall below this is flagged in the report (``recall_ok: False``) and logged.
RECALL_TARGET = 0.95


def vector_query(table: Any, vector: np.ndarray | list[np.ndarray], k: int, *, exact: bool = False) -> Any:
    """The LanceDB query of the ``k`` nearest chunks by cosine distance, with this module's settings.

    Args:
        table: the chunk table.
        vector: float32 ``[dim]`` query vector, or a list of them (one pass; rows carry ``query_index``).
        exact: scan every row (``bypass_vector_index``): exact top-``k``, cost linear in rows.

    Returns:
        A LanceDB query builder; add ``.where``/``.select`` and call ``.to_list()``.
        Without an index on the table the search is an exact scan either way.
    """
    q: Any = table.search(vector, vector_column_name="vector").distance_type("cosine").limit(k)
    if exact:
        return q.bypass_vector_index()
    return q.ef(max(SEARCH_EF, k)).refine_factor(SEARCH_REFINE_FACTOR)


def hybrid_query(
    table: Any, vector: np.ndarray, text: str, k: int, *, exact: bool = False, reranker: Any = None
) -> Any:
    """LanceDB's hybrid query: full-text search of ``text`` on the ``text`` column's index and the
    cosine vector search of ``vector`` (settings of :func:`vector_query`), ``k`` rows each, fused by
    ``reranker`` (``None``: LanceDB's default, ``RRFReranker()``, reciprocal rank fusion with K=60)
    into the best ``k``.

    Returns:
        A LanceDB hybrid query builder; add ``.where``/``.select`` and call ``.to_arrow()`` (rows
        carry ``_relevance_score``, the reranker's score, best first).
    """
    q: Any = table.search(query_type="hybrid", vector_column_name="vector").vector(vector).text(text)
    q = q.distance_type("cosine").limit(k)
    q = q.bypass_vector_index() if exact else q.ef(max(SEARCH_EF, k)).refine_factor(SEARCH_REFINE_FACTOR)
    return q if reranker is None else q.rerank(reranker)


def has_fts_index(table: Any, column: str = "text") -> bool:
    """Whether ``table`` has a full-text index on ``column`` (hybrid search needs it)."""
    return any(i.index_type == "FTS" and list(i.columns) == [column] for i in table.list_indices())


def search_settings() -> str:
    """The approximate search settings, as recorded in the index report."""
    return f"ef={SEARCH_EF}, refine_factor={SEARCH_REFINE_FACTOR}, nprobes=LanceDB default (>= 20)"


def measure_recall(table: Any, *, k: int = 10, sample: int = RECALL_SAMPLE, seed: int = 0) -> float:
    """Mean recall@``k`` of :func:`vector_query` against an exact scan, on stored vectors as queries.

    ``sample`` rows are drawn at random (fixed ``seed``); each row's vector is a query whose
    exact top ``k`` is taken with ``exact=True``. Returns a float in ``[0, 1]``.
    """
    rows = table.count_rows()
    rng = np.random.default_rng(seed)
    offsets = sorted(int(i) for i in rng.choice(rows, min(sample, rows), replace=False))
    vectors = table.take_offsets(offsets).select(["vector"]).to_arrow().column("vector").to_pylist()
    queries = [np.asarray(v, dtype=np.float32) for v in vectors]

    def top(exact: bool) -> list[set[str]]:
        # One multi-vector query: one pass over the rows for all the queries (rows carry query_index).
        rows = vector_query(table, queries, k, exact=exact).select(["chunk_id", "_distance"]).to_list()
        out: list[set[str]] = [set() for _ in queries]
        for r in rows:
            out[r["query_index"]].add(r["chunk_id"])
        return out

    got, truth = top(exact=False), top(exact=True)
    return float(np.mean([len(g & t) / max(1, len(t)) for g, t in zip(got, truth)]))


def index_commit(table: Any, what: str, commit: Callable[[], T]) -> T:
    """Run one index or compaction commit of ``table``, retried while a concurrent writer's commit wins.

    A partition commit that lands while the table is compacted (or an index is built) makes
    LanceDB refuse ours with "Retryable commit conflict ... Please retry" (lance 13: a Rewrite
    preempted by a concurrent Update of the fragments it rewrote); the commit is made again on
    the latest version, with the bounded backoff of :func:`~latechunk_dagster.sink.retry.retry_commit`.

    Raises:
        CommitConflictError: still conflicting after ``COMMIT_ATTEMPTS`` attempts (nothing of this
            commit was written; the table is as the writers left it).
    """
    result, _ = retry_commit(commit, what=f"{what} of {table.name!r}", refresh=table.checkout_latest)
    return result


def build_vector_index(table: Any, rows: int) -> dict[str, Any]:
    """Build (replace) the ``IVF_HNSW_SQ`` cosine index on ``vector``; returns its parameters."""
    from lancedb.index import HnswSq

    parts = max(1, math.ceil(rows / ROWS_PER_PARTITION))
    config = HnswSq(distance_type="cosine", num_partitions=parts, m=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION)
    index_commit(table, "vector index", lambda: table.create_index("vector", config=config, replace=True))
    return {
        "type": "IVF_HNSW_SQ",
        "metric": "cosine",
        "partitions": parts,
        "m": HNSW_M,
        "ef_construction": HNSW_EF_CONSTRUCTION,
    }


def refresh_indexes(table: Any, *, ann_min_rows: int = ANN_MIN_ROWS) -> dict[str, Any]:
    """Build or refresh the chunk table's indexes, then compact and prune old versions.

    * vector: ``IVF_HNSW_SQ`` with cosine distance once the table has ``ann_min_rows`` rows
      (one partition per ``ROWS_PER_PARTITION`` rows, ``m=HNSW_M``); below that searches
      scan every row exactly. After building, recall@10 of the default search against an
      exact scan is measured on ``RECALL_SAMPLE`` stored vectors.
    * ``text``: LanceDB full-text index. ``doc_id``: BTREE; ``partition``: BITMAP.
    * ``optimize``: compacts fragments and removes versions older than one day.

    Each of these commits is retried when a writer's commit lands during it (:func:`index_commit`),
    so the refresh runs beside partition writers.

    Raises:
        CommitConflictError: a commit still lost to concurrent writers after every retry.

    Returns:
        A report for materialization metadata: ``rows``, ``vector_index`` (type and
        parameters), ``search`` (the query settings), ``recall_at_10`` (float, or ``1.0`` for
        an exact scan), ``recall_sample`` (queries measured), ``recall_ok`` (``recall_at_10 >=
        RECALL_TARGET``), the other indexes and the table ``version``.
    """
    rows = table.count_rows()
    report: dict[str, Any] = {"rows": rows}
    if rows == 0:
        report["indexes"] = "none (empty table)"
        return report
    if rows >= ann_min_rows:
        params = build_vector_index(table, rows)
        report["vector_index"] = ", ".join(f"{k}={v}" for k, v in params.items())
        report["search"] = search_settings()
        report["recall_at_10"] = round(measure_recall(table), 4)
        report["recall_sample"] = min(RECALL_SAMPLE, rows)
    else:
        for index in table.list_indices():  # a table that shrank: an old index would still be searched
            if list(index.columns) == ["vector"]:
                index_commit(table, f"drop index {index.name!r}", lambda name=index.name: table.drop_index(name))
        report["vector_index"] = f"none: flat scan (rows < {ann_min_rows})"
        report["search"] = "exact scan"
        report["recall_at_10"] = 1.0
        report["recall_sample"] = 0
    report["recall_ok"] = report["recall_at_10"] >= RECALL_TARGET
    if not report["recall_ok"]:
        log.warning(
            "approximate search found %.3f of the exact top 10 on %d sampled rows (target %.2f); "
            "search(..., exact=True) scans every row",
            report["recall_at_10"],
            report["recall_sample"],
            RECALL_TARGET,
        )
    # LanceDB's one create_index (create_fts_index / create_scalar_index are deprecated since 0.25);
    # FTS() has create_fts_index's defaults (the simple tokenizer, English stemming, stop words)
    index_commit(table, "full-text index", lambda: table.create_index("text", config=FTS(), replace=True))
    index_commit(table, "doc_id index", lambda: table.create_index("doc_id", config=BTree(), replace=True))
    index_commit(table, "partition index", lambda: table.create_index("partition", config=Bitmap(), replace=True))
    report["fts_index"] = "text"
    report["scalar_indexes"] = "doc_id (BTREE), partition (BITMAP)"
    index_commit(table, "compaction", lambda: table.optimize(cleanup_older_than=timedelta(days=1)))
    report["version"] = table.version
    return report
