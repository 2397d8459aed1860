"""Documents from tables in memory: the value of a user's upstream Dagster asset.

A table is a ``pyarrow.Table`` or any object that exports Arrow data (pandas >= 2.2 and polars
``DataFrame`` implement the Arrow PyCapsule stream interface, ``__arrow_c_stream__``), with an id
and a text column. A multi-partition load of a partitioned upstream asset arrives as
``{partition_key: table}`` (Dagster's default IO managers do this). Rows follow the same rules as
the file stores (:mod:`latechunk_dagster.sources.readers`): a bad row or a later duplicate id
becomes a :class:`~latechunk_dagster.sources.documents.RejectedRow`, a leading BOM is removed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from latechunk_dagster.sources.documents import (
    Document,
    NotATableError,
    RejectedRow,
    first_of_each_id,
)
from latechunk_dagster.sources.readers import Row, check_columns, column_values, document_from_row


def as_arrow(value: Any) -> pa.Table:
    """``value`` as a ``pyarrow.Table``.

    Raises:
        NotATableError: ``value`` is not a table (no Arrow export, no ``to_arrow()``), or its export
            fails (pandas refuses a frame with a repeated column name: ``ValueError``); a ``TypeError``.
    """
    if isinstance(value, pa.Table):
        return value
    try:
        if hasattr(value, "__arrow_c_stream__"):
            return pa.table(value)
        if hasattr(value, "to_arrow"):
            return pa.table(value.to_arrow())
    except (ValueError, pa.ArrowException) as exc:  # bad data: the shard's old rows stay (ShardError)
        raise NotATableError(f"documents ({type(value).__name__}) cannot be read as an Arrow table: {exc}") from exc
    raise NotATableError(
        f"documents must be a pyarrow.Table or a DataFrame that exports Arrow (pandas >= 2.2, polars), "
        f"got {type(value).__name__}"
    )


def iter_table_documents(
    value: Any, id_column: str = "id", text_column: str = "text", *, where: str = "documents"
) -> Iterator[Document | RejectedRow]:
    """The documents of one table in row order, one record batch at a time.

    Raises:
        NotATableError: not a table. MissingColumnError: ``id_column`` or ``text_column`` is missing.
        RepeatedColumnError: one of them is named twice (:func:`~latechunk_dagster.sources.readers.check_columns`).
    """
    table = as_arrow(value)
    check_columns(table.column_names, (id_column, text_column), where=where)
    yield from first_of_each_id(_table_rows(table, id_column, text_column, where))


def _table_rows(
    table: pa.Table, id_column: str, text_column: str, where: str
) -> Iterator[tuple[Document, str] | RejectedRow]:
    """``(document, where)`` or a :class:`RejectedRow` per row, one record batch at a time."""
    number = 0
    for batch in table.select([id_column, text_column]).to_batches(max_chunksize=1024):
        for doc_id, text in zip(column_values(batch.column(0)), column_values(batch.column(1))):
            number += 1
            row = Row(number, {"id": doc_id, "text": text}, f"{where}: row {number}")
            item = document_from_row(row)
            yield (item, row.where) if isinstance(item, Document) else item


def partition_tables(value: Any, partitions: list[str]) -> Mapping[str, Any]:
    """``{partition: table}`` from an upstream value: one table (one partition) or a mapping (a range)."""
    return value if isinstance(value, Mapping) else {partitions[0]: value}
