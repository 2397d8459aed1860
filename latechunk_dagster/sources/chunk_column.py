"""A store column that carries each document's own chunks: its shape rule, one home for every reader.

A document's chunks (``DocumentStore(chunks_column=...)``, ``iter_table_documents(chunks_column=...)``)
are a non-empty list whose items are either all ``[start, end]`` pairs of integers (character
ranges: Python ``str`` indices into :attr:`Document.text <latechunk_dagster.sources.documents.Document.text>`,
the text after a leading byte order mark is removed, as every char range of a store) or all strings
(the chunk texts, located in the text in order by
:func:`~latechunk_dagster.core.chunking.given.locate_chunks`). In a file:

* JSONL: a JSON array, ``[[0, 12], [12, 40]]`` or ``["First part.", "Second part."]``;
* Parquet / an upstream table: ``list<list<int>>``, ``list<fixed_size_list<int, 2>>``,
  ``list<struct<start: int, end: int>>`` (read as pairs, :func:`arrow_chunks`) or ``list<string>``.

Only the shape is checked here; whether the chunks fit the text (inside it, in order, not
overlapping, found) is the chunking strategy's rule (``GivenChunks``), which rejects the document
naming the first chunk that does not fit. A value of the wrong shape (null or missing: a
document without its chunks cannot be chunked as given; an empty list; not a list; a mix of
pairs and strings; a pair that is not two integers, booleans included) is a ``bad_chunks``
:class:`~latechunk_dagster.sources.documents.RejectedRow` of its row, naming chunk ``k``
counted from 0 as the strategy and ``chunk_index`` count. A file or table without the column
at all cannot be read, as one without its ``text`` column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from latechunk_dagster.sources.documents import ChunkList

#: Column names the store readers give a row's own fields; a chunks column cannot take one of them.
RESERVED_COLUMNS = ("id", "text", "shard")

#: Characters of a bad value shown in a rejection's detail.
_SHOWN = 60


class BadChunksError(ValueError):
    """A chunks value of the wrong shape; the message says what is wrong (without file or row)."""


def check_chunks_column(name: str | None, others: tuple[str, ...] = RESERVED_COLUMNS) -> None:
    """The name of a chunks column is usable: ``None`` (no column) or a non-empty string that is
    none of ``others`` (the columns read as id, text or shard).

    Raises:
        ValueError: naming the column and why (configuration, not data: nothing has been read).
    """
    if name is None:
        return
    if not isinstance(name, str) or not name:
        raise ValueError(f"chunks_column must be a non-empty column name or None, got {name!r}")
    if name in others:
        raise ValueError(f"chunks_column {name!r} is a column the documents are read from ({', '.join(others)})")


def as_chunks(value: Any) -> ChunkList:
    """A row's chunks value (from ``json.loads`` or Arrow's ``to_pylist``) as the canonical tuple:
    ``((start, end), ...)`` of ints, or ``(text, ...)`` of strings.

    Raises:
        BadChunksError: the shape rule of the module docstring, naming the first bad chunk.
    """
    if value is None:
        raise BadChunksError("is null (each document needs its chunks)")
    if not isinstance(value, list | tuple):
        raise BadChunksError(f"must be a list of [start, end] pairs or of strings, got {_kind(value)}")
    if not value:
        raise BadChunksError("is an empty list (give at least one chunk)")
    if isinstance(value[0], str):
        for k, item in enumerate(value):
            if not isinstance(item, str):
                raise BadChunksError(f"chunk {k} is not a string ({_show(item)}), but chunk 0 is: {_ONE_KIND}")
        return tuple(value)
    pairs = []
    for k, item in enumerate(value):
        if isinstance(item, str):
            raise BadChunksError(f"chunk {k} is a string ({_show(item)}), but chunk 0 is not: {_ONE_KIND}")
        if not (isinstance(item, list | tuple) and len(item) == 2 and all(_is_int(v) for v in item)):
            raise BadChunksError(f"chunk {k} must be a [start, end] pair of integers, got {_show(item)}")
        pairs.append((item[0], item[1]))
    return tuple(pairs)


def arrow_chunks(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A chunks column whose items are ``struct<start: int, end: int>`` as ``list<list<int64>>``
    (a null item stays null, so it is refused as not a pair); any other column unchanged. Built
    from the struct's child arrays (``take`` interleaves start and end), not row by row."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([arrow_chunks(c) for c in array.chunks]) if _is_struct_list(array.type) else array
    if not _is_struct_list(array.type):
        return array
    items = array.flatten()  # the items of this (maybe sliced) array only
    start, end = (f.cast(pa.int64()) for f in items.flatten())  # child arrays, null where the item is null
    n = len(items)
    order = np.empty(2 * n, dtype=np.int64)
    order[0::2] = np.arange(n)
    order[1::2] = np.arange(n) + n
    values = pa.concat_arrays([start, end]).take(pa.array(order))
    pairs = pa.FixedSizeListArray.from_arrays(values, 2, mask=items.is_null())
    offsets = array.offsets.cast(pa.int64()).to_numpy()
    offsets = offsets - offsets[0]
    return pa.LargeListArray.from_arrays(pa.array(offsets), pairs, mask=array.is_null())


def _is_struct_list(kind: pa.DataType) -> bool:
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return False
    item = kind.value_type
    names = [item.field(i).name for i in range(item.num_fields)] if pa.types.is_struct(item) else []
    return names == ["start", "end"] and all(pa.types.is_integer(item.field(i).type) for i in range(2))


_ONE_KIND = "give all chunks as strings or all as [start, end] pairs"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", str: "a string", bool: "a boolean"}.get(type(value), f"a {type(value).__name__}")


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."
