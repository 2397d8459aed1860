"""Where rows are written: the LanceDB chunk table and the rejected-documents table.

Every write replaces exactly one partition in **one** LanceDB commit: a
``merge_insert`` keyed on the deterministic ``chunk_id`` that updates matched rows,
inserts new ones and deletes the partition's rows that the new source no longer
holds (``when_not_matched_by_source_delete``). A crash therefore leaves the old
rows or the new ones, never a mix (LanceDB commits are atomic table versions).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import lancedb
import pyarrow as pa

CHUNK_TABLE = "chunks"
REJECTED_TABLE = "rejected_documents"


def chunk_schema(dim: int) -> pa.Schema:
    """Schema of the chunk table; ``vector`` is ``fixed_size_list<float32>[dim]``."""
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("partition", pa.string(), nullable=False),
            pa.field("chunk_index", pa.int32(), nullable=False),
            pa.field("token_start", pa.int32(), nullable=False),
            pa.field("token_end", pa.int32(), nullable=False),
            pa.field("char_start", pa.int32()),
            pa.field("char_end", pa.int32()),
            pa.field("text", pa.string()),
            pa.field("headings", pa.list_(pa.string())),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("doc_sha256", pa.string(), nullable=False),
            pa.field("doc_tokens", pa.int32(), nullable=False),
            pa.field("windows", pa.int32(), nullable=False),
            # lineage
            pa.field("model_name", pa.string(), nullable=False),
            pa.field("model_sha256", pa.string(), nullable=False),
            pa.field("head", pa.string(), nullable=False),
            pa.field("opt_ins", pa.string(), nullable=False),
            pa.field("strategy", pa.string(), nullable=False),
            pa.field("strategy_params", pa.string(), nullable=False),
            pa.field("engine_path", pa.string(), nullable=False),
            pa.field("vllm_version", pa.string(), nullable=False),
            pa.field("package_version", pa.string(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("materialized_at", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


REJECTED_SCHEMA = pa.schema(
    [
        pa.field("rejection_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("doc_sha256", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("rejected_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def chunk_id(partition: str, doc_id: str, chunk_index: int) -> str:
    """Deterministic id of a chunk: hex sha256 of ``partition \\x1f doc_id \\x1f chunk_index`` (first 32 chars)."""
    return hashlib.sha256(f"{partition}\x1f{doc_id}\x1f{chunk_index}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def sql_string(value: str) -> str:
    """A SQL string literal for a LanceDB filter: quotes doubled (``x' OR '1'='1`` matches only itself)."""
    return "'" + value.replace("'", "''") + "'"


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
