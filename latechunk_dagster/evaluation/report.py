"""The result of one evaluation: per-query metrics of late, naive (and hybrid), and the tables made from them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from latechunk_dagster.evaluation.metrics import bootstrap_mean_ci

#: Column labels of the printed table, by metric key prefix.
LABELS = {"ndcg": "nDCG", "recall": "R", "mrr": "MRR"}


def label(metric: str) -> str:
    """``"ndcg@10"`` -> ``"nDCG@10"``, ``"recall@5"`` -> ``"R@5"``."""
    name, cut = metric.split("@")
    return f"{LABELS[name]}@{cut}"


def metadata_key(method: str, metric: str) -> str:
    """Float metadata key: ``late_ndcg_at_10``, ``naive_recall_at_1``, ``delta_mrr_at_10``, ``hybrid_...``."""
    return f"{method}_{metric.replace('@', '_at_')}"


@dataclass
class EvalReport:
    """Late vs naive retrieval on one set of chunk rows.

    Attributes:
        k: cutoff (nDCG@k, MRR@k, largest recall cutoff).
        metrics: metric keys, in column order (:func:`~latechunk_dagster.evaluation.metrics.metric_names`).
        queries: the evaluated query texts, in order.
        late, naive: float64 ``[n_queries, n_metrics]`` per-query fractions in [0, 1].
        hybrid: the same for LanceDB's hybrid search over the late vectors, or ``None`` when it
            was not run (a table without the full-text index, or rows without a table).
        chunks: candidate chunks searched; ``chunks_without_text``: rows left out (special tokens only).
        skipped: queries left out because none of their documents is among the rows.
        strategies: the ``strategy`` values of the rows (what cut the chunks).
        bootstrap_samples, seed: of the intervals.
    """

    k: int
    metrics: list[str]
    queries: list[str]
    late: np.ndarray
    naive: np.ndarray
    chunks: int
    chunks_without_text: int = 0
    skipped: list[str] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)
    bootstrap_samples: int = 2000
    seed: int = 0
    hybrid: np.ndarray | None = None

    def methods(self) -> list[str]:
        """The methods scored: ``["late", "naive"]``, plus ``"hybrid"`` when it was run."""
        return ["late", "naive"] + (["hybrid"] if self.hybrid is not None else [])

    def mean(self, method: str) -> dict[str, float]:
        """Mean over queries of each metric, in percent (0-100), for one of :meth:`methods`."""
        arr = self._scores(method)
        return {m: 100.0 * float(arr[:, i].mean()) for i, m in enumerate(self.metrics)}

    def delta(self, first: str = "late", second: str = "naive") -> dict[str, tuple[float, float, float]]:
        """``first`` minus ``second`` per metric (default late minus naive), in percentage points:
        ``(mean, ci_low, ci_high)`` (95% bootstrap over queries)."""
        a, b = self._scores(first), self._scores(second)
        out = {}
        for i, m in enumerate(self.metrics):
            d = 100.0 * (a[:, i] - b[:, i])
            out[m] = bootstrap_mean_ci(d, samples=self.bootstrap_samples, seed=self.seed)
        return out

    def _scores(self, method: str) -> np.ndarray:
        arr = {"late": self.late, "naive": self.naive, "hybrid": self.hybrid}[method]
        if arr is None:
            raise ValueError("this evaluation has no hybrid scores (the table had no full-text index)")
        return arr

    def floats(self) -> dict[str, float]:
        """Every number of the table as a flat dict (percent / points): ``late_ndcg_at_10``,
        ``naive_...``, ``delta_...``, ``delta_..._ci_low`` / ``_ci_high``; with hybrid scores also
        ``hybrid_...`` and ``hybrid_delta_...`` (hybrid minus late) with their intervals."""
        out: dict[str, float] = {}
        for method in self.methods():
            out.update({metadata_key(method, m): v for m, v in self.mean(method).items()})
        pairs = [("delta", "late", "naive")] + ([("hybrid_delta", "hybrid", "late")] if self.hybrid is not None else [])
        for prefix, first, second in pairs:
            for m, (mean, low, high) in self.delta(first, second).items():
                key = metadata_key(prefix, m)
                out[key], out[f"{key}_ci_low"], out[f"{key}_ci_high"] = mean, low, high
        return out

    def markdown(self) -> str:
        """The table (Markdown; readable as plain text too): rows ``late``, ``naive``, ``late - naive``,
        and with hybrid scores ``hybrid`` and ``hybrid - late``."""
        head = "| | " + " | ".join(label(m) for m in self.metrics) + " |"
        rule = "|---|" + "---:|" * len(self.metrics)
        rows = [self._row("late"), self._row("naive"), self._delta_row("late", "naive")]
        if self.hybrid is not None:
            rows += [self._row("hybrid"), self._delta_row("hybrid", "late")]
        return "\n".join([head, rule, *rows])

    def _row(self, method: str) -> str:
        mean = self.mean(method)
        return f"| {method} | " + " | ".join(f"{mean[m]:.1f}" for m in self.metrics) + " |"

    def _delta_row(self, first: str, second: str) -> str:
        d = self.delta(first, second)
        cells = " | ".join(f"{d[m][0]:+.1f} [{d[m][1]:+.1f}, {d[m][2]:+.1f}]" for m in self.metrics)
        return f"| {first} - {second} (95% CI) | {cells} |"

    def caption(self) -> str:
        """One line: what was evaluated and how."""
        text = (
            f"{len(self.queries)} queries over {self.chunks} chunks ({', '.join(self.strategies) or '?'}); "
            f"exact cosine top-{self.k}; percent; CI: {self.bootstrap_samples} bootstrap resamples of the "
            f"queries, seed {self.seed}"
        )
        if self.hybrid is not None:
            text += "; hybrid: LanceDB full-text (BM25) + exact vector search over the late vectors, RRF"
        if self.skipped:
            text += f"; {len(self.skipped)} queries skipped (their documents are not among the rows)"
        if self.chunks_without_text:
            text += f"; {self.chunks_without_text} chunks without text left out"
        return text
