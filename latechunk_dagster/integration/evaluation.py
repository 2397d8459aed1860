"""The ``retrieval_eval`` asset and its check: late vs naive retrieval on labeled queries.

Built by :func:`retrieval_eval_asset` for one chunk table. The asset reads the query file, ranks
the table's chunk rows (exact cosine, numpy) with the late vectors and with naive ones (each
chunk's text embedded alone by the same engine), and records:

* ``table``: the Markdown table (rows late, naive, late - naive with a 95% bootstrap interval);
* every number as float metadata (``late_ndcg_at_10``, ``naive_recall_at_5``, ``delta_mrr_at_10``,
  ``delta_ndcg_at_10_ci_low`` ...; percent / percentage points), so Dagster's asset plots follow
  them from run to run;
* ``plot_path``: a PNG (score vs chunk size when the run config asks for a sweep, else bars per
  metric) saved beside the LanceDB data, and ``plot``: the same image inline (Markdown).

Given a table definition of several granularities (one table each), the table, the numbers and
the plot hold every granularity's late, naive and hybrid rows and small-to-big side by side, and
the winner (:mod:`latechunk_dagster.evaluation.granularity`).

The check ``late_not_below_naive`` fails when late nDCG@k falls below naive by more than the margin
(percentage points) recorded with the latest materialization.
"""

# No `from __future__ import annotations`: Dagster resolves the run-config annotation of the asset
# function, defined inside the factory, at definition time.
import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.evaluation import (
    GranularityEvalReport,
    LabeledQuery,
    SweepPoint,
    evaluate_settings,
    evaluate_table,
    granularity_tables,
    read_queries,
    sweep_strategies,
)
from latechunk_dagster.evaluation.plot import plot_report, plot_sweep
from latechunk_dagster.evaluation.report import label, metadata_key
from latechunk_dagster.sink import CHUNK_TABLE
from latechunk_dagster.sink.generations import current_table

CHECK_NAME = "late_not_below_naive"


class RetrievalEvalConfig(dg.Config):
    """Run config of ``retrieval_eval``."""

    k: int = Field(default=10, description="Cutoff: nDCG@k, MRR@k and the largest recall cutoff.")
    where: str = Field(default="", description="LanceDB SQL filter on the chunk rows, e.g. \"partition = 'a'\".")
    margin: float | None = Field(
        default=None,
        description="nDCG@k points late may fall below naive before the check fails (None: the asset's default; "
        "negative: late must beat naive by that much).",
    )
    sweep_strategies: list[str] = Field(
        default_factory=list, description="Strategies to sweep (fixed_tokens, sentences...); empty: no sweep."
    )
    sweep_sizes: list[int] = Field(default_factory=list, description="chunk_size / max_tokens values to sweep.")
    bootstrap_samples: int = Field(default=2000, description="Bootstrap resamples of the queries.")
    seed: int = Field(default=0, description="Seed of the bootstrap.")


def retrieval_eval_asset(
    *,
    chunk_asset_key: dg.AssetKey | str | list[str] | Sequence[dg.AssetKey],
    queries_path: str | Path,
    key: dg.AssetKey | str | list[str] = "retrieval_eval",
    group_name: str | None = None,
    engine_resource_key: str = "engine",
    lancedb_resource_key: str = "lancedb",
    store_resource_key: str | None = "store",
    table_name: str | None = None,
    plot_dir: str | Path | None = None,
    margin: float = 5.0,
) -> tuple[dg.AssetsDefinition, dg.AssetChecksDefinition]:
    """The ``retrieval_eval`` asset for one chunk table, and its check.

    Example::

        eval_asset, eval_check = retrieval_eval_asset(
            chunk_asset_key=chunk_vectors.key, queries_path="queries/stdlib.jsonl", group_name="latechunk"
        )
        defs = dg.Definitions(assets=[chunk_vectors, eval_asset], asset_checks=[eval_check], resources=...)

    Args:
        chunk_asset_key: the asset that writes the chunk table (a dependency, not loaded); with
            several granularities, the list of their assets' keys (``LateChunkDefinitions.chunk_keys``).
        queries_path: the JSONL query file (:mod:`latechunk_dagster.evaluation.queries`); read at
            run time, so it may be written after the definitions load.
        key, group_name: of the new asset.
        engine_resource_key: a :class:`~latechunk_dagster.integration.resources.VLLMEngineResource`
            (anything with ``get_chunker()``): the model that wrote the table.
        lancedb_resource_key: a :class:`~latechunk_dagster.integration.resources.LanceDBResource`.
        store_resource_key: the document store, used only by sweeps (``None``: sweeps are refused).
        table_name: chunk table (default ``chunks``), or the table definition whose granularity
            tables (``f"{table_name}_{g}"``) are evaluated side by side with small-to-big
            (:func:`~latechunk_dagster.sink.granularity_tables.granularity_tables`; the check then
            reads the finest granularity's late and naive scores).
        plot_dir: where PNGs go (default: ``<LanceDB directory>/../evaluation``; needed for an
            object-store URI).
        margin: default of the check's margin, in nDCG@k points (run config ``margin`` overrides).

    Returns:
        ``(asset, check)``.
    """
    asset_key = dg.AssetKey.from_coercible(key)
    several = (
        isinstance(chunk_asset_key, (list, tuple))
        and not isinstance(chunk_asset_key, dg.AssetKey)  # a record that is a tuple, and refuses iteration
        and all(isinstance(k, dg.AssetKey) for k in chunk_asset_key)
    )
    upstreams = list(chunk_asset_key) if several else [dg.AssetKey.from_coercible(chunk_asset_key)]  # type: ignore[arg-type]
    upstream = upstreams[0]
    resource_keys = {engine_resource_key, lancedb_resource_key} | (
        {store_resource_key} if store_resource_key else set()
    )

    @dg.asset(
        key=asset_key,
        deps=upstreams,
        group_name=group_name,
        required_resource_keys=resource_keys,
        kinds={"lancedb"},
        description=f"Retrieval late vs naive on {Path(queries_path).name} (nDCG, recall, MRR; bootstrap CI).",
    )
    def _retrieval_eval(context: dg.AssetExecutionContext, config: RetrievalEvalConfig) -> dg.MaterializeResult:
        # bad input (query file, sweep settings, table) fails before the engine starts
        queries = read_queries(queries_path)
        strategies = _sweep_settings(config, store_resource_key)
        lancedb = getattr(context.resources, lancedb_resource_key)
        name = table_name or CHUNK_TABLE
        with lancedb.get_connection() as db:
            tables = granularity_tables(db, current_table(db, name))  # under generations: the served one
            if not tables:
                raise dg.Failure(f"no table {name!r} at {lancedb.uri}: materialize {upstream.to_user_string()} first")
        chunker = getattr(context.resources, engine_resource_key).get_chunker()
        report = evaluate_table(
            chunker,
            tables,
            queries,
            k=config.k,
            where=config.where or None,
            bootstrap_samples=config.bootstrap_samples,
            seed=config.seed,
        )
        png = _plot_path(plot_dir, lancedb.uri, asset_key, context.run.run_id)
        sweep_md = ""
        if strategies:
            points = _sweep(context, config, strategies, store_resource_key, report.queries, queries, chunker)
            plot_sweep(points, png)
            sweep_md = "\n\n**Sweep** (temporary tables)\n\n" + _sweep_table(points)
        else:
            plot_report(report, png)
        k_margin = margin if config.margin is None else config.margin
        metadata = eval_metadata(report, sweep_md, k_margin, queries_path, png)
        context.log.info(f"retrieval late vs naive:\n{report.markdown()}")
        return dg.MaterializeResult(metadata=metadata)

    @dg.asset_check(
        asset=asset_key,
        name=CHECK_NAME,
        description="Fails when late nDCG@k is below naive by more than the margin (points) of the materialization.",
    )
    def _late_not_below_naive(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        event = context.instance.get_latest_materialization_event(asset_key)
        if event is None or event.asset_materialization is None:
            return dg.AssetCheckResult(passed=False, description=f"{asset_key.to_user_string()} not materialized yet")
        return late_vs_naive_result(event.asset_materialization.metadata)

    return _retrieval_eval, _late_not_below_naive


def eval_metadata(report: Any, sweep_md: str, margin: float, queries_path: str | Path, png: Path) -> dict[str, Any]:
    """The ``retrieval_eval`` materialization's metadata: the report's table and scores, its counts,
    the check's ``margin`` (nDCG@k points), the plot (``png``, also inlined)."""
    several_tables = isinstance(report, GranularityEvalReport)  # chunks per granularity, and a winner
    verdict = f"\n\n{report.verdict()}" if several_tables else ""
    verdict += f"\n\n{report.best()}"  # the best configuration, blends included (issue 48)
    default = report.default_method()
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    return {
        "table": dg.MetadataValue.md(f"{report.markdown()}\n\n{report.caption()}{verdict}{sweep_md}"),
        **{k: dg.MetadataValue.float(v) for k, v in report.floats().items()},
        "queries": dg.MetadataValue.int(len(report.queries)),
        "queries_skipped": dg.MetadataValue.int(len(report.skipped)),
        "chunks": dg.MetadataValue.int(sum(report.chunks.values()) if several_tables else report.chunks),
        "k": dg.MetadataValue.int(report.k),
        **({"checked_granularity": dg.MetadataValue.text(report.granularities[0])} if several_tables else {}),
        "margin": dg.MetadataValue.float(margin),
        "default_method": dg.MetadataValue.text(report.method_label(default)),
        "default_setting": dg.MetadataValue.text(report.setting(default)),
        "best": dg.MetadataValue.text(report.best()),
        "queries_path": dg.MetadataValue.path(str(queries_path)),
        "plot_path": dg.MetadataValue.path(str(png)),
        "plot": dg.MetadataValue.md(f"![late vs naive](data:image/png;base64,{image})"),
    }


def late_vs_naive_result(metadata: dict[str, Any]) -> dg.AssetCheckResult:
    """The check's verdict from a ``retrieval_eval`` materialization's metadata: the configuration the
    table serves (``default_*``: small-to-big on the finest granularity at the table's blend weight, or the
    single table's stored vectors; issue 48) against naive chunks of the finest granularity. A
    materialization from before the default was recorded is checked on its late scores."""
    k = int(metadata["k"].value)
    key = "default" if metadata_key("default", f"ndcg@{k}") in metadata else "late"
    late = float(metadata[metadata_key(key, f"ndcg@{k}")].value)
    naive = float(metadata[metadata_key("naive", f"ndcg@{k}")].value)
    margin = float(metadata["margin"].value)
    checked = metadata.get("checked_granularity")  # the finest granularity, of a table of several
    of = f" ({checked.value})" if checked is not None else ""
    named = metadata.get("default_method")
    what = f"{named.value} (the table's default)" if key == "default" and named is not None else f"late{of}"
    passed = late >= naive - margin
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{what} nDCG@{k} {late:.1f} vs naive{of} {naive:.1f} (margin {margin:.1f} points): "
            + ("ok" if passed else "the table's vectors retrieve worse than chunking alone on these queries")
        ),
        metadata={"late": late, "naive": naive, "difference": late - naive, "margin": margin},
    )


def _plot_path(plot_dir: str | Path | None, uri: str, key: dg.AssetKey, run_id: str) -> Path:
    if plot_dir is None:
        if "://" in uri:
            raise dg.Failure(f"LanceDB at {uri} is not a local directory: give retrieval_eval_asset(plot_dir=...)")
        plot_dir = Path(uri).resolve().parent / "evaluation"
    return Path(plot_dir) / f"{key.to_python_identifier()}-{run_id[:8]}.png"


def _sweep_table(points: list[SweepPoint]) -> str:
    metric = points[0].report.metrics[0]
    lines = [
        f"| strategy | size | late {label(metric)} | naive {label(metric)} | late - naive (95% CI) |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in points:
        mean, low, high = p.report.delta()[metric]
        lines.append(
            f"| {p.strategy.name} | {p.size} | {p.report.mean('late')[metric]:.1f} | "
            f"{p.report.mean('naive')[metric]:.1f} | {mean:+.1f} [{low:+.1f}, {high:+.1f}] |"
        )
    return "\n".join(lines)


def _sweep_settings(config: RetrievalEvalConfig, store_resource_key: str | None) -> list[ChunkingStrategy]:
    """The swept strategies of the run config (empty: no sweep); raises ``dg.Failure`` on bad settings."""
    if not (config.sweep_strategies or config.sweep_sizes):
        return []
    if not (config.sweep_strategies and config.sweep_sizes):
        raise dg.Failure("a sweep needs both sweep_strategies and sweep_sizes")
    if store_resource_key is None:
        raise dg.Failure("sweeps re-chunk the documents: build the asset with a store_resource_key")
    try:
        return sweep_strategies(config.sweep_strategies, config.sweep_sizes)
    except ValueError as exc:
        raise dg.Failure(f"bad sweep settings: {exc}") from None


def _sweep(
    context: dg.AssetExecutionContext,
    config: RetrievalEvalConfig,
    strategies: list[ChunkingStrategy],
    store_resource_key: str,
    evaluated: list[str],
    queries: list[LabeledQuery],
    chunker: Any,
) -> list[SweepPoint]:
    """Re-chunk the store shards that hold a relevant document of an evaluated query (whole shards,
    so the other documents stay as distractors) with every swept setting, into temporary tables."""
    store = getattr(context.resources, store_resource_key).get_store()
    kept = [q for q in queries if q.query in set(evaluated)]
    wanted = {p.doc_id for q in kept for p in q.passages}
    documents = {}
    for shard in store.shards():
        docs = store.read_shard(shard)
        if any(d.doc_id in wanted for d in docs):
            documents[shard] = docs
    context.log.info(f"sweep: {len(strategies)} settings over {sum(map(len, documents.values()))} documents")
    return evaluate_settings(
        chunker,
        documents,
        strategies,
        kept,
        k=config.k,
        bootstrap_samples=config.bootstrap_samples,
        seed=config.seed,
    )
