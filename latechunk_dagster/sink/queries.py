"""The LanceDB queries every search runs, with the settings the vector index was measured with.

:func:`vector_query` (the ``k`` nearest chunks by cosine distance) and :func:`hybrid_query` (LanceDB's
hybrid query, full text and vectors fused) are the only places a search's index settings are set:
``ef``, ``nprobes`` and the re-rank (:func:`_approximate`), chosen by measurement (``bench/ann_recall.py``,
``bench/index_refresh.py``; :mod:`latechunk_dagster.sink.indexing` builds the index they search).
:func:`measure_recall` measures recall@10 through :func:`vector_query` against an exact scan.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

#: Search beam of the HNSW graph (candidates examined per partition); at least ``k``. 800: 0.980
#: recall@10 at 153k rows in 19 ms a query (ef 400: 0.915; ef 200: 0.815), where the re-rank
#: (``refine_factor`` 5 to 40) changed nothing: the graph search is what misses neighbours.
SEARCH_EF = 800
#: IVF partitions (HNSW graphs) a search probes: every graph of a table of up to 64 (3.2M rows at
#: ``sink.indexing.ROWS_PER_PARTITION``), the 64 whose centroids are nearest above that. Measured at
#: 1.4M rows (27 graphs, ``bench/index_refresh.py --scale 100``, hard synthetic vectors): LanceDB's
#: default of 20 found 0.924 of the exact top 10 fresh and 0.860 after a 10% delta; every graph
#: probed, 0.983 fresh and 0.988 after the delta. Search time grows with the graphs probed (each is
#: searched with ``SEARCH_EF``): at 27 graphs 84.5 ms a query against 64.9 ms probing 20
#: (``bench/search_probes.py --scale 100``; an exact scan 902 ms).
SEARCH_NPROBES = 64
#: Re-rank ``refine_factor * k`` candidates on the full float32 vectors (the index holds 8-bit ones).
SEARCH_REFINE_FACTOR = 5
#: Stored vectors used as queries when :func:`measure_recall` measures recall@10 (a refresh's sample).
RECALL_SAMPLE = 50


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
    return _approximate(q, k)


def _approximate(q: T, k: int) -> T:
    """``q`` with this module's approximate search settings: ``ef``, ``nprobes`` and the re-rank."""
    return q.nprobes(SEARCH_NPROBES).ef(max(SEARCH_EF, k)).refine_factor(SEARCH_REFINE_FACTOR)  # type: ignore[attr-defined,no-any-return]


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
    q = q.bypass_vector_index() if exact else _approximate(q, k)
    return q if reranker is None else q.rerank(reranker)


def has_fts_index(table: Any, column: str = "text") -> bool:
    """Whether ``table`` has a full-text index on ``column`` (hybrid search needs it)."""
    return any(i.index_type == "FTS" and list(i.columns) == [column] for i in table.list_indices())


def search_settings() -> str:
    """The approximate search settings, as recorded in the index report."""
    return f"ef={SEARCH_EF}, refine_factor={SEARCH_REFINE_FACTOR}, nprobes={SEARCH_NPROBES}"


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
