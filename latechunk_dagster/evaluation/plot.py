"""PNG plots of an evaluation (matplotlib, non-GUI ``Agg`` backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from latechunk_dagster.evaluation.report import EvalReport, GranularityEvalReport, label
from latechunk_dagster.evaluation.sweep import SweepPoint


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_sweep(points: Sequence[SweepPoint], path: str | Path, *, metric: str | None = None) -> Path:
    """Score vs chunk size: one solid line (late) and one dashed line (naive) per strategy.
    Writes ``path`` (PNG), returns it.

    Args:
        metric: a metric key of the reports (default: the first, ``ndcg@k``).
    """
    if not points:
        raise ValueError("no sweep points to plot")
    plt = _pyplot()
    metric = metric or points[0].report.metrics[0]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for i, name in enumerate(dict.fromkeys(p.strategy.name for p in points)):
        pts = sorted((p for p in points if p.strategy.name == name), key=lambda p: p.size)
        sizes = [p.size for p in pts]
        late = [p.report.mean("late")[metric] for p in pts]
        naive = [p.report.mean("naive")[metric] for p in pts]
        color = f"C{i}"
        ax.plot(sizes, late, "o-", color=color, label=f"late ({name})")
        ax.plot(sizes, naive, "s--", color=color, alpha=0.7, label=f"naive ({name})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({p.size for p in points}), [str(s) for s in sorted({p.size for p in points})])
    ax.set_xlabel("chunk size (tokens: chunk_size / max_tokens)")
    ax.set_ylabel(f"{label(metric)} (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"late vs naive chunking, {len(points[0].report.queries)} queries")
    return _save(fig, plt, path)


def plot_report(report: EvalReport | GranularityEvalReport, path: str | Path) -> Path:
    """Grouped bars: each metric for every method of the report (late, naive, hybrid when scored;
    of each granularity and small-to-big for a :class:`GranularityEvalReport`), in percent. Writes
    ``path`` (PNG), returns it."""
    plt = _pyplot()
    methods = report.methods()
    width = 0.8 / len(methods)
    x = range(len(report.metrics))
    many = len(methods) > 3
    fig, ax = plt.subplots(figsize=(9.6 if many else 6.4, 4.2 if many else 3.6), dpi=100)
    for j, method in enumerate(methods):
        mean = report.mean(method)
        offset = (j - (len(methods) - 1) / 2) * width
        ax.bar([i + offset for i in x], [mean[m] for m in report.metrics], width, label=report.method_label(method))
    ax.set_xticks(list(x), [label(m) for m in report.metrics])
    ax.set_ylim(0, 100)
    ax.set_ylabel("%")
    ax.grid(axis="y", alpha=0.3)
    if many:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    else:
        ax.legend()
    if isinstance(report, GranularityEvalReport):
        title = f"granularities side by side, {len(report.queries)} queries ({', '.join(report.granularities)})"
    else:
        title = f"late vs naive, {len(report.queries)} queries ({', '.join(report.strategies)})"
    ax.set_title(title, fontsize=9)
    return _save(fig, plt, path)


def _save(fig, plt, path: str | Path) -> Path:  # type: ignore[no-untyped-def]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
