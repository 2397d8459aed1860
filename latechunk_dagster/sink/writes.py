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
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import lancedb
import pyarrow as pa

from latechunk_dagster.sink.schema import sql_string


@dataclass(frozen=True)
class WriteResult:
    """Outcome of replacing one partition: counts from LanceDB's ``MergeResult`` and the new table version."""

    inserted: int
    updated: int
    deleted: int
    version: int


def open_or_create(db: Any, name: str, schema: pa.Schema) -> Any:
    """Open table ``name``, creating it empty with ``schema``; refuse an existing table whose schema differs.

    Raises:
        ValueError: the table exists with another schema (e.g. another vector dimension: a
            different model needs another table name).
    """
    if name in db.list_tables().tables:
        table = db.open_table(name)
        _add_missing_nullable_columns(table, schema)
        if table.schema.remove_metadata() != schema.remove_metadata():
            raise ValueError(
                f"LanceDB table {name!r} at {db.uri} has another schema than this pipeline writes "
                f"(vector: {table.schema.field('vector').type if 'vector' in table.schema.names else '?'} vs "
                f"{schema.field('vector').type if 'vector' in schema.names else '-'}); use another table name"
            )
        return table
    return db.create_table(name, schema=schema, exist_ok=True)


def replace_partition(table: Any, key: str, partition: str, rows: pa.Table) -> WriteResult:
    """Make ``rows`` the whole content of ``partition`` in ``table``, in one commit.

    Args:
        table: an open LanceDB table.
        key: the deterministic id column (``chunk_id`` / ``rejection_id``).
        partition: the partition key; rows of other partitions are untouched.
        rows: the partition's new rows, with the table's schema.
    """
    where = f"partition = {sql_string(partition)}"
    if rows.num_rows == 0:
        before = table.count_rows(where)
        table.delete(where)
        return WriteResult(0, 0, before, table.version)
    result = (
        table.merge_insert(key)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete(where)
        .execute(rows)
    )
    return WriteResult(
        int(getattr(result, "num_inserted_rows", 0)),
        int(getattr(result, "num_updated_rows", 0)),
        int(getattr(result, "num_deleted_rows", 0)),
        table.version,
    )


def _add_missing_nullable_columns(table: Any, schema: pa.Schema) -> None:
    """A table written before a nullable trailing column (``vector_config``) existed gains it, null."""
    have = table.schema.names
    missing = [f for f in schema if f.name not in have]
    if missing and all(f.nullable for f in missing) and have == schema.names[: len(have)]:
        table.add_columns([f for f in missing])


def document_scope(partition: str, replaced: Collection[str], kept: Collection[str]) -> str:
    """SQL filter for the rows of ``partition`` whose documents are replaced: the shorter of
    ``doc_id IN (replaced)`` and ``doc_id NOT IN (kept)`` (the whole partition when nothing is kept)."""
    where = f"partition = {sql_string(partition)}"
    if not kept:
        return where
    if len(replaced) <= len(kept):
        return f"{where} AND doc_id IN ({', '.join(sql_string(d) for d in sorted(replaced))})"
    return f"{where} AND doc_id NOT IN ({', '.join(sql_string(d) for d in sorted(kept))})"


def commit_documents(
    table: Any,
    partition: str,
    rows: pa.RecordBatchReader | None,
    *,
    replaced: Collection[str],
    kept: Collection[str],
) -> WriteResult | None:
    """Replace the rows of some documents of ``partition`` by ``rows``, in one commit.

    Args:
        table: an open LanceDB chunk table (key ``chunk_id``).
        partition: the partition key; rows of other partitions are untouched.
        rows: the new rows (streamed, any size), or ``None`` when there are none.
        replaced: doc_ids whose old rows go (changed, removed or now rejected documents).
        kept: doc_ids whose rows stay as they are (unchanged documents); every other row of the
            partition is in scope for deletion when ``replaced`` is not empty.

    Returns:
        The counts and new version, or ``None`` when there was nothing to write (no commit).
    """
    if rows is None and not replaced:
        return None
    scope = document_scope(partition, replaced, kept)
    if rows is None:
        before = table.count_rows(scope)
        table.delete(scope)
        return WriteResult(0, 0, before, table.version)
    if not replaced:
        # only new documents: their chunk_ids are not in the table, so one append is the whole
        # change (one commit; measured +50 MB for 20k rows where the merge took +200 MB)
        before = table.count_rows(f"partition = {sql_string(partition)}")
        table.add(rows)
        return WriteResult(table.count_rows(f"partition = {sql_string(partition)}") - before, 0, 0, table.version)
    merge = table.merge_insert("chunk_id").when_matched_update_all().when_not_matched_insert_all()
    result = merge.when_not_matched_by_source_delete(scope).execute(rows)
    return WriteResult(
        int(getattr(result, "num_inserted_rows", 0)),
        int(getattr(result, "num_updated_rows", 0)),
        int(getattr(result, "num_deleted_rows", 0)),
        table.version,
    )


def delete_partitions(db: Any, table_names: list[str], partitions: list[str]) -> int:
    """Delete every row of ``partitions`` from each existing table (one commit per table); rows deleted."""
    if not partitions:
        return 0
    where = "partition IN (" + ", ".join(sql_string(p) for p in partitions) + ")"
    deleted = 0
    for name in table_names:
        if name in db.list_tables().tables:
            table = db.open_table(name)
            deleted += table.count_rows(where)
            table.delete(where)
    return deleted


def connect(uri: str, **kwargs: Any) -> Any:
    """``lancedb.connect(uri)``: a local directory or an object-store URI (``s3://``, ``gs://``...)."""
    return lancedb.connect(uri, **kwargs)
