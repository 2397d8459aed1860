"""Retrieval evaluation, late vs naive chunking, on labeled queries. No Dagster here.

* :mod:`~latechunk_dagster.evaluation.queries`: the JSONL query file.
* :mod:`~latechunk_dagster.evaluation.metrics`: the relevance rule, nDCG / recall / MRR, the bootstrap.
* :mod:`~latechunk_dagster.evaluation.retrieval`: naive embeddings, exact cosine top-k, :func:`evaluate_rows`.
* :mod:`~latechunk_dagster.evaluation.granularity`: several granularities of one table side by side, small-to-big.
* :mod:`~latechunk_dagster.evaluation.sweep`: settings chunked into temporary tables and evaluated.
* :mod:`~latechunk_dagster.evaluation.plot`: PNG plots (matplotlib, Agg).

Example (the tables ``make demo`` wrote: the granularities of the table definition ``chunks``)::

    from latechunk_dagster import LateChunker, sink
    from latechunk_dagster.evaluation import evaluate_table, granularity_tables, read_queries

    with LateChunker(model_dir) as chunker:
        report = evaluate_table(chunker, granularity_tables(sink.connect("data/lancedb"), "chunks"),
                                read_queries("queries.jsonl"), k=10)
    print(report.markdown())
"""

from latechunk_dagster.evaluation.granularity import evaluate_granularity_rows
from latechunk_dagster.evaluation.metrics import bootstrap_mean_ci, judge, matches, metric_names, query_metrics
from latechunk_dagster.evaluation.queries import LabeledQuery, Passage, QueryFileError, read_queries, write_queries
from latechunk_dagster.evaluation.report import EvalReport, GranularityEvalReport
from latechunk_dagster.evaluation.retrieval import evaluate_rows, naive_vectors, read_chunk_rows, top_k
from latechunk_dagster.evaluation.sweep import (
    SweepPoint,
    evaluate_granularities,
    evaluate_settings,
    materialize_setting,
    sweep_strategies,
)
from latechunk_dagster.evaluation.tables import evaluate_table
from latechunk_dagster.sink.granularity_tables import granularity_tables


def __getattr__(name: str) -> object:
    """``GranularityReport``: this report's former name (deprecated: the pipeline's commit
    counts per granularity had the same name)."""
    if name == "GranularityReport":
        import warnings

        warnings.warn(
            "latechunk_dagster.evaluation.GranularityReport is deprecated: use GranularityEvalReport",
            DeprecationWarning,
            stacklevel=2,
        )
        return GranularityEvalReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EvalReport",
    "GranularityEvalReport",
    "LabeledQuery",
    "Passage",
    "QueryFileError",
    "SweepPoint",
    "bootstrap_mean_ci",
    "evaluate_granularities",
    "evaluate_granularity_rows",
    "evaluate_rows",
    "evaluate_settings",
    "evaluate_table",
    "granularity_tables",
    "judge",
    "matches",
    "materialize_setting",
    "metric_names",
    "naive_vectors",
    "query_metrics",
    "read_chunk_rows",
    "read_queries",
    "sweep_strategies",
    "top_k",
    "write_queries",
]
