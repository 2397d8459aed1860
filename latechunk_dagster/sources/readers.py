"""Streaming row readers, one per store kind: they yield one row at a time, never a whole file.

* text files: one document per file, in :mod:`latechunk_dagster.sources.text_files` (PDF, DOCX,
  PPTX and HTML files are converted to Markdown first);
* JSONL: line by line from a binary file handle (:func:`jsonl_rows`; ``.jsonl.gz`` and
  ``.jsonl.zst`` through their decompressor, :func:`open_jsonl`); splits on ``\\n`` only, as
  U+2028 and friends may occur raw inside JSON strings;
* Parquet: record batches of :data:`PARQUET_BATCH_ROWS` rows (:func:`parquet_rows`), only the
  ``id``, ``text`` and ``shard`` columns (and a chunks column when the store has one).

Peak memory is one line, one file (text) or one record batch, whatever the store's size.

A row that does not make a document (invalid JSON, JSON that Python's parser cannot read: nested
too deeply, an integer of too many digits, a number beyond a float's range (``1e999``, which
Python reads as infinity) or ``NaN``/``Infinity``, a JSON object with a repeated key, a missing or null
``id``, an ``id`` that is not valid Unicode, a ``text`` that is not a string or is UTF-16/UTF-32
read as UTF-8, a bad ``shard`` value, a chunks value of the wrong shape) becomes a
:class:`~latechunk_dagster.sources.documents.RejectedRow` naming the file, the row (from 1) and
the reason; the rows around it are read as usual. A file that cannot be read at all (I/O error,
not Parquet, no ``id``/``text``/chunks column or one of them named twice, a JSONL file in
UTF-16/UTF-32) is one ``RejectedRow`` with doc_id ``"*"``; a text file in UTF-16/UTF-32 is one
``bad_encoding`` row. Nothing here raises for bad data.

Leading byte order marks are removed (rule in :mod:`latechunk_dagster.sources.documents`); text
in UTF-16 or UTF-32 is found by :func:`~latechunk_dagster.core.encoding.foreign_encoding`.
"""

from __future__ import annotations

import io
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from latechunk_dagster.core.encoding import SAMPLE_BYTES, foreign_encoding
from latechunk_dagster.sources.chunk_column import BadChunksError, arrow_chunks, as_chunks
from latechunk_dagster.sources.documents import (
    BOM,
    Document,
    MissingColumnError,
    RejectedRow,
    RepeatedColumnError,
    ShardError,
    is_valid_unicode,
    printable,
    strip_bom,
)
from latechunk_dagster.sources.listing import key_problem
from latechunk_dagster.sources.retries import retried
from latechunk_dagster.sources.storage import PinnedReader, open_input

#: What reading a JSONL stream raises where it breaks (pyarrow: a compressed stream cut off or corrupt,
#: "Truncated compressed stream"; an object's connection lost): the rest of the file is not read.
_STREAM_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError)

#: Rows per Parquet record batch read at a time.
PARQUET_BATCH_ROWS = 1024

_BOM_BYTES = BOM.encode("utf-8")


@dataclass(frozen=True)
class Row:
    """One raw row of a table file: its number (from 1), its values, and where it is.

    ``repeated``: keys a JSON object of the row gave more than once (sorted; ``values`` then holds
    the last value of each, which is *not* used: the row is rejected as ``duplicate_key``, in its
    ``shard`` when that key is not one of them).
    """

    number: int
    values: dict[str, Any]
    where: str
    repeated: tuple[str, ...] = ()


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (which value is meant is ambiguous). Attributes: ``keys``."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        super().__init__(f"repeated key(s) {[printable(k) for k in keys]} in one JSON object")


class JSONLimitError(ValueError):
    """JSON that Python's parser cannot read although it may be well-formed (RFC 8259 lets a parser
    limit nesting depth and number size): nested deeper than the recursion limit (``json`` raises
    ``RecursionError``), an integer of more digits than ``sys.get_int_max_str_digits()``, a number
    beyond a float's range (``1e999``); and Python's extensions ``NaN``/``Infinity``, which are not JSON."""


def loads_with_repeated_keys(line: str) -> tuple[Any, list[str]]:
    """``json.loads(line)`` and the keys that any object in it gives more than once (sorted), found
    with ``object_pairs_hook`` (plain ``json.loads`` keeps the last value silently; RFC 8259 leaves
    such an object's meaning undefined).

    Raises:
        json.JSONDecodeError: not JSON. JSONLimitError: beyond what Python's parser reads, or a
            number that is not a finite float (``1e999``, ``NaN``, ``Infinity``: Python's ``json``
            would read them as infinity or NaN, silently).
    """
    repeated: set[str] = set()

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            repeated.update(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        return out

    try:
        value = json.loads(line, object_pairs_hook=pairs_to_dict, parse_float=_finite, parse_constant=_no_constant)
        return value, sorted(repeated)
    except (json.JSONDecodeError, JSONLimitError):
        raise
    except RecursionError:
        limit = sys.getrecursionlimit()
        raise JSONLimitError(f"nested too deeply for Python's JSON parser (it stops near {limit} levels)") from None
    except ValueError as exc:  # int() of too many digits: the only other ValueError json.loads raises
        raise JSONLimitError(f"an integer with more digits than Python's JSON parser reads ({exc})") from None


def _finite(number: str) -> float:
    """A JSON number with a fraction or exponent as a float, refused where it does not fit one:
    Python reads ``1e999`` as infinity, silently (RFC 8259 section 6 lets a parser limit the range)."""
    value = float(number)
    if not math.isfinite(value):
        raise JSONLimitError(f"the number {number[:40]} is beyond a 64-bit float's range (it would read as {value})")
    return value


def _no_constant(name: str) -> float:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's ``json`` reads them, RFC 8259 has no such values."""
    raise JSONLimitError(f"{name} is not a JSON number (RFC 8259 has no NaN or Infinity)")


def loads_strict(line: str) -> Any:
    """``json.loads`` that refuses a repeated key in any object (see :func:`loads_with_repeated_keys`).

    Raises:
        json.JSONDecodeError: not JSON. JSONLimitError: beyond what Python's parser reads.
        DuplicateKeyError: an object repeats a key.
    """
    value, repeated = loads_with_repeated_keys(line)
    if repeated:
        raise DuplicateKeyError(repeated)
    return value


def open_jsonl(file: PurePath, *, random_access: bool = False) -> BinaryIO:
    """A binary handle on a JSONL file's lines, local or an object: :func:`~latechunk_dagster.sources.
    storage.open_input`, whose stream pyarrow decompresses by the name's suffix (``.jsonl.gz``: gzip,
    ``.jsonl.zst``: zstd; a cut or corrupt stream raises ``OSError`` where it breaks); seekable with
    ``random_access`` (never a compressed file: :func:`is_compressed`).

    Raises:
        OSError: the file cannot be opened.
    """
    return open_input(file, random_access=random_access and not is_compressed(file))


def is_compressed(file: PurePath) -> bool:
    """Whether :func:`open_jsonl` decompresses ``file`` (its lines cannot be found by byte offset)."""
    return file.name.lower().endswith((".gz", ".zst"))


def jsonl_rows(file: Path, lines: Iterable[tuple[int, int]] | None = None) -> Iterator[Row | RejectedRow]:
    """A :class:`Row` per non-blank line of a JSONL file (number = line number from 1), or a
    ``RejectedRow`` for a line that is not a JSON object. A line whose object repeats a key is a
    ``Row`` with :attr:`Row.repeated` set (rejected by :func:`document_from_row`, in its shard). A
    BOM may start the file or any line. A file in UTF-16 / UTF-32 is one ``unreadable_file`` row
    naming the encoding (its lines, split on the byte ``0A``, are not lines of that text).

    ``lines``: read only these ``(line number, byte offset)`` lines (from :func:`jsonl_lines`), by
    seeking, instead of the whole file.
    """
    name = printable(str(file))
    number = 0
    try:
        handle = retried(lambda: open_jsonl(file, random_access=lines is not None), file)
    except OSError as exc:
        yield RejectedRow("*", name, "unreadable_file", f"{name}: cannot be read: {exc}")
        return
    try:
        with handle:
            refused = _foreign_jsonl(handle, name)
            if refused is not None:
                yield refused
                return
            numbered = enumerate(handle, start=1) if lines is None else _seek_lines(handle, lines)
            for number, raw in numbered:
                row = jsonl_row(raw, number, name)
                if isinstance(row, RejectedRow) and isinstance(handle, PinnedReader):
                    handle.check_unchanged()  # a bad line may be the seam of two versions: say so instead
                if row is not None:
                    yield row
    except _STREAM_ERRORS as exc:  # a compressed stream cut off or corrupt, a lost connection: the rest is not read
        after = f" after row {number}" if number else ""
        yield RejectedRow("*", name, "unreadable_file", f"{name}: cannot be read{after}: {type(exc).__name__}: {exc}")


def _foreign_jsonl(handle: io.BufferedReader, name: str) -> RejectedRow | None:
    """The ``unreadable_file`` row of a JSONL file in UTF-16 / UTF-32 (by its first bytes, peeked at
    in the buffer: an object's stream cannot seek back), else ``None``; nothing is consumed.

    Raises:
        OSError: the file cannot be read.
    """
    head = handle.peek(SAMPLE_BYTES)[:SAMPLE_BYTES]
    encoding = foreign_encoding(head)
    return None if encoding is None else RejectedRow("*", name, "unreadable_file", encoding.file_detail(name))


def _seek_lines(handle: BinaryIO, lines: Iterable[tuple[int, int]]) -> Iterator[tuple[int, bytes]]:
    for number, offset in lines:
        handle.seek(offset)
        yield number, handle.readline()


def jsonl_lines(file: Path) -> Iterator[tuple[int, int, Row | RejectedRow]]:
    """``(line number, byte offset, row)`` per non-blank line of a JSONL file (rows as
    :func:`jsonl_rows` makes them), for an index of where each shard's lines are; a file in
    UTF-16 / UTF-32 is the one ``(1, 0, unreadable_file row)``.

    Raises:
        OSError: the file cannot be read.
    """
    name = printable(str(file))
    with open_input(file) as handle:
        refused = _foreign_jsonl(handle, name)
        if refused is not None:
            yield 1, 0, refused
            return
        offset = 0
        for number, raw in enumerate(handle, start=1):
            row = jsonl_row(raw, number, name)
            if row is not None:
                yield number, offset, row
            offset += len(raw)


def jsonl_row(raw: bytes, number: int, name: str) -> Row | RejectedRow | None:
    """One JSONL line (``name``: the file, as messages name it): a :class:`Row`, a ``RejectedRow``
    (not a JSON object, or JSON that Python's parser cannot read: ``invalid_json``; the last line
    cut off: ``truncated_file``), or ``None`` for a blank line. A leading BOM is removed."""
    if raw.startswith(_BOM_BYTES):
        raw = raw[len(_BOM_BYTES) :]
    # the line's own end is not JSON: without it a parser error names a column of this line
    line = raw.decode("utf-8", errors="surrogateescape").rstrip("\r\n")
    if not line.strip():
        return None
    where = f"{name}: row {number}"
    try:
        values, repeated = loads_with_repeated_keys(line)
    except json.JSONDecodeError as exc:
        if not raw.endswith(b"\n"):  # only a file's last line lacks its newline: the file was cut off
            detail = f"{where}: the last line is cut off (no newline, not valid JSON: {exc}); a truncated file?"
            return RejectedRow(f"row {number}", where, "truncated_file", detail)
        return RejectedRow(f"row {number}", where, "invalid_json", f"{where}: invalid JSON: {exc}")
    except JSONLimitError as exc:  # well-formed or not, it cannot be read; the rows around it can
        return RejectedRow(f"row {number}", where, "invalid_json", f"{where}: JSON that cannot be read: {exc}")
    if not isinstance(values, dict):
        detail = f"{where}: expected a JSON object, got {type(values).__name__}"
        return RejectedRow(f"row {number}", where, "invalid_json", detail)
    return Row(number, values, where, tuple(repeated))


def _duplicate_key_row(row: Row) -> RejectedRow:
    """The rejection of a row whose JSON object repeats a key; named by its ``id`` when that key is
    not repeated (and is a usable id), else by its row number."""
    doc_id = f"row {row.number}"
    value = row.values.get("id")
    if "id" not in row.repeated and isinstance(value, str | int) and not isinstance(value, bool) and value != "":
        doc_id = printable(str(value))
    why = DuplicateKeyError(list(row.repeated))
    detail = f"{row.where}: {why}: which value is meant is ambiguous; give each key once"
    return RejectedRow(doc_id, row.where, "duplicate_key", detail)


def check_columns(names: Sequence[str], required: Iterable[str], optional: Iterable[str] = (), *, where: str) -> None:
    """The column rule of every table source (Parquet files, upstream tables): each ``required``
    column is there, and neither it nor an ``optional`` one is named twice (a join without
    suffixes writes ``id, text, text``: which one is meant is ambiguous, and Arrow's lookup by name
    raises ``KeyError``). Columns read by no one may repeat. ``where`` starts each message.

    Raises:
        MissingColumnError: a required column is absent. RepeatedColumnError: a column read is
            named more than once (both name the columns and list the table's).
    """
    needed = list(required)
    missing = [c for c in needed if c not in names]
    if missing:
        raise MissingColumnError(f"{where}: missing column(s) {missing} (columns: {list(names)})")
    counts = Counter(names)
    repeated = [c for c in dict.fromkeys([*needed, *optional]) if counts[c] > 1]
    if repeated:
        raise RepeatedColumnError(
            f"{where}: column(s) {repeated} named more than once (columns: {list(names)}); which one is "
            "meant is ambiguous: give each column its own name (e.g. suffixes on a join)"
        )


def parquet_rows(file: Path, columns: tuple[str, ...] = ("id", "text", "shard")) -> Iterator[Row | RejectedRow]:
    """A :class:`Row` per row of a Parquet file, read in record batches of
    :data:`PARQUET_BATCH_ROWS`, only ``columns`` that exist. Each of ``columns`` but ``shard`` is
    required: a file that is not Parquet, or lacks one of them (``id``, ``text``, a chunks column),
    or names one of ``columns`` twice (:func:`check_columns`), is one ``unreadable_file``
    ``RejectedRow`` (doc_id ``"*"``). A ``list<struct<start, end>>`` chunks column is read as pairs
    (:func:`~latechunk_dagster.sources.chunk_column.arrow_chunks`)."""
    name = printable(str(file))
    try:
        handle = retried(lambda: open_input(file, random_access=True), file)
    except OSError as exc:
        yield RejectedRow("*", name, "unreadable_file", f"{name}: not a readable Parquet file: {exc}")
        return
    try:
        with handle:
            yield from _parquet_rows(handle, name, columns)
    except OSError as exc:  # the file replaced while it was read (storage.PinnedReader): its rows are not one version
        yield RejectedRow("*", name, "unreadable_file", f"{name}: cannot be read: {exc}")


def _parquet_rows(handle: BinaryIO, name: str, columns: tuple[str, ...]) -> Iterator[Row | RejectedRow]:
    try:
        parquet = pq.ParquetFile(handle)
        names = parquet.schema_arrow.names
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on a bad file
        yield RejectedRow("*", name, "unreadable_file", f"{name}: not a readable Parquet file: {exc}")
        return
    needed = [c for c in columns if c != "shard"]
    try:
        check_columns(names, needed, columns, where=name)
    except ShardError as exc:
        yield RejectedRow("*", name, "unreadable_file", str(exc))
        return
    wanted = [c for c in columns if c in names]
    number = 0
    try:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted):
            cols = {c: column_values(arrow_chunks(batch.column(c))) for c in wanted}
            for i in range(batch.num_rows):
                number += 1
                yield Row(number, {c: cols[c][i] for c in wanted}, f"{name}: row {number}")
    except (OSError, ValueError) as exc:
        yield RejectedRow("*", name, "unreadable_file", f"{name}: read failed after row {number}: {exc}")


def column_values(array: pa.Array) -> list[Any]:
    """``array.to_pylist()``, except that a string column holding bytes that are not valid UTF-8
    (Parquet writers and Arrow do not always validate) is decoded value by value with
    ``surrogateescape``: the bad value becomes a lone-surrogate string that its row is rejected
    for (``bad_id``, ``bad_shard``, invalid Unicode text), instead of the whole batch failing."""
    try:
        return array.to_pylist()
    except UnicodeDecodeError:
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            raise
        raw = array.view(pa.large_binary() if pa.types.is_large_string(array.type) else pa.binary())
        return [None if v is None else v.decode("utf-8", errors="surrogateescape") for v in raw.to_pylist()]


def document_from_row(row: Row, chunks_column: str | None = None) -> Document | RejectedRow:
    """The document of a table row (``id`` string or integer, ``text`` string; BOM removed from
    the text), or a ``RejectedRow`` saying which value is wrong (an ``id`` that is not valid Unicode
    is named with :func:`~latechunk_dagster.sources.documents.printable` escapes; a ``text`` that
    is UTF-16 / UTF-32 bytes read as UTF-8 is ``bad_encoding``, naming the encoding).

    ``chunks_column``: the key of the row's own chunks (``None``: none, ``Document.chunks`` is
    ``None``); a value that is missing or of the wrong shape is ``bad_chunks``
    (:func:`~latechunk_dagster.sources.chunk_column.as_chunks`, naming the row and the chunk)."""
    if row.repeated:
        return _duplicate_key_row(row)
    doc_id = row.values.get("id")
    if doc_id is None:
        return RejectedRow(f"row {row.number}", row.where, "missing_id", f"{row.where}: missing or null 'id'")
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        detail = f"{row.where}: 'id' must be a string or an integer, got {type(doc_id).__name__}"
        return RejectedRow(f"row {row.number}", row.where, "bad_id", detail)
    if doc_id == "":
        return RejectedRow(f"row {row.number}", row.where, "bad_id", f"{row.where}: empty 'id'")
    if isinstance(doc_id, str) and not is_valid_unicode(doc_id):
        detail = f"{row.where}: 'id' {printable(doc_id)!r} is not valid Unicode (a lone surrogate code point)"
        return RejectedRow(printable(doc_id), row.where, "bad_id", detail)
    text = row.values.get("text")
    if not isinstance(text, str):
        got = "missing" if "text" not in row.values else ("null" if text is None else type(text).__name__)
        detail = f"{row.where}: 'text' must be a string, got {got} (id {str(doc_id)!r})"
        return RejectedRow(str(doc_id), row.where, "bad_text", detail)
    encoding = foreign_encoding(text)
    if encoding is not None:
        detail = f"{row.where}: 'text' of id {str(doc_id)!r}: {encoding.text_detail()}"
        return RejectedRow(str(doc_id), row.where, "bad_encoding", detail)
    if chunks_column is None:
        return Document.from_text(str(doc_id), strip_bom(text))
    try:
        if chunks_column not in row.values:
            raise BadChunksError("is missing (each document needs its chunks)")
        chunks = as_chunks(row.values[chunks_column])
    except BadChunksError as exc:
        detail = f"{row.where}: {chunks_column!r} of id {str(doc_id)!r} {exc}"
        return RejectedRow(str(doc_id), row.where, "bad_chunks", detail)
    return Document.from_text(str(doc_id), strip_bom(text), chunks)


def shard_of_row(row: Row, default: str) -> tuple[str, RejectedRow | None]:
    """The shard of a single-file row: its ``shard`` value (a non-empty string, or an integer made
    a string); a missing or null value means ``default`` (the file stem). Any other value (one that
    is not valid Unicode included: it cannot be a partition key) puts the row in ``default`` and
    returns why it is rejected (:func:`~latechunk_dagster.sources.listing.key_problem`: a NUL, a
    newline, ``...``: what Dagster or its PostgreSQL storage refuse in a partition key)."""
    if "shard" in row.repeated:
        return default, _duplicate_key_row(row)
    if "shard" not in row.values or row.values["shard"] is None:
        return default, None
    shard = row.values["shard"]
    if isinstance(shard, int) and not isinstance(shard, bool):
        return str(shard), None
    if isinstance(shard, str) and shard and key_problem(shard) is None:
        return shard, None
    if not isinstance(shard, str) or not shard:
        what = "a non-empty string"
    else:
        what = f"usable as a partition key (it {key_problem(shard)})"
    detail = f"{row.where}: 'shard' must be {what}, got {shard!r}; counted in shard {default!r}"
    doc_id = row.values.get("id")
    named = printable(str(doc_id)) if doc_id else f"row {row.number}"
    return default, RejectedRow(named, row.where, "bad_shard", detail)
