"""A store's rows as ``(document, where)`` or a rejection: a directory store's files one by one,
a table file's rows (:class:`~latechunk_dagster.sources.files.DocumentStore`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path, PurePath

from latechunk_dagster.sources.converters import ConversionLimits, Converters
from latechunk_dagster.sources.documents import Document, RejectedRow, printable
from latechunk_dagster.sources.layout import kind_of
from latechunk_dagster.sources.listing import is_regular, not_regular_row
from latechunk_dagster.sources.readers import Row, document_from_row, jsonl_rows, parquet_rows
from latechunk_dagster.sources.text_files import UnconvertedFile, read_text_file

#: A document (or a document file not yet converted) and where it was read (file, or file and
#: row), or the row's rejection.
Item = tuple[Document | UnconvertedFile, str] | RejectedRow


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
) -> Iterator[Item]:
    """A directory store's ``(document, where)`` or a rejection per row of ``files``, in order,
    after ``gaps`` (the parts of the shard the listing could not see: the run keeps the old rows).

    A file that is not regular (a FIFO would block the reader until a writer comes): in a text tree
    a ``not_a_regular_file`` row of its own; in a table store one ``unreadable_file`` row for the
    file (it holds the shard's rows: the partition keeps its old ones). ``defer_conversion``: a
    document file comes as its :class:`~latechunk_dagster.sources.text_files.UnconvertedFile`
    (:func:`~latechunk_dagster.sources.text_files.read_text_file`, which ``converters`` reads with).
    """
    yield from gaps
    for file in files:
        what = is_regular(file)
        if what is not None:
            if kind == "text":
                yield not_regular_row(file, file.relative_to(root).as_posix(), what, "not_a_regular_file")
            else:
                yield not_regular_row(file, "*", what, "unreadable_file")
            continue
        if kind == "text":
            doc_id = file.relative_to(root).as_posix()
            doc = read_text_file(file, doc_id, limits, defer_conversion=defer_conversion, converters=converters)
            yield doc if isinstance(doc, RejectedRow) else (doc, printable(str(file)))
        else:
            yield from table_file_items(file, chunks_column)
