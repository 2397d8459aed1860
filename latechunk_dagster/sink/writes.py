"""Where rows are written: one partition of a LanceDB table replaced in one commit.

Every write replaces exactly one partition (or the rows of some documents of it) in **one**
LanceDB commit: a ``merge_insert`` keyed on the deterministic ``chunk_id`` that updates matched
rows, inserts new ones and deletes the rows in scope that the new source no longer holds
(``when_not_matched_by_source_delete``). A crash therefore leaves the old rows or the new ones,
never a mix (LanceDB commits are atomic table versions).

:func:`commit_documents` takes its source as a ``pyarrow.RecordBatchReader``: LanceDB streams it
through the merge (measured on LanceDB 0.40, 384-d rows: merging 20k / 160k / 480k source rows
peaked at +200 / +320 / +370 MB RSS while the data were 39 / 310 / 930 MB), so a partition of any
size is committed at once without holding its rows in memory.

**Concurrent writers.** Runs writing different partitions of one table commit side by side:
LanceDB rebases a ``merge_insert`` or ``delete`` over a concurrent commit of other rows (retrying
inside LanceDB where fragments overlap, ``MergeResult.num_attempts``). Two runs writing the *same*
partition: every commit is a ``merge_insert`` whose delete scope covers all the partition's rows it
does not keep, and the key column is lance's unenforced primary key, so the later commit conflicts,
is re-planned against the winner's rows and replaces them whole (the partition ends with one run's
rows, never a mix; a plain ``add`` would let both land). Conflicts LanceDB gives up on are retried
here with backoff (:func:`latechunk_dagster.sink.retry.retry_commit`); ``WriteResult.attempts``
says how many commits were tried.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import lancedb
import pyarrow as pa
import pyarrow.compute as pc

from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.retry import retry_commit
from latechunk_dagster.sink.schema import sql_in, sql_string


@dataclass(frozen=True)
class WriteResult:
    """Outcome of replacing one partition: counts from LanceDB's ``MergeResult`` and the new table version.

    Attributes:
        attempts: commits tried by :func:`~latechunk_dagster.sink.retry.retry_commit` (1: no conflict
            LanceDB gave up on); lance_attempts: ``MergeResult.num_attempts`` of the commit that
            landed (LanceDB's own rebase-and-retry; 1 for a delete).
    """

    inserted: int
    updated: int
    deleted: int
    version: int
    attempts: int = 1
    lance_attempts: int = 1


def replace_partition(table: Any, key: str, partition: str, rows: pa.Table) -> WriteResult:
    """Make ``rows`` the whole content of ``partition`` in ``table``, in one commit.

    Args:
        table: an open LanceDB table.
        key: the deterministic id column (``chunk_id`` / ``rejection_id``).
        partition: the partition key; rows of other partitions are untouched.
        rows: the partition's new rows, with the table's schema.
    """
    where = f"partition = {sql_string(partition)}"
    what = f"replace partition {partition!r} of {table.name!r}"
    if rows.num_rows == 0:
        return _delete(table, where, what)
    return _merge(table, key, lambda: rows, where, what)


def _delete(table: Any, where: str, what: str) -> WriteResult:
    """``table.delete(where)`` (one commit), retried on conflicts."""
    result, attempts = retry_commit(lambda: table.delete(where), what=what, refresh=table.checkout_latest)
    deleted = int(getattr(result, "num_deleted_rows", 0))
    return WriteResult(0, 0, deleted, int(getattr(result, "version", table.version)), attempts, 1)


def _merge(
    table: Any, key: str, source: Callable[[], pa.Table | pa.RecordBatchReader], scope: str, what: str
) -> WriteResult:
    """One ``merge_insert`` on ``key``: update matched, insert new, delete the unmatched rows of ``scope``;
    retried on conflicts with a fresh ``source()``."""

    def commit() -> Any:
        merge = table.merge_insert(key).when_matched_update_all().when_not_matched_insert_all()
        return merge.when_not_matched_by_source_delete(scope).execute(source())

    result, attempts = retry_commit(commit, what=what, refresh=table.checkout_latest)
    return WriteResult(
        int(getattr(result, "num_inserted_rows", 0)),
        int(getattr(result, "num_updated_rows", 0)),
        int(getattr(result, "num_deleted_rows", 0)),
        int(getattr(result, "version", table.version)),
        attempts,
        int(getattr(result, "num_attempts", 1)),
    )


def document_scope(partition: str, replaced: Collection[str], kept: Collection[str]) -> str:
    """SQL filter for the rows of ``partition`` whose documents are replaced: the shorter of
    ``doc_id IN (replaced)`` and ``doc_id NOT IN (kept)`` (the whole partition when nothing is kept;
    ``NOT IN (kept)`` when nothing is replaced, which also covers rows a concurrent writer added)."""
    where = f"partition = {sql_string(partition)}"
    if not kept:
        return where
    if replaced and len(replaced) <= len(kept):
        return f"{where} AND {sql_in('doc_id', sorted(replaced))}"
    return f"{where} AND {sql_in('doc_id', sorted(kept), negate=True)}"


def commit_documents(
    table: Any,
    partition: str,
    rows: Callable[[], pa.RecordBatchReader] | None,
    *,
    replaced: Collection[str],
    kept: Collection[str],
) -> WriteResult | None:
    """Replace the rows of some documents of ``partition`` by ``rows``, in one commit.

    Every commit with rows is one ``merge_insert`` (also when all documents are new: an ``add``
    would let a concurrent writer of the same partition land beside it, module docstring), retried
    on conflicts with backoff.

    Args:
        table: an open LanceDB chunk table (key ``chunk_id``).
        partition: the partition key; rows of other partitions are untouched.
        rows: opens the new rows as a stream (any size; called again for a retry), or ``None``
            when there are none.
        replaced: doc_ids whose old rows go (changed, removed or now rejected documents).
        kept: doc_ids whose rows stay as they are (unchanged documents); every other row of the
            partition is in scope for deletion when ``replaced`` is not empty.

    Returns:
        The counts and new version, or ``None`` when there was nothing to write (no commit).
    """
    if rows is None and not replaced:
        return None
    scope = document_scope(partition, replaced, kept)
    what = f"commit partition {partition!r} of {table.name!r}"
    if rows is None:
        return _delete(table, scope, what)
    return _merge(table, "chunk_id", rows, scope, what)


def table_partitions(table: Any, batch_rows: int = 65_536) -> list[str]:
    """The distinct ``partition`` values of a LanceDB table, sorted. Reads that one column in batches
    of ``batch_rows`` rows: memory is one batch and the distinct names, not the column of every row."""
    seen: set[str] = set()
    for batch in table.search().select(["partition"]).limit(None).to_batches(batch_size=batch_rows):
        seen.update(pc.unique(batch.column("partition")).to_pylist())
    return sorted(seen)


def stored_partitions(db: Any, names: list[str]) -> set[str]:
    """The ``partition`` values held by any of the existing tables ``names`` (one column read
    each): what a partition sync compares with the store besides the orchestrator's partitions, so
    that rows committed by a run whose shard left the store meanwhile are found and removed."""
    existing = set(table_names(db))
    return {p for name in names if name in existing for p in table_partitions(db.open_table(name))}


def delete_partitions(db: Any, names: list[str], partitions: list[str]) -> int:
    """Delete every row of ``partitions`` from each existing table (one commit per table); rows deleted."""
    if not partitions:
        return 0
    where = sql_in("partition", partitions)
    deleted = 0
    existing = set(table_names(db))
    for name in names:
        if name in existing:
            table = db.open_table(name)
            deleted += _delete(table, where, f"delete partitions from {name!r}").deleted
    return deleted


def connect(uri: str, **kwargs: Any) -> Any:
    """``lancedb.connect(uri)``: a local directory or an object-store URI (``s3://``, ``gs://``...)."""
    return lancedb.connect(uri, **kwargs)
