"""Evaluation of stored chunk tables: :func:`evaluate_table` reads one table's rows (or each
granularity table's) and scores them with :func:`~latechunk_dagster.evaluation.retrieval.evaluate_rows`
or :func:`~latechunk_dagster.evaluation.granularity.evaluate_granularity_rows`. It sits above both, so
neither imports the other's caller."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.evaluation.granularity import evaluate_granularity_rows
from latechunk_dagster.evaluation.queries import LabeledQuery
from latechunk_dagster.evaluation.report import EvalReport, GranularityEvalReport
from latechunk_dagster.evaluation.retrieval import evaluate_rows, read_chunk_rows
from latechunk_dagster.sink.queries import has_fts_index


def evaluate_table(
    chunker: LateChunker,
    table: Any,
    queries: Sequence[LabeledQuery],
    *,
    k: int = 10,
    where: str | None = None,
    bootstrap_samples: int = 2000,
    seed: int = 0,
    hybrid: bool | None = None,
) -> EvalReport | GranularityEvalReport:
    """:func:`evaluate_rows` on the rows of a LanceDB chunk table that match ``where``; or, given the
    tables of several granularities, :func:`~latechunk_dagster.evaluation.granularity.evaluate_granularity_rows`
    on the rows of each.

    Args:
        table: a LanceDB table; or granularity name -> its table, finest first
            (:func:`~latechunk_dagster.sink.granularity_tables.granularity_tables`); a mapping of one
            table is that table.
        where: applied to every table alike.
        hybrid: score LanceDB's hybrid search too (a ``hybrid`` row per table); ``None`` (default):
            on each table that has the full-text index on ``text`` (``refresh_indexes`` builds it).

    Returns:
        An :class:`EvalReport` for one table, a :class:`GranularityEvalReport` for several.

    Raises:
        ValueError: as :func:`evaluate_rows` / ``evaluate_granularity_rows``; ``hybrid=True`` on a
            table without the full-text index; an empty mapping.
    """
    tables = dict(table) if isinstance(table, Mapping) else {"": table}
    if not tables:
        raise ValueError("no table to evaluate (an empty mapping of granularities)")
    with_fts = {g: has_fts_index(t) for g, t in tables.items()}
    if hybrid and not all(with_fts.values()):
        raise ValueError("hybrid evaluation needs the full-text index on text (sink.indexing.refresh_indexes)")
    use_hybrid = {g: with_fts[g] if hybrid is None else hybrid for g in tables}
    if len(tables) == 1:
        [(g, only)] = tables.items()
        return evaluate_rows(
            chunker,
            read_chunk_rows(only, where),
            queries,
            k=k,
            bootstrap_samples=bootstrap_samples,
            seed=seed,
            hybrid=(only, where) if use_hybrid[g] else None,
        )
    return evaluate_granularity_rows(
        chunker,
        {g: read_chunk_rows(t, where) for g, t in tables.items()},
        queries,
        k=k,
        bootstrap_samples=bootstrap_samples,
        seed=seed,
        hybrid={g: (t, where) for g, t in tables.items() if use_hybrid[g]},
    )
