"""The LanceDB sink: table schemas, chunk rows, atomic partition writes, indexes and search.

Dagster-free. Rows are built in :mod:`~latechunk_dagster.sink.rows`, written in
:mod:`~latechunk_dagster.sink.writes` (one commit per partition), indexed in
:mod:`~latechunk_dagster.sink.indexing` and searched in :mod:`~latechunk_dagster.sink.search` (its
LanceDB queries and their settings: :mod:`~latechunk_dagster.sink.queries`).
"""

from latechunk_dagster.sink.creation import open_or_create
from latechunk_dagster.sink.schema import (
    CHUNK_TABLE,
    REJECTED_SCHEMA,
    REJECTED_TABLE,
    chunk_id,
    chunk_schema,
    rejection_id,
    sql_in,
    sql_string,
)
from latechunk_dagster.sink.writes import WriteResult, connect, delete_partitions, replace_partition

__all__ = [
    "CHUNK_TABLE",
    "REJECTED_SCHEMA",
    "REJECTED_TABLE",
    "WriteResult",
    "chunk_id",
    "chunk_schema",
    "connect",
    "delete_partitions",
    "open_or_create",
    "rejection_id",
    "replace_partition",
    "sql_in",
    "sql_string",
]
