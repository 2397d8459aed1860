"""Granularities side by side (issue 29): each granularity's late, naive and hybrid rankings, and small-to-big.

The tables of one table definition's granularities
(:func:`~latechunk_dagster.sink.granularity_tables.granularity_tables`, finest first) are
evaluated on the same queries:

* **late**, **naive**, **hybrid** of each granularity: as
  :func:`~latechunk_dagster.evaluation.retrieval.evaluate_rows` on that granularity's rows alone;
* **blend a=0.25/0.5/0.75** of each granularity (and the table's own weight): the late and naive
  vectors mixed (:mod:`latechunk_dagster.evaluation.blends`; issue 48);
* **small-to-big** of each granularity but the last: its rows ranked by their late vectors (exact
  cosine, every candidate), each replaced by its *parent* (``parent_chunk_id``: the chunk of the
  next granularity that holds most of its tokens), a parent already ranked dropped (duplicates
  merged), until ``k`` distinct parents; a hit is judged on the parent's document and char range
  (the relevance rule of :mod:`~latechunk_dagster.evaluation.metrics`). It is what a user gets who
  matches on the small chunks and reads the big ones. Also matched on each blend's vectors
  (``small_to_big_blend50_<g>`` ...).

A query is evaluated when one of its documents is among the candidate rows of every granularity
(the granularities of one table definition hold the same documents), so every method is scored on
the same queries and the bootstrap intervals of their differences pair query with query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.evaluation.blends import ranked_vectors, table_blend
from latechunk_dagster.evaluation.metrics import Hit, metric_names
from latechunk_dagster.evaluation.queries import LabeledQuery
from latechunk_dagster.evaluation.report import GranularityEvalReport
from latechunk_dagster.evaluation.retrieval import (
    hybrid_hits,
    kept_queries,
    naive_vectors,
    row_hits,
    score_rankings,
    top_k,
    usable_rows,
)


def evaluate_granularity_rows(
    chunker: LateChunker,
    rows: Mapping[str, pa.Table],
    queries: Sequence[LabeledQuery],
    *,
    k: int = 10,
    bootstrap_samples: int = 2000,
    seed: int = 0,
    hybrid: Mapping[str, tuple[Any, str | None]] | None = None,
) -> GranularityEvalReport:
    """Every granularity's late, naive (and hybrid) ranking and small-to-big, on the same queries.

    Args:
        rows: granularity name -> its chunk rows
            (:data:`~latechunk_dagster.evaluation.retrieval.COLUMNS` and ``parent_chunk_id``),
            finest first: the parents of a granularity's rows are rows of the next one.
        hybrid: granularity name -> ``(table, where)``: also score LanceDB's hybrid search on that
            granularity's table (module docstring of :mod:`~latechunk_dagster.evaluation.retrieval`);
            granularities not named get no hybrid row.

    Returns:
        A :class:`~latechunk_dagster.evaluation.report.GranularityEvalReport` (methods ``late_<g>``,
        ``naive_<g>``, ``hybrid_<g>``, ``small_to_big_<g>``; scores float64 ``[n_queries, n_metrics]``).

    Raises:
        ValueError: fewer than two granularities; rows of another model
            (:func:`~latechunk_dagster.sink.search.lineage_difference`); a granularity without rows
            with text; no query left; a row of a granularity but the last without a parent among
            the next granularity's rows (names the chunk and both granularities); a naive
            embedding failed; a query that is not valid Unicode.
        QueryFileError: a passage starts after the end of its document's chunks (names the line).
    """
    names = metric_names(k)
    order = list(rows)
    if len(order) < 2:
        raise ValueError(f"comparing granularities needs at least two, got {order}")
    usable = {g: usable_rows(chunker, rows[g]) for g in order}
    kept, skipped = kept_queries(queries, usable)
    texts = [q.query for q in kept]
    qvecs = chunker.embed_queries(texts)  # shape: [n_queries, dim]
    scores: dict[str, np.ndarray] = {}
    weights = {g: table_blend(usable[g]) for g in order}
    for i, g in enumerate(order):
        hits = row_hits(usable[g])
        stored = np.asarray(usable[g].column("vector").to_pylist(), dtype=np.float32)  # shape: [n_chunks, dim]
        naive = naive_vectors(chunker, usable[g].column("text").to_pylist(), usable[g].column("chunk_id").to_pylist())
        methods = ranked_vectors(stored, naive, weights[g])  # late, naive, every blend weight (evaluation.blends)
        for method, vectors in methods.items():
            ranked = top_k(qvecs, vectors, k)
            scores[f"{method}_{g}"] = score_rankings([[hits[j] for j in r] for r in ranked], kept, k)
        if hybrid is not None and g in hybrid:
            table, where = hybrid[g]
            scores[f"hybrid_{g}"] = score_rankings(hybrid_hits(table, where, texts, qvecs, k), kept, k)
        if i + 1 < len(order):
            parents = parent_hits(usable[g], rows[order[i + 1]], g, order[i + 1])
            for method, vectors in methods.items():
                if method != "naive":  # small-to-big matches on late (or blended) vectors
                    name = "small_to_big" if method == "late" else f"small_to_big_{method}"
                    scores[f"{name}_{g}"] = score_rankings(small_to_big(qvecs, vectors, parents, k), kept, k)
    return GranularityEvalReport(
        k=k,
        metrics=names,
        queries=texts,
        granularities=order,
        scores=scores,
        chunks={g: usable[g].num_rows for g in order},
        chunks_without_text=sum(rows[g].num_rows - usable[g].num_rows for g in order),
        skipped=skipped,
        strategies={g: ", ".join(sorted(set(usable[g].column("strategy").to_pylist()))) for g in order},
        bootstrap_samples=bootstrap_samples,
        seed=seed,
        blend=weights[order[0]],
    )


def parent_hits(fine: pa.Table, coarse: pa.Table, fine_name: str, coarse_name: str) -> list[tuple[int, Hit]]:
    """Per row of ``fine``, its parent as ``(row index in coarse, (doc_id, char range))``.

    Raises:
        ValueError: a row without ``parent_chunk_id``, or whose parent is not among ``coarse``'s
            rows (names the chunk: a table written before granularities, another filter, or a
            granularity table written alone).
    """
    if "parent_chunk_id" not in fine.column_names:
        raise ValueError(f"granularity {fine_name!r} has no parent_chunk_id column: its table predates granularities")
    index = {cid: j for j, cid in enumerate(coarse.column("chunk_id").to_pylist())}
    coarse_hits = row_hits(coarse)
    out = []
    for cid, parent in zip(fine.column("chunk_id").to_pylist(), fine.column("parent_chunk_id").to_pylist()):
        j = index.get(parent) if parent is not None else None
        if j is None:
            why = "no parent_chunk_id" if parent is None else f"parent {parent!r}, which is not among its rows"
            raise ValueError(
                f"chunk {cid!r} of granularity {fine_name!r} has {why} in granularity {coarse_name!r}: "
                "small-to-big needs both tables written by one run (and the same filter on both)"
            )
        out.append((j, coarse_hits[j]))
    return out


def small_to_big(
    queries: np.ndarray, fine_vectors: np.ndarray, parents: Sequence[tuple[int, Hit]], k: int
) -> list[list[Hit]]:
    """Per query, the first ``k`` distinct parents of the fine rows ranked by cosine similarity.

    Args:
        queries: float ``[n_queries, dim]``; fine_vectors: float ``[n_fine, dim]`` (the late vectors).
        parents: per fine row, ``(parent key, parent hit)`` (:func:`parent_hits`); two fine rows
            with the same key share one parent, ranked where the better of them ranks.
    """
    order = top_k(queries, fine_vectors, len(parents))
    out = []
    for ranked in order:
        seen: dict[int, Hit] = {}
        for j in ranked:
            key, hit = parents[j]
            seen.setdefault(key, hit)
            if len(seen) == k:
                break
        out.append(list(seen.values()))
    return out
