"""The relevance rule, the ranking metrics and the bootstrap interval. numpy only.

**Relevance rule (binary, passage-credited).** A retrieved chunk *matches* a relevant passage
when it is a chunk of the passage's document and its char range overlaps the passage's range
(half-open ranges: ``chunk_start < passage_end and passage_start < chunk_end``); a passage without
a range (document-level) is matched by every chunk of its document. Each relevant passage is
credited **once**, at the rank of the first chunk that matches it:

* gain at rank ``r`` = 1 if the chunk there matches at least one passage not matched above it,
  else 0 (a second chunk of an already-found passage is a duplicate, not a new find);
* ``recall@c`` = found passages within the top ``c`` / relevant passages;
* ``nDCG@k`` = DCG / ideal DCG with ``DCG = sum_r gain_r / log2(r + 1)`` (ranks from 1) and the
  ideal ranking finding one passage per rank: ``IDCG = sum_{r=1..min(k, P)} 1 / log2(r + 1)``
  (Jarvelin & Kekalainen 2002, binary gains as in trec_eval's ``ndcg_cut``);
* ``MRR@k`` = 1 / rank of the first matching chunk within the top ``k``, else 0.

Binary rather than graded because the labels are binary (a passage is relevant or not), and
crediting each passage once keeps the scores comparable across chunk sizes: with smaller chunks a
passage spans more chunks, which must neither raise the ideal nor let one passage fill the top k.
A chunk that covers two passages finds both (recall counts both) but earns gain 1 once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.evaluation.queries import Passage

#: A retrieved chunk as the rule sees it: ``(doc_id, char_range or None)``.
Hit = tuple[str, tuple[int, int] | None]


def matches(hit: Hit, passage: Passage) -> bool:
    """True when ``hit`` is a chunk of ``passage``'s document overlapping its range (module docstring)."""
    doc_id, char_range = hit
    if doc_id != passage.doc_id:
        return False
    if passage.char_range is None:
        return True
    if char_range is None:
        return False
    return char_range[0] < passage.char_range[1] and passage.char_range[0] < char_range[1]


def judge(ranking: Sequence[Hit], passages: Sequence[Passage]) -> tuple[np.ndarray, list[int | None]]:
    """Gains of a ranking and the rank (0-based) at which each passage was first found.

    Returns:
        ``(gains, found)``: ``gains`` float64 ``[len(ranking)]`` of 0/1; ``found[j]`` the 0-based
        rank of the first hit matching ``passages[j]``, ``None`` if none does.
    """
    gains = np.zeros(len(ranking), dtype=np.float64)
    found: list[int | None] = [None] * len(passages)
    for rank, hit in enumerate(ranking):
        for j, passage in enumerate(passages):
            if found[j] is None and matches(hit, passage):
                found[j] = rank
                gains[rank] = 1.0
    return gains, found


def metric_names(k: int) -> list[str]:
    """Metric keys for cutoff ``k``: ``ndcg@k``, ``recall@c`` for ``c`` in {1, 5, k} up to ``k``, ``mrr@k``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return [f"ndcg@{k}", *(f"recall@{c}" for c in sorted({1, 5, k}) if c <= k), f"mrr@{k}"]


def query_metrics(gains: np.ndarray, found: Sequence[int | None], k: int) -> dict[str, float]:
    """The metrics of one query (fractions in [0, 1]) from :func:`judge`'s output.

    Args:
        gains: float ``[n_ranked]`` 0/1 gains (only the first ``k`` are used).
        found: 0-based first-found rank of each relevant passage (``None``: not found).
        k: cutoff of nDCG and MRR, and the largest recall cutoff.
    """
    if not found:
        raise ValueError("a query needs at least one relevant passage")
    g = np.asarray(gains, dtype=np.float64)[:k]
    discounts = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))  # rank r (1-based) -> 1/log2(r+1)
    dcg = float((g * discounts[: len(g)]).sum())
    idcg = float(discounts[: min(k, len(found))].sum())
    out = {f"ndcg@{k}": dcg / idcg}
    for name in metric_names(k)[1:-1]:
        c = int(name.split("@")[1])
        out[name] = sum(1 for f in found if f is not None and f < c) / len(found)
    first = np.flatnonzero(g > 0)
    out[f"mrr@{k}"] = 1.0 / (first[0] + 1) if first.size else 0.0
    return out


def bootstrap_mean_ci(
    values: np.ndarray, *, samples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """Mean of ``values`` and its percentile-bootstrap interval over queries.

    Args:
        values: float ``[n_queries]``, e.g. per-query late minus naive differences.
        samples: bootstrap resamples (queries drawn with replacement, ``n_queries`` each).
        seed: ``numpy.random.default_rng`` seed: the same inputs give the same interval.
        level: two-sided coverage (0.95: the 2.5th and 97.5th percentiles of the resampled means).

    Returns:
        ``(mean, low, high)`` in the units of ``values``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"need a non-empty 1-D array of per-query values, got shape {v.shape}")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(samples, v.size))].mean(axis=1)  # shape: [samples]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(v.mean()), float(low), float(high)
