"""The result of one evaluation: per-query metrics of late, naive (and hybrid), and the tables made from them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from latechunk_dagster.evaluation.blends import blend_kind, weight_of
from latechunk_dagster.evaluation.metrics import bootstrap_mean_ci

#: Column labels of the printed table, by metric key prefix.
LABELS = {"ndcg": "nDCG", "recall": "R", "mrr": "MRR"}


def kind_label(kind: str) -> str:
    """A method kind as tables print it: ``blend50`` -> ``blend a=0.5``; ``late``, ``naive``, ``hybrid`` as they are."""
    weight = weight_of(kind)
    return f"blend a={weight:g}" if kind.startswith("blend") and weight is not None else kind


def label(metric: str) -> str:
    """``"ndcg@10"`` -> ``"nDCG@10"``, ``"recall@5"`` -> ``"R@5"``."""
    name, cut = metric.split("@")
    return f"{LABELS[name]}@{cut}"


def metadata_key(method: str, metric: str) -> str:
    """Float metadata key: ``late_ndcg_at_10``, ``naive_recall_at_1``, ``delta_mrr_at_10``, ``hybrid_...``."""
    return f"{method}_{metric.replace('@', '_at_')}"


def method_means(scores: np.ndarray, metrics: list[str]) -> dict[str, float]:
    """Mean over queries of each metric column of ``scores`` (float ``[n_queries, n_metrics]``), in percent."""
    return {m: 100.0 * float(scores[:, i].mean()) for i, m in enumerate(metrics)}


def paired_delta(
    first: np.ndarray, second: np.ndarray, metrics: list[str], samples: int, seed: int
) -> dict[str, tuple[float, float, float]]:
    """``first`` minus ``second`` per metric in percentage points, paired by query:
    ``(mean, ci_low, ci_high)`` (95% percentile bootstrap over queries, :func:`bootstrap_mean_ci`)."""
    return {
        m: bootstrap_mean_ci(100.0 * (first[:, i] - second[:, i]), samples=samples, seed=seed)
        for i, m in enumerate(metrics)
    }


def table_head(metrics: list[str]) -> list[str]:
    """The header and rule lines of a report table."""
    return ["| | " + " | ".join(label(m) for m in metrics) + " |", "|---|" + "---:|" * len(metrics)]


def mean_row(name: str, mean: dict[str, float], metrics: list[str]) -> str:
    """One table row of means (percent, one decimal)."""
    return f"| {name} | " + " | ".join(f"{mean[m]:.1f}" for m in metrics) + " |"


def delta_row(name: str, delta: dict[str, tuple[float, float, float]], metrics: list[str]) -> str:
    """One table row of differences with their intervals: ``+1.2 [-0.3, +2.8]``."""
    cells = " | ".join(f"{delta[m][0]:+.1f} [{delta[m][1]:+.1f}, {delta[m][2]:+.1f}]" for m in metrics)
    return f"| {name} (95% CI) | {cells} |"


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
    blends: dict[str, np.ndarray] = field(default_factory=dict)
    blend: float = 1.0

    def methods(self) -> list[str]:
        """The methods scored: ``["late", "naive"]``, plus ``"hybrid"`` when it was run, then the blends
        (``blend50`` ...)."""
        return ["late", "naive"] + (["hybrid"] if self.hybrid is not None else []) + list(self.blends)

    def split(self, method: str) -> tuple[str, str]:
        """``(kind, "")``: one table has no granularity."""
        return method, ""

    def setting(self, method: str) -> str:
        """The settings that select ``method``: the blend weight (and hybrid search)."""
        weight = self.blend if method == "hybrid" else weight_of(method)
        return f"blend={weight:g}" + (", latechunk search --hybrid" if method == "hybrid" else "")

    def default_method(self) -> str:
        """The configuration the table serves: its stored vectors at the table's weight."""
        kind = {1.0: "late", 0.0: "naive"}.get(self.blend, blend_kind(self.blend))
        return kind if kind in self.methods() else "late"

    def best(self, metric: str | None = None) -> str:
        """:func:`best_line` of this report (default metric nDCG@k)."""
        return best_line(self, metric or self.metrics[0])

    def mean(self, method: str) -> dict[str, float]:
        """Mean over queries of each metric, in percent (0-100), for one of :meth:`methods`."""
        return method_means(self._scores(method), self.metrics)

    def delta(self, first: str = "late", second: str = "naive") -> dict[str, tuple[float, float, float]]:
        """``first`` minus ``second`` per metric (default late minus naive), in percentage points:
        ``(mean, ci_low, ci_high)`` (95% bootstrap over queries)."""
        return paired_delta(self._scores(first), self._scores(second), self.metrics, self.bootstrap_samples, self.seed)

    def _scores(self, method: str) -> np.ndarray:
        arr = {"late": self.late, "naive": self.naive, "hybrid": self.hybrid, **self.blends}[method]
        if arr is None:
            raise ValueError("this evaluation has no hybrid scores (the table had no full-text index)")
        return arr

    def floats(self) -> dict[str, float]:
        """Every number of the table as a flat dict (percent / points): ``late_ndcg_at_10``,
        ``naive_...``, ``delta_...``, ``delta_..._ci_low`` / ``_ci_high``; with hybrid scores also
        ``hybrid_...`` and ``hybrid_delta_...`` (hybrid minus late) with their intervals."""
        out: dict[str, float] = {metadata_key("default", m): v for m, v in self.mean(self.default_method()).items()}
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
        rows = [self._row("late"), self._row("naive"), self._delta_row("late", "naive")]
        if self.hybrid is not None:
            rows += [self._row("hybrid"), self._delta_row("hybrid", "late")]
        rows += [self._row(m) for m in self.blends]
        return "\n".join([*table_head(self.metrics), *rows])

    def method_label(self, method: str) -> str:
        """The name of a method in tables and plots (the method itself; ``blend50``: ``blend a=0.5``)."""
        return kind_label(method)

    def _row(self, method: str) -> str:
        return mean_row(method, self.mean(method), self.metrics)

    def _delta_row(self, first: str, second: str) -> str:
        return delta_row(f"{first} - {second}", self.delta(first, second), self.metrics)

    def caption(self) -> str:
        """One line: what was evaluated and how."""
        text = (
            f"{len(self.queries)} queries over {self.chunks} chunks ({', '.join(self.strategies) or '?'}); "
            f"exact cosine top-{self.k}; percent; CI: {self.bootstrap_samples} bootstrap resamples of the "
            f"queries, seed {self.seed}"
        )
        return text + _caption_notes(self.hybrid is not None, len(self.skipped), self.chunks_without_text)


@dataclass
class GranularityEvalReport:
    """Granularities of one table definition side by side (:mod:`latechunk_dagster.evaluation.granularity`).

    Attributes:
        k, metrics, queries, bootstrap_samples, seed: as :class:`EvalReport`.
        granularities: the granularity names, finest first.
        scores: method -> float64 ``[n_queries, n_metrics]`` per-query fractions in [0, 1]; methods
            ``late_<g>``, ``naive_<g>``, ``hybrid_<g>`` (where the table has the full-text index)
            per granularity ``g``, and ``small_to_big_<g>`` for each granularity but the last
            (matched on ``g``'s vectors, judged on the parents in the next granularity).
        chunks: granularity -> candidate chunks searched; ``chunks_without_text``: rows left out.
        skipped: queries left out because none of their documents is among every granularity's rows.
        strategies: granularity -> the ``strategy`` of its rows.
        blend: the weight the table's vectors were written with (:mod:`latechunk_dagster.evaluation.blends`).

    Blend methods (issue 48): ``blend<NN>_<g>`` (the late vector's weight in percent) and
    ``small_to_big_blend<NN>_<g>``; :meth:`best` names the best of every method and its setting.
    """

    k: int
    metrics: list[str]
    queries: list[str]
    granularities: list[str]
    scores: dict[str, np.ndarray]
    chunks: dict[str, int]
    chunks_without_text: int = 0
    skipped: list[str] = field(default_factory=list)
    strategies: dict[str, str] = field(default_factory=dict)
    bootstrap_samples: int = 2000
    seed: int = 0
    blend: float = 1.0

    def methods(self) -> list[str]:
        """The methods scored, in table order: per granularity late, blends, naive, hybrid; then small-to-big."""
        return [m for m in self.scores if not m.startswith("small_to_big_")] + [
            m for m in self.scores if m.startswith("small_to_big_")
        ]

    def split(self, method: str) -> tuple[str, str]:
        """``(kind, granularity)`` of a method (``small_to_big_blend50_sent``: ``small_to_big_blend50``, ``sent``)."""
        for g in sorted(self.granularities, key=len, reverse=True):
            if method.endswith(f"_{g}"):
                return method[: -len(g) - 1], g
        raise ValueError(f"no granularity of {self.granularities} ends method {method!r}")

    def method_label(self, method: str) -> str:
        """``late_small`` -> ``late small``; ``small_to_big_small`` -> ``small-to-big small -> medium``;
        ``blend50_small`` -> ``blend a=0.5 small``; ``small_to_big_blend50_small`` -> ``small-to-big blend a=0.5
        small -> medium``."""
        kind, g = self.split(method)
        if kind.startswith("small_to_big"):
            inner = kind[len("small_to_big_") :]
            return f"small-to-big {kind_label(inner) + ' ' if inner else ''}{g} -> {self._next(g)}"
        return f"{kind_label(kind)} {g}"

    def setting(self, method: str) -> str:
        """The settings that select ``method``: the blend weight (``LateChunker(blend=...)``, the engine
        resource's and Airflow's ``blend`` setting) and how the table is searched."""
        kind, g = self.split(method)
        inner = kind[len("small_to_big_") :] if kind.startswith("small_to_big") else kind
        weight = self.blend if inner == "hybrid" else weight_of(inner or "late")
        text = f"blend={weight:g}"
        if kind.startswith("small_to_big"):
            return text + f", match on {g}, read the {self._next(g)} parents (small-to-big, latechunk search's default)"
        mode = " --hybrid" if inner == "hybrid" else ""
        return text + f", search {g} alone (latechunk search --granularity {g}{mode})"

    def mean(self, method: str) -> dict[str, float]:
        """Mean over queries of each metric, in percent (0-100), for one of :meth:`methods`."""
        return method_means(self._scores(method), self.metrics)

    def delta(self, first: str, second: str) -> dict[str, tuple[float, float, float]]:
        """``first`` minus ``second`` per metric, in percentage points: ``(mean, ci_low, ci_high)``
        (95% bootstrap over queries, paired)."""
        return paired_delta(self._scores(first), self._scores(second), self.metrics, self.bootstrap_samples, self.seed)

    def comparisons(self) -> list[tuple[str, str, str]]:
        """The differences the table shows, as ``(float key prefix, first, second)``: per granularity
        late - naive (``delta_<g>``) and hybrid - late (``hybrid_delta_<g>``); small-to-big minus
        the late ranking of the parents' granularity itself (``small_to_big_delta_<g>``)."""
        out = []
        for g in self.granularities:
            out.append((f"delta_{g}", f"late_{g}", f"naive_{g}"))
            if f"hybrid_{g}" in self.scores:
                out.append((f"hybrid_delta_{g}", f"hybrid_{g}", f"late_{g}"))
        for g in self.granularities[:-1]:
            out.append((f"small_to_big_delta_{g}", f"small_to_big_{g}", f"late_{self._next(g)}"))
        return out

    def contenders(self) -> list[str]:
        """The ways the late vectors retrieve, which :meth:`winner` ranks: ``late_<g>`` of every
        granularity and every ``small_to_big_<g>`` (naive and hybrid are each granularity's
        baselines, compared within its rows of the table; the blends compete in :meth:`best`)."""
        return [m for m in self.methods() if self.split(m)[0] in ("late", "small_to_big")]

    def default_method(self) -> str:
        """The configuration the table serves: small-to-big on its finest granularity's stored vectors
        (``latechunk search``'s default), at the table's weight (a table of chunks alone: naive)."""
        finest = self.granularities[0]
        kind = "" if self.blend == 1.0 else blend_kind(self.blend)
        method = f"small_to_big_{kind}_{finest}" if kind else f"small_to_big_{finest}"
        return method if method in self.scores else f"naive_{finest}"

    def best(self, metric: str | None = None) -> str:
        """:func:`best_line` of this report (default metric nDCG@k)."""
        return best_line(self, metric or self.metrics[0])

    def winner(self, metric: str | None = None) -> tuple[str, str]:
        """``(best, runner-up)`` of :meth:`contenders` by mean ``metric`` (default the first,
        nDCG@k); on a tie the earlier in the table wins."""
        metric = metric or self.metrics[0]
        ranked = sorted(self.contenders(), key=lambda m: -self.mean(m)[metric])  # stable: ties keep table order
        return ranked[0], ranked[1]

    def verdict(self, metric: str | None = None) -> str:
        """One line: which granularity's late chunks (or small-to-big) win on ``metric`` (default
        nDCG@k), by how much over the runner-up (:meth:`winner`), with the 95% interval of the
        difference. Only the late-chunked rankings compete (:meth:`contenders`); the naive and hybrid
        rows of the table are references, which the line says."""
        metric = metric or self.metrics[0]
        best, second = self.winner(metric)
        mean, low, high = self.delta(best, second)[metric]
        text = (
            f"best late chunking on {label(metric)}: {self.method_label(best)} ({self.mean(best)[metric]:.1f}), "
            f"{mean:+.1f} [{low:+.1f}, {high:+.1f}] points over {self.method_label(second)} "
            f"({self.mean(second)[metric]:.1f})"
        )
        if low <= 0.0:
            text += "; the interval holds 0: not a clear win on these queries"
        return text + " (naive and hybrid rows: references, not contenders)"

    def floats(self) -> dict[str, float]:
        """Every number of the table as a flat dict (percent / points): each method's means
        (``late_small_ndcg_at_10``, ``small_to_big_small_recall_at_5`` ...), each comparison's
        difference and interval (``delta_small_ndcg_at_10``, ``..._ci_low`` / ``_ci_high``), and the
        finest granularity's under the single-table keys (``late_ndcg_at_10``, ``naive_...``,
        ``delta_...``, ``hybrid_...``, ``hybrid_delta_...``), which the check of the
        ``retrieval_eval`` asset reads."""
        finest = self.granularities[0]
        single = {f"{kind}_{finest}": kind for kind in ("late", "naive", "hybrid", "delta", "hybrid_delta")}
        out: dict[str, float] = {
            metadata_key("default", m): v for m, v in self.mean(self.default_method()).items()
        }  # the configuration the table serves (the check's subject)
        for method in self.methods():
            for m, v in self.mean(method).items():
                out[metadata_key(method, m)] = v
                if method in single:
                    out[metadata_key(single[method], m)] = v
        for prefix, first, second in self.comparisons():
            for m, values in self.delta(first, second).items():
                for name in (prefix, single.get(prefix)):
                    if name is not None:
                        key = metadata_key(name, m)
                        out[key], out[f"{key}_ci_low"], out[f"{key}_ci_high"] = values
        return out

    def markdown(self) -> str:
        """The table (Markdown): per granularity, finest first, rows ``late g``, ``naive g``,
        ``late g - naive g`` (and ``hybrid g``, ``hybrid g - late g``); then per granularity but the
        last ``small-to-big g -> next`` and its difference from ``late next``; then the blends' rows."""
        rows = []
        for prefix, first, second in self.comparisons():
            for method in (first, second):
                if method not in [r[0] for r in rows]:
                    rows.append((method, mean_row(self.method_label(method), self.mean(method), self.metrics)))
            name = f"{self.method_label(first)} - {self.method_label(second)}"
            rows.append((prefix, delta_row(name, self.delta(first, second), self.metrics)))
        shown = {r[0] for r in rows}
        rest = [m for m in self.methods() if m not in shown]
        rows += [(m, mean_row(self.method_label(m), self.mean(m), self.metrics)) for m in rest]
        return "\n".join([*table_head(self.metrics), *(line for _, line in rows)])

    def caption(self) -> str:
        """One line: what was evaluated and how."""
        parts = ", ".join(f"{g} {self.strategies.get(g, '?')}: {self.chunks[g]}" for g in self.granularities)
        text = (
            f"{len(self.queries)} queries; chunks per granularity ({parts}); exact cosine top-{self.k}; "
            f"small-to-big: matched on a granularity's late (or blended) vectors, the first {self.k} distinct parents "
            f"judged; percent; CI: {self.bootstrap_samples} bootstrap resamples of the queries, seed {self.seed}"
        )
        hybrid = any(m.startswith("hybrid_") for m in self.scores)
        return text + _caption_notes(hybrid, len(self.skipped), self.chunks_without_text)

    def _next(self, g: str) -> str:
        return self.granularities[self.granularities.index(g) + 1]

    def _scores(self, method: str) -> np.ndarray:
        if method not in self.scores:
            raise ValueError(f"no method {method!r} in this evaluation (methods: {', '.join(self.methods())})")
        return self.scores[method]


def best_line(report: EvalReport | GranularityEvalReport, metric: str) -> str:
    """One line naming the best configuration of every method but naive (late, blends, hybrid,
    small-to-big) on ``metric``, its difference and 95% interval against the best naive row and the best
    late row, and the setting that selects it (``report.setting``); where its interval against naive does
    not lie above 0, the line says plainly that nothing beats naive."""
    ranked = sorted(report.methods(), key=lambda m: -report.mean(m)[metric])  # stable: ties keep table order
    best = next(m for m in ranked if report.split(m)[0] != "naive")
    naive = next(m for m in ranked if report.split(m)[0] == "naive")
    late = [m for m in ranked if report.split(m)[0] == "late" and m != best]
    parts = [f"best configuration on {label(metric)}: {report.method_label(best)} ({report.mean(best)[metric]:.1f})"]
    for other in [naive, *late[:1]]:
        mean, low, high = report.delta(best, other)[metric]
        parts.append(f"{mean:+.1f} [{low:+.1f}, {high:+.1f}] over {report.method_label(other)}")
    text = ", ".join(parts) + f"; select it with: {report.setting(best)}"
    if report.delta(best, naive)[metric][1] <= 0.0:
        text += f". No configuration beats {report.method_label(naive)} with an interval above 0 on these queries"
    return text


def _caption_notes(hybrid: bool, skipped: int, chunks_without_text: int) -> str:
    """The caption's closing notes, shared by both reports: the hybrid method, and what was left out."""
    text = "; hybrid: LanceDB full-text (BM25) + exact vector search over the late vectors, RRF" if hybrid else ""
    if skipped:
        text += f"; {skipped} queries skipped (their documents are not among the rows)"
    if chunks_without_text:
        text += f"; {chunks_without_text} chunks without text left out"
    return text
