"""A store's rows as ``(document, where)`` or a rejection: a directory store's files one by one,
a table file's rows (:class:`~latechunk_dagster.sources.files.DocumentStore`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path, PurePath

from latechunk_dagster.sources.converters import ConversionLimits, Converters, default_converters
from latechunk_dagster.sources.converters.registry import BUILT_IN_TYPES
from latechunk_dagster.sources.documents import Document, RejectedRow, printable
from latechunk_dagster.sources.layout import kind_of
from latechunk_dagster.sources.listing import is_regular, not_regular_row
from latechunk_dagster.sources.prefetch import prefetched, read_bytes_in_flight
from latechunk_dagster.sources.readers import Row, document_from_row, jsonl_rows, parquet_rows
from latechunk_dagster.sources.stamps import (
    UnchangedCheck,
    UnchangedFile,
    reads_start_ns,
    source_stamp,
    stamp_margin_ns,
)
from latechunk_dagster.sources.storage import ObjectPath, ObjectStat
from latechunk_dagster.sources.text_files import UnconvertedFile, fetch_text_file, text_file_document

#: A document (or a document file not yet converted) and where it was read (file, or file and
#: row), or the row's rejection.
Item = tuple[Document | UnconvertedFile | UnchangedFile, str] | RejectedRow


def document_columns(chunks_column: str | None) -> tuple[str, ...]:
    """The columns a document is read from: ``id``, ``text`` and ``chunks_column`` if any."""
    return ("id", "text") if chunks_column is None else ("id", "text", chunks_column)


def located_document(row: Row, chunks_column: str | None) -> Item:
    """``(document, where)`` of a table row, or its rejection
    (:func:`~latechunk_dagster.sources.readers.document_from_row`)."""
    doc = document_from_row(row, chunks_column)
    return (doc, row.where) if isinstance(doc, Document) else doc


def table_file_items(file: Path, chunks_column: str | None) -> Iterator[Item]:
    """Each row of one ``.jsonl`` / ``.parquet`` file of a directory store, in order."""
    rows = jsonl_rows(file) if kind_of(file) == "jsonl" else parquet_rows(file, document_columns(chunks_column))
    for row in rows:
        yield row if isinstance(row, RejectedRow) else located_document(row, chunks_column)


def tree_items(
    root: PurePath,
    kind: str,
    files: list[Path],
    gaps: Iterable[RejectedRow] = (),
    *,
    limits: ConversionLimits,
    chunks_column: str | None = None,
    defer_conversion: bool = False,
    converters: Converters | None = None,
    workers: int = 1,
    sizes: Mapping[PurePath, ObjectStat] | None = None,
    unchanged: UnchangedCheck | None = None,
) -> Iterator[Item]:
    """A directory store's ``(document, where)`` or a rejection per row of ``files``, in order,
    after ``gaps`` (the parts of the shard the listing could not see: the run keeps the old rows).

    A file that is not regular (a FIFO would block the reader until a writer comes): in a text tree
    a ``not_a_regular_file`` row of its own; in a table store one ``unreadable_file`` row for the
    file (it holds the shard's rows: the partition keeps its old ones). ``defer_conversion``: a
    document file comes as its :class:`~latechunk_dagster.sources.text_files.UnconvertedFile`
    (:func:`~latechunk_dagster.sources.text_files.read_text_file`, which ``converters`` reads with).

    A text tree's files are fetched with up to ``workers`` reads in flight and at most
    :func:`~latechunk_dagster.sources.prefetch.read_bytes_in_flight` bytes held (by ``sizes``, the
    listing's, else the file's own), handed on in order (:func:`~latechunk_dagster.sources.prefetch.prefetched`):
    the rows are those of a sequential read. Conversion runs here, in the calling thread.

    Each text-tree document carries its file's source stamp (:func:`~latechunk_dagster.sources.stamps.source_stamp`);
    ``unchanged`` (a run's check, :class:`~latechunk_dagster.sources.stamps.ShardItems`): a file it
    finds current is an :class:`~latechunk_dagster.sources.stamps.UnchangedFile`, neither fetched nor converted.
    """
    yield from gaps
    if kind == "text":
        yield from _text_items(root, files, limits, defer_conversion, converters, workers, sizes or {}, unchanged)
        return
    for file in files:
        what = is_regular(file)
        if what is not None:
            yield not_regular_row(file, "*", what, "unreadable_file")
            continue
        yield from table_file_items(file, chunks_column)


def _text_items(
    root: PurePath,
    files: list[Path],
    limits: ConversionLimits,
    defer_conversion: bool,
    converters: Converters | None,
    workers: int,
    sizes: Mapping[PurePath, ObjectStat],
    unchanged: UnchangedCheck | None = None,
) -> Iterator[Item]:
    """A text tree's files: fetched concurrently (I/O only), documents made in order (:func:`tree_items`)."""
    start, margin = reads_start_ns(), stamp_margin_ns()  # before any read: a later write is a newer stamp
    stamps = {file: source_stamp(file, sizes.get(file), start, margin) for file in files}
    kept = _unchanged_files(root, stamps, converters or default_converters(), unchanged) if unchanged else {}

    def fetch(file: Path) -> bytes | RejectedRow:
        what = is_regular(file)
        if what is not None:
            return not_regular_row(file, file.relative_to(root).as_posix(), what, "not_a_regular_file")
        return fetch_text_file(file, file.relative_to(root).as_posix(), limits)

    def size(file: Path) -> int:
        listed = sizes.get(file)
        if listed is not None and listed.size is not None:
            return min(listed.size, limits.max_file_bytes + 1)
        if isinstance(file, ObjectPath):
            return limits.max_file_bytes + 1  # not listed: the most it can be
        try:
            return min(os.stat(file).st_size, limits.max_file_bytes + 1)
        except OSError:
            return 0

    wanted = [file for file in files if file not in kept]
    fetched = prefetched(wanted, fetch, workers=workers, size=size, max_bytes=read_bytes_in_flight())
    try:
        for file in files:
            if file in kept:
                yield kept[file], kept[file].where
                continue
            _, data = next(fetched)
            if isinstance(data, RejectedRow):
                yield data
                continue
            doc_id = file.relative_to(root).as_posix()
            doc = text_file_document(
                file, doc_id, data, limits, defer_conversion=defer_conversion, converters=converters
            )
            if isinstance(doc, RejectedRow):
                yield doc
                continue
            stamp = stamps.get(file)
            yield (replace(doc, source_stamp=stamp) if stamp else doc), printable(str(file))
    finally:
        fetched.close()  # a consumer that stops early: the fetches not started are cancelled


def accepted_lineages(converters: Converters, name: str) -> frozenset[str | None]:
    """The converter lineages whose rows of the file ``name`` stand: the converter of its suffix
    (``None``: text read as it is; a text file added a converter is read again), and where content
    sniffing may pick another (:meth:`~latechunk_dagster.sources.converters.Converters.for_content`:
    a built-in converter's suffix or none, e.g. a PDF saved as ``.html``) the current converters of
    the sniffed formats. A converter of one's own reads its suffix whatever the content."""
    own = converters.for_name(name)
    if own is not None and not isinstance(own, BUILT_IN_TYPES):
        return frozenset({converters.lineage(name)})
    sniffed = {converters.lineage(f"x{suffix}") for suffix in SNIFFED_SUFFIXES if suffix in converters.by_suffix}
    return frozenset({converters.lineage(name), *sniffed})


#: The suffixes of the formats content sniffing reads a file as (:meth:`Converters.for_content`).
SNIFFED_SUFFIXES = (".pdf", ".docx", ".pptx", ".html")


def _unchanged_files(
    root: PurePath, stamps: Mapping[Path, str | None], converters: Converters, check: UnchangedCheck
) -> dict[Path, UnchangedFile]:
    """The files ``check`` finds current (their stamp and converter lineage those of their rows)."""
    lineages: dict[str, frozenset[str | None]] = {}
    out: dict[Path, UnchangedFile] = {}
    for file, stamp in stamps.items():
        if stamp is None:
            continue
        suffix = file.suffix.lower()
        if suffix not in lineages:
            lineages[suffix] = accepted_lineages(converters, file.name)
        doc_id = file.relative_to(root).as_posix()
        sha = check(doc_id, stamp, lineages[suffix])
        if sha is not None:
            out[file] = UnchangedFile(doc_id, sha, printable(str(file)))
    return out
