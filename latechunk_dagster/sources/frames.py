"""Documents from tables in memory: the value of a user's upstream Dagster asset.

A table is a ``pyarrow.Table`` or any object that exports Arrow data (pandas >= 2.2 and polars
``DataFrame`` implement the Arrow PyCapsule stream interface, ``__arrow_c_stream__``), with an id
and a text column. A multi-partition load of a partitioned upstream asset arrives as
``{partition_key: table}`` (Dagster's default IO managers do this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from latechunk_dagster.sources.files import Document, _document_from_row, _sorted_unique


def as_arrow(value: Any) -> pa.Table:
    """``value`` as a ``pyarrow.Table``.

    Raises:
        TypeError: ``value`` is not a table (no Arrow export, no ``to_arrow()``).
    """
    if isinstance(value, pa.Table):
        return value
    if hasattr(value, "__arrow_c_stream__"):
        return pa.table(value)
    if hasattr(value, "to_arrow"):
        return pa.table(value.to_arrow())
    raise TypeError(
        f"documents must be a pyarrow.Table or a DataFrame that exports Arrow (pandas >= 2.2, polars), "
        f"got {type(value).__name__}"
    )


def documents_from_table(
    value: Any, id_column: str = "id", text_column: str = "text", *, where: str = ""
) -> list[Document]:
    """The documents of one table, sorted by doc_id.

    Raises:
        ValueError: a missing column, a bad row (null id, non-string text; the message names the
            row) or a duplicate doc_id.
    """
    table = as_arrow(value)
    missing = [c for c in (id_column, text_column) if c not in table.column_names]
    if missing:
        raise ValueError(f"{where or 'documents'}: missing column(s) {missing} (columns: {table.column_names})")
    ids = table.column(id_column).to_pylist()
    texts = table.column(text_column).to_pylist()
    docs = [
        _document_from_row({"id": i, "text": t}, f"{where or 'documents'}: row {n}")
        for n, (i, t) in enumerate(zip(ids, texts), start=1)
    ]
    return _sorted_unique(docs, where or "documents", "upstream asset")


def documents_by_partition(
    value: Any, partitions: Sequence[str], id_column: str = "id", text_column: str = "text"
) -> dict[str, Any]:
    """``{partition: documents or the exception raised reading them}`` for the partitions of a run.

    ``value`` is one table (a single partition) or ``{partition: table}`` (a range).
    """
    tables: Mapping[str, Any] = value if isinstance(value, Mapping) else {partitions[0]: value}
    out: dict[str, Any] = {}
    for p in partitions:
        if p not in tables:
            out[p] = KeyError(f"the upstream asset has no data for partition {p!r}")
            continue
        try:
            out[p] = documents_from_table(tables[p], id_column, text_column, where=f"partition {p!r}")
        except (ValueError, TypeError) as exc:
            out[p] = ValueError(str(exc))
    return out
