"""Evaluate chunking settings on documents: each setting is chunked into a temporary LanceDB table.

Nothing here touches a production table: every setting is written into a table of a LanceDB
database in a temporary directory (removed afterwards), read back and evaluated with
:func:`~latechunk_dagster.evaluation.retrieval.evaluate_rows`. :func:`evaluate_granularities`
writes several granularities from one encode (the pipeline's
:func:`~latechunk_dagster.pipeline.materialize_partition`) and compares them side by side.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from latechunk_dagster import sink
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy, strategy_from_config
from latechunk_dagster.evaluation.queries import LabeledQuery
from latechunk_dagster.evaluation.report import EvalReport, GranularityEvalReport
from latechunk_dagster.evaluation.retrieval import evaluate_rows, read_chunk_rows
from latechunk_dagster.evaluation.tables import evaluate_table
from latechunk_dagster.pipeline.oneshot import chunk_partition
from latechunk_dagster.pipeline.partition import materialize_partition
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sources.files import Document


@dataclass(frozen=True)
class SweepPoint:
    """One evaluated setting: its strategy, its size parameter and the report."""

    strategy: ChunkingStrategy
    size: int
    report: EvalReport


def strategy_size(strategy: ChunkingStrategy) -> int:
    """The size parameter of a strategy: ``chunk_size`` (fixed_tokens) or ``max_tokens`` (the others)."""
    params = strategy.params()
    size = params.get("chunk_size", params.get("max_tokens"))
    if not isinstance(size, int):
        raise ValueError(f"{strategy.describe()} has no chunk size to sweep")
    return size


def sweep_strategies(names: Sequence[str], sizes: Sequence[int], language: str = "en") -> list[ChunkingStrategy]:
    """Every (strategy name, size) pair as a strategy: ``chunk_size`` for ``fixed_tokens``,
    ``max_tokens`` (and ``language``) for the boundary strategies.

    Raises:
        ValueError: an unknown strategy name, a size the strategy refuses, or an empty list.
    """
    if not names or not sizes:
        raise ValueError("a sweep needs at least one strategy and one size")
    out = []
    for name in names:
        for size in sizes:
            params = {"chunk_size": size} if name == "fixed_tokens" else {"max_tokens": size, "language": language}
            out.append(strategy_from_config(name, params))
    return out


def materialize_setting(
    chunker: LateChunker, documents: Mapping[str, Sequence[Document]], strategy: ChunkingStrategy, table: Any
) -> int:
    """Late-chunk ``documents`` (partition -> documents) with ``strategy`` into ``table``; rows written.

    The one place the evaluation writes chunk rows (through the sink's partition writer).
    """
    written = 0
    for partition, docs in documents.items():
        out = chunk_partition(chunker, list(docs), partition, strategy, run_id="evaluation")
        sink.replace_partition(table, "chunk_id", partition, out.chunks)
        written += out.chunks.num_rows
    return written


def evaluate_settings(
    chunker: LateChunker,
    documents: Mapping[str, Sequence[Document]],
    strategies: Sequence[ChunkingStrategy],
    queries: Sequence[LabeledQuery],
    *,
    k: int = 10,
    bootstrap_samples: int = 2000,
    seed: int = 0,
) -> list[SweepPoint]:
    """Chunk ``documents`` with each strategy into a temporary table and evaluate late vs naive on it.

    Args:
        documents: partition -> its documents (all of them are candidates, not only the relevant ones).
        strategies: the settings, in the order the points come back.

    Raises:
        ValueError: as :func:`~latechunk_dagster.evaluation.retrieval.evaluate_rows`.
    """
    points = []
    with tempfile.TemporaryDirectory(prefix="latechunk-eval-") as tmp:
        db = sink.connect(tmp)
        for i, strategy in enumerate(strategies):
            name = f"setting_{i}"
            table = db.create_table(name, schema=sink.chunk_schema(chunker.embedding_dim))
            materialize_setting(chunker, documents, strategy, table)
            report = evaluate_rows(
                chunker, read_chunk_rows(table), queries, k=k, bootstrap_samples=bootstrap_samples, seed=seed
            )
            points.append(SweepPoint(strategy, strategy_size(strategy), report))
            db.drop_table(name)
    return points


def evaluate_granularities(
    chunker: LateChunker,
    documents: Mapping[str, Sequence[Document]],
    strategies: Mapping[str, ChunkingStrategy],
    queries: Sequence[LabeledQuery],
    *,
    k: int = 10,
    bootstrap_samples: int = 2000,
    seed: int = 0,
) -> GranularityEvalReport:
    """Chunk ``documents`` into several granularities from ONE encode per document (temporary
    tables, one per granularity, with parent links) and compare them side by side
    (:func:`~latechunk_dagster.evaluation.granularity.evaluate_granularity_rows`: late, naive and
    small-to-big; no hybrid, the temporary tables have no full-text index).

    Args:
        documents: partition -> its documents (every one a candidate).
        strategies: ``{name: strategy}``, finest first, at least two.

    Raises:
        ValueError: fewer than two granularities; as ``evaluate_granularity_rows``.
    """
    if len(strategies) < 2:
        raise ValueError(f"comparing granularities needs at least two, got {list(strategies)}")
    with tempfile.TemporaryDirectory(prefix="latechunk-eval-") as tmp:
        db = sink.connect(tmp)
        schema = sink.chunk_schema(chunker.embedding_dim)
        tables = {g: db.create_table(granularity_table("chunks", g), schema=schema) for g in strategies}
        rejected = db.create_table(sink.REJECTED_TABLE, schema=sink.REJECTED_SCHEMA)
        for partition, docs in documents.items():
            materialize_partition(
                chunker,
                list(docs),
                partition,
                dict(strategies),
                chunk_table=tables,
                rejected_table=rejected,
                run_id="evaluation",
                host_workers=0,
                staging_dir=tmp,
            )
        return evaluate_table(
            chunker, tables, queries, k=k, bootstrap_samples=bootstrap_samples, seed=seed, hybrid=False
        )  # type: ignore[return-value]
