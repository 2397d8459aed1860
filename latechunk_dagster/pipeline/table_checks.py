"""The blocking table checks of one granularity table, computed once for both orchestrators.

Dagster's multi-asset check (:func:`~latechunk_dagster.integration.checks.build_table_checks`) and
Airflow's checks task (:func:`~latechunk_dagster.airflow.tasks.check_shards`) each say which
partitions to check and what each partition's commit reported (Dagster: the materializations'
metadata; Airflow: the late-chunk tasks' XComs), call :func:`granularity_table_outcomes`, and
translate its ``{check name: (passed, details)}`` into their own types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from latechunk_dagster.pipeline.run_tables import lance_settings
from latechunk_dagster.sink import validation
from latechunk_dagster.sink.parents import PARENT_CHECK, parents_exist
from latechunk_dagster.sources.files import DocumentStore


def check_names(parent_table: str | None) -> list[str]:
    """The checks of a granularity table: :data:`~latechunk_dagster.sink.validation.CHECKS`, then
    ``parents_exist`` where the granularity has a next one (``parent_table``)."""
    return [*validation.CHECKS, *(PARENT_CHECK if parent_table is not None else {})]


def granularity_table_outcomes(
    db: Any,
    table_name: str,
    rejected_name: str,
    partitions: Sequence[str] | Callable[[Any], Sequence[str]],
    *,
    expected_rows: Callable[[str], int | None],
    reported_dim: Callable[[str], int | None] = lambda partition: None,
    parent_table: str | None = None,
    store: DocumentStore | None = None,
    accounted: validation.AccountedFn | None = None,
) -> tuple[list[str], dict[str, validation.Outcome]]:
    """Every check of one granularity table over ``partitions``, one partition at a time.

    Args:
        db: a ``LanceDBSettings``, Dagster's ``LanceDBResource`` or Airflow's ``LanceDBHook`` (``open_table``).
        table_name, rejected_name: the tables the runs wrote (the newest generation's, under generations).
        partitions: the partitions to check, or a function of the open chunk table giving them
            (called only when the table exists).
        expected_rows: per partition, the rows its commit left as reported (``None``: unknown, fails
            ``row_count_matches``).
        reported_dim: per partition, the vector width its run reported (``None``: none); when the
            partitions report exactly one width it is the width checked, else the table's own (its
            ``vector`` column's list size).
        parent_table: the next (coarser) granularity's table: adds ``parents_exist``; ``None``: none.
        store, accounted: as :func:`~latechunk_dagster.sink.validation.check_partitions` (one of them).

    Returns:
        ``(partitions checked, {check name: (passed, details)})`` in :func:`check_names` order. A
        missing chunk table fails every check (no partitions); a missing parent table fails
        ``parents_exist``.

    Raises:
        ValueError: neither ``store`` nor ``accounted``.
    """
    names = check_names(parent_table)
    uri = lance_settings(db).uri
    table = db.open_table(table_name)
    if table is None:
        return [], {name: (False, {"reason": f"no table {table_name!r} at {uri}"}) for name in names}
    checked = list(partitions(table) if callable(partitions) else partitions)
    dims = {int(d) for d in map(reported_dim, checked) if d is not None}
    outcomes = validation.check_partitions(  # one partition at a time: memory bounded by a partition
        table,
        db.open_table(rejected_name),
        checked,
        dim=dims.pop() if len(dims) == 1 else table.schema.field("vector").type.list_size,
        expected_rows={p: expected_rows(p) for p in checked},
        store=store,
        accounted=accounted,
    )
    if parent_table is not None:
        coarse = db.open_table(parent_table)
        outcomes["parents_exist"] = (
            parents_exist(table, coarse, checked)
            if coarse is not None
            else (False, {"reason": f"no table {parent_table!r} (the next granularity's) at {uri}"})
        )
    return checked, outcomes
