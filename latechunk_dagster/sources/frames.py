"""Documents from tables in memory: the value of a user's upstream Dagster asset.

A table is a ``pyarrow.Table`` or any object that exports Arrow data (pandas >= 2.2 and polars
``DataFrame`` implement the Arrow PyCapsule stream interface, ``__arrow_c_stream__``), with an id
and a text column. A multi-partition load of a partitioned upstream asset arrives as
``{partition_key: table}`` (Dagster's default IO managers do this). Rows follow the same rules as
the file stores (:mod:`latechunk_dagster.sources.readers`): a bad row or a later duplicate id
becomes a :class:`~latechunk_dagster.sources.documents.RejectedRow`, a leading BOM is removed.
A ``chunks_column`` carries each document's own chunks, as in a file store
(:mod:`latechunk_dagster.sources.chunk_column`): a value of the wrong shape is a ``bad_chunks`` row,
a table without the column cannot be read (``MissingColumnError``). A pandas column of Python
lists that mixes pairs and strings cannot become Arrow at all, so its whole table is refused
(``NotATableError``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from latechunk_dagster.sources.chunk_column import arrow_chunks, check_chunks_column
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
    value: Any,
    id_column: str = "id",
    text_column: str = "text",
    *,
    where: str = "documents",
    chunks_column: str | None = None,
) -> Iterator[Document | RejectedRow]:
    """The documents of one table in row order, one record batch at a time.

    ``chunks_column``: the column of each document's own chunks (module docstring), or ``None``.

    Raises:
        NotATableError: not a table. MissingColumnError: ``id_column``, ``text_column`` or
            ``chunks_column`` is missing. RepeatedColumnError: one of them is named twice
            (:func:`~latechunk_dagster.sources.readers.check_columns`). ValueError: ``chunks_column``
            is ``id_column`` or ``text_column``, or ``"id"`` / ``"text"`` (names a row's fields take).
    """
    check_chunks_column(chunks_column, tuple(dict.fromkeys(("id", "text", id_column, text_column))))
    table = as_arrow(value)
    columns = (id_column, text_column) if chunks_column is None else (id_column, text_column, chunks_column)
    check_columns(table.column_names, columns, where=where)
    yield from first_of_each_id(_table_rows(table, columns, where, chunks_column))


def _table_rows(
    table: pa.Table, columns: tuple[str, ...], where: str, chunks_column: str | None
) -> Iterator[tuple[Document, str] | RejectedRow]:
    """``(document, where)`` or a :class:`RejectedRow` per row, one record batch at a time."""
    number = 0
    keys = ("id", "text", chunks_column)[: len(columns)]
    for batch in table.select(list(columns)).to_batches(max_chunksize=1024):
        for values in zip(*(column_values(arrow_chunks(batch.column(i))) for i in range(len(columns)))):
            number += 1
            row = Row(number, dict(zip(keys, values)), f"{where}: row {number}")
            item = document_from_row(row, chunks_column)
            yield (item, row.where) if isinstance(item, Document) else item


def partition_tables(value: Any, partitions: list[str]) -> Mapping[str, Any]:
    """``{partition: table}`` from an upstream value: one table (one partition) or a mapping (a range)."""
    return value if isinstance(value, Mapping) else {partitions[0]: value}
