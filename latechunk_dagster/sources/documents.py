"""What a store reader yields: a :class:`Document`, or a :class:`RejectedRow` for a row it could not read.

The byte order mark rule (the same for every store kind): a leading U+FEFF of a file, of a JSONL
line or of a text value is a byte order mark, not text. It is removed before the document is
formed, as Python's ``utf-8-sig`` codec does, so ``text``, ``sha256`` and every char range refer
to the text without it. A U+FEFF anywhere else is kept (it is then a zero-width no-break space).
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pyarrow as pa

if TYPE_CHECKING:
    from latechunk_dagster.sources.converters.pdf_boxes import Box, CharBoxes

BOM = "\ufeff"


class HasDocId(Protocol):
    """What :func:`first_of_each_id` reads of a document."""

    @property
    def doc_id(self) -> str: ...


D = TypeVar("D", bound=HasDocId)

_SURROGATE = re.compile("[\ud800-\udfff]")


def is_valid_unicode(text: str) -> bool:
    """True when ``text`` holds no lone surrogate, i.e. it can be encoded as UTF-8 (a name or id that
    is not valid UTF-8 on disk, or a JSON ``"\\ud800"``, decodes to lone surrogates)."""
    return _SURROGATE.search(text) is None


def printable(text: str) -> str:
    """``text`` with every lone surrogate written as an escape, so it can name a file, row or id in a
    message or a table: an undecodable byte ``0xE9`` (``surrogateescape``'s ``"\\udce9"``) becomes
    ``\\xe9``, any other lone surrogate ``\\ud800`` (``r\\xe9sum\\xe9.txt``, ``bad\\ud800id``).
    Valid text is returned unchanged.
    """
    return _SURROGATE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def key_of(*fields: Any) -> str:
    """Hex sha256 of the JSON array of ``fields`` (strings, ints): an unambiguous key of a tuple of
    fields (JSON quotes and escapes each string, so no two different tuples share an encoding, as
    fields joined with a separator character can). Lone surrogates are escaped, never an error."""
    return hashlib.sha256(json.dumps(list(fields), ensure_ascii=True).encode("ascii")).hexdigest()


def strip_bom(text: str) -> str:
    """``text`` without one leading U+FEFF (the byte order mark rule of the module docstring)."""
    return text[1:] if text.startswith(BOM) else text


def converted_vector_config(run_config: str, converter: str | None) -> str:
    """The ``vector_config`` of the rows of a document read by ``converter`` in a run whose own is
    ``run_config``: ``run_config`` itself for text read as it is (``converter`` ``None``), else the
    first 32 hex characters of :func:`key_of` ``(run_config, converter)`` (a converter upgrade
    re-encodes). :meth:`Document.vector_config`; the generations log recovers a table's run
    configuration from a converted row with it."""
    return run_config if converter is None else key_of(run_config, converter)[:32]


def text_sha256(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of ``text`` (lone surrogates encoded with ``surrogatepass``)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


#: A document's own chunks (:attr:`Document.chunks`): ``(start, end)`` char ranges, or the chunk texts.
ChunkList = tuple[tuple[int, int], ...] | tuple[str, ...]


def document_sha256(text: str, chunks: ChunkList | None = None) -> str:
    """The hash of a document, what the incremental rule compares with a stored ``doc_sha256``
    (one home: every reader makes documents with :meth:`Document.from_text`, which calls this).

    Without chunks it is :func:`text_sha256` of ``text``, so a store read without a chunks column
    keeps the hashes it always had. With chunks it is :func:`key_of` of ``text_sha256(text)`` and
    the chunks as JSON (``[[start, end], ...]`` or ``["text", ...]``), so it changes when the text
    or any chunk changes, and ranges never pass for texts.

    Args:
        text: the document's text; chunks: the canonical tuple of
            :func:`~latechunk_dagster.sources.chunk_column.as_chunks`, or ``None``.

    Returns:
        64 hex characters.
    """
    if chunks is None:
        return text_sha256(text)
    return key_of(text_sha256(text), [list(c) if isinstance(c, tuple) else c for c in chunks])


class ShardError(Exception):
    """A whole shard cannot be read as documents: gone from the store, not a table, a column missing.

    Bad data, not a bug: an orchestrator keeps the shard's old rows and records the reason
    (``unreadable_shard``; :data:`latechunk_dagster.pipeline.partition.SHARD_ERRORS`), while a
    programming error (a plain ``TypeError``, ``KeyError``...) fails the run. Each subclass also
    derives from the built-in error it used to be, so ``except KeyError`` still catches
    :class:`UnknownShardError`.
    """


class UnknownShardError(ShardError, KeyError):
    """The store has no shard of that name (removed since the partition was added, or a typo)."""

    def __str__(self) -> str:  # KeyError's own str() quotes its message
        return str(self.args[0]) if self.args else ""


class NotATableError(ShardError, TypeError):
    """A shard's value (an upstream asset's output) is not a table Arrow can read."""


class MissingColumnError(ShardError, ValueError):
    """A shard's table lacks the id or text column."""


class RepeatedColumnError(ShardError, ValueError):
    """A shard's table names a column it is read by (id, text, shard) more than once."""


#: What reading a whole shard raises for bad data (the rule of :class:`ShardError`): the shard
#: cannot be read (:class:`ShardError`), a file or directory is unreadable (``OSError``), or a file
#: is not what its name says (pyarrow's errors, e.g. ``ArrowInvalid`` for a file that is not Parquet).
READ_ERRORS: tuple[type[Exception], ...] = (ShardError, OSError, pa.ArrowException)


@dataclass(frozen=True)
class Document:
    """One document of a store.

    Attributes:
        doc_id: unique id within its shard.
        text: the text; may hold lone surrogates if the source was not valid Unicode.
        sha256: :func:`document_sha256` of ``text`` and ``chunks`` (64 hex characters; without
            chunks, :func:`text_sha256` of ``text``).
        chunks: the document's own chunks, read from a store's chunks column
            (:mod:`latechunk_dagster.sources.chunk_column`): ``None`` (none given: the run's
            strategy splits the text), ``((start, end), ...)`` int char ranges into ``text``, or
            ``(chunk_text, ...)``, non-empty and of one kind; whether they fit the text is the
            ``GivenChunks`` strategy's rule.
        converter: what converted the document's file into ``text`` (``"pdf/1 pypdfium2 5.15.0"``:
            :class:`~latechunk_dagster.sources.converters.Converted`), ``None`` for text read as it
            is; part of the rows' lineage and ``vector_config`` (a converter upgrade re-encodes).
        pages: char offsets into ``text`` where each page (PDF) or slide (PPTX) starts, or ``None``.
        boxes: where each character of ``text`` lies on its page (a PDF's:
            :class:`~latechunk_dagster.sources.converters.pdf_boxes.CharBoxes`, ~22 bytes a character,
            kept in memory only), from which the rows' ``boxes`` are made (:meth:`chunk_boxes`); ``None``
            for other documents. Not part of equality or ``sha256`` (the text is).
        source_stamp: what the store's listing said of the document's file (size, times:
            :mod:`~latechunk_dagster.sources.stamps`), recorded on its rows so that an unchanged file
            is not fetched again; ``None`` for table rows and an unsure stamp. Not part of equality.
    """

    doc_id: str
    text: str
    sha256: str
    chunks: ChunkList | None = None
    converter: str | None = None
    pages: tuple[int, ...] | None = None
    boxes: CharBoxes | None = field(default=None, compare=False, repr=False)
    source_stamp: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_text(cls, doc_id: str, text: str, chunks: ChunkList | None = None) -> Document:
        """The document of ``text`` (and its ``chunks``), with its :func:`document_sha256`."""
        return cls(doc_id, text, document_sha256(text, chunks), chunks)

    @classmethod
    def from_converted(
        cls,
        doc_id: str,
        text: str,
        converter: str,
        pages: tuple[int, ...] | None = None,
        boxes: CharBoxes | None = None,
    ) -> Document:
        """The document of a converted file: its Markdown ``text`` (``sha256`` is :func:`text_sha256`
        of it, as for any text), the ``converter`` that made it, its ``pages`` and its characters' ``boxes``."""
        return cls(doc_id, text, document_sha256(text), None, converter, pages, boxes)

    def vector_config(self, run_config: str) -> str:
        """The ``vector_config`` of this document's rows: the run's (:func:`latechunk_dagster.pipeline.vector_config`)
        for text read as it is; for a converted document the first 32 hex characters of the sha256
        of the JSON array ``[run_config, converter]``, so a converter upgrade re-encodes it."""
        return converted_vector_config(run_config, self.converter)

    def page_range(self, char_range: tuple[int, int] | None) -> tuple[int, int] | None:
        """The pages (from 1, both ends included) a char range of the text lies on, from
        :attr:`pages`; ``None`` without pages or without a range."""
        if self.pages is None or char_range is None:
            return None
        start, end = char_range
        return bisect_right(self.pages, start), bisect_right(self.pages, max(start, end - 1))

    def chunk_boxes(self, char_range: tuple[int, int] | None) -> list[Box] | None:
        """The boxes ``(page from 1, x0, y0, x1, y1)`` (PDF points) of a char range of the text, one per
        run of its characters on one line (:meth:`CharBoxes.chunk_boxes
        <latechunk_dagster.sources.converters.pdf_boxes.CharBoxes.chunk_boxes>`); ``None`` for a
        document without boxes or a range without any boxed character."""
        if self.boxes is None or len(self.boxes) != len(self.text):
            return None
        return self.boxes.chunk_boxes(char_range) or None


@dataclass(frozen=True)
class RejectedRow:
    """A row (or a whole file) of a store that does not make a document. Its neighbours are unaffected.

    Attributes:
        doc_id: the row's id when it has a usable one, else ``"row <n>"`` (``"*"`` for a whole file).
        where: ``"<file>: row <n>"`` (or ``"<file>"``), from 1, as the file counts lines/rows.
        reason: ``missing_id`` | ``bad_id`` (an id that is not valid Unicode included) | ``bad_text`` |
            ``bad_encoding`` (a text file, or a text value, in UTF-16 / UTF-32 rather than UTF-8) |
            ``bad_shard`` | ``invalid_json`` (JSON that Python's parser cannot read included: nested
            too deeply, an integer of too many digits) | ``duplicate_key`` (a JSON object repeats a key) |
            ``duplicate_id`` | ``unreadable_file`` | ``truncated_file`` (a JSONL file whose last line
            is cut off: no newline and not valid JSON; its partition keeps its old rows) | ``bad_chunks``
            (a chunks column's value of the wrong shape: null, empty, not a list, pairs mixed with
            strings, a pair not of two integers; :mod:`latechunk_dagster.sources.chunk_column`).
            A converter's refusal of a document file (:mod:`latechunk_dagster.sources.converters`):
            ``encrypted`` (a PDF, DOCX or PPTX that needs a password), ``no_text_layer`` (a PDF without
            text: a scan, with OCR off), ``unreadable_file`` (a truncated or corrupt document file, or one
            its converter failed on), ``too_large`` (over ``max_file_bytes`` or ``max_text_chars``, or a
            zip package that unpacks past its limits), ``wrong_format`` (its bytes are a format no
            converter reads: an image, an archive, legacy Office), ``timed_out`` (its conversion took
            longer than ``convert_timeout_s``).
        detail: a sentence naming the file, the row and what is wrong.
        file_read: ``True`` when the file was read whole and its content is refused (a converter's
            rejection): it is rejected alone, whatever its reason; ``False`` (every reader's own
            rows) lets an ``unreadable_file`` keep the partition's old rows
            (:data:`~latechunk_dagster.sources.listing.INCOMPLETE_READS`).
    """

    doc_id: str
    where: str
    reason: str
    detail: str
    file_read: bool = False

    @property
    def sha256(self) -> str:
        """sha256 of ``where`` and ``detail``: changes when the row's fault changes or is fixed."""
        return key_of(self.where, self.detail)


def first_of_each_id(items: Iterable[tuple[D, str] | RejectedRow], scope: str = "") -> Iterator[D | RejectedRow]:
    """The duplicate-id rule of every document source: the first ``(document, where)`` of a doc_id is
    kept; a later one becomes a ``duplicate_id`` :class:`RejectedRow` naming both places. Rejected rows
    pass through. ``scope`` (e.g. `` in shard 'a' of document store /data``) goes into the detail.
    A document is anything with a ``doc_id`` (a :class:`Document`, or a document file not converted
    yet: :class:`~latechunk_dagster.sources.text_files.UnconvertedFile`)."""
    first_seen: dict[str, str] = {}
    for item in items:
        if isinstance(item, RejectedRow):
            yield item
            continue
        doc, where = item
        if doc.doc_id in first_seen:
            detail = (
                f"{where}: duplicate doc_id {doc.doc_id!r}{scope} (first at {first_seen[doc.doc_id]}, which is kept)"
            )
            yield RejectedRow(doc.doc_id, where, "duplicate_id", detail)
            continue
        first_seen[doc.doc_id] = where
        yield doc


def fingerprint_of(items: Iterable[Document | RejectedRow]) -> str:
    """Hex sha256 over the sorted (doc_id, sha256) pairs of a shard's documents and (where, sha256)
    pairs of its rejected rows (JSON, each tagged with its kind):
    what :meth:`DocumentStore.shard_fingerprint` returns, without reading the shard again. Changes
    iff a document is added, removed, renamed or edited, or a bad row appears, changes or is fixed."""
    # tagged triples: a doc_id can never pass for a rejected row's place (a "!"-prefixed id could)
    pairs = sorted(
        ("doc", item.doc_id, item.sha256) if isinstance(item, Document) else ("rejected", item.where, item.sha256)
        for item in items
    )
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode("ascii")).hexdigest()
