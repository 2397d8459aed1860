"""Where rows are written: one partition of a LanceDB table replaced in one commit.

Every write replaces exactly one partition in **one** LanceDB commit: a
``merge_insert`` keyed on the deterministic ``chunk_id`` that updates matched rows,
inserts new ones and deletes the partition's rows that the new source no longer
holds (``when_not_matched_by_source_delete``). A crash therefore leaves the old
rows or the new ones, never a mix (LanceDB commits are atomic table versions).
"""

from __future__ import annotations

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
