"""A text tree's files, one document each: a text file's bytes decoded as UTF-8, or a document
file (PDF, DOCX, PPTX, HTML) converted to Markdown (:mod:`latechunk_dagster.sources.converters`).

* :func:`read_text_file`: the file read once, whole, within :class:`ConversionLimits`;
* :func:`document_of_file`: the one place a file's bytes become a document's text;
* :class:`UnconvertedFile`: a document file read but not converted yet, for a caller that converts
  elsewhere: :func:`~latechunk_dagster.pipeline.materialize_partition` converts in its host worker
  processes, so conversion (the slow host step for document files, ``bench/conversion.py``)
  scales with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath

from latechunk_dagster.core.encoding import foreign_encoding
from latechunk_dagster.sources.converters import ConversionLimits, Converters, Rejection, default_converters
from latechunk_dagster.sources.documents import Document, RejectedRow, is_valid_unicode, printable, strip_bom
from latechunk_dagster.sources.retries import retried
from latechunk_dagster.sources.storage import ChangedWhileReadError, ObjectPath, open_input


def decode(data: bytes) -> str:
    """UTF-8 text of ``data`` without a leading BOM; undecodable bytes become lone surrogates
    (``surrogateescape``), so the document is kept and rejected later with a reason."""
    return strip_bom(data.decode("utf-8", errors="surrogateescape"))


@dataclass(frozen=True)
class UnconvertedFile:
    """A document file (PDF, DOCX, PPTX, HTML) read whole, whose conversion is left to the consumer.

    Picklable: a host worker process converts it (:meth:`convert`), with the store's converters
    carried along (a converter of the user's own must be a module-level class). Memory: the file's
    bytes, at most ``limits.max_file_bytes``.

    Attributes:
        doc_id: the document's id (its path in the tree); name: the file's name (its suffix picks the
        converter); data: the file's bytes; where: the file as messages name it; limits: the
        decompression limits the converter applies; converters: the store's converters
        (default :func:`~latechunk_dagster.sources.converters.default_converters`).
    """

    doc_id: str
    name: str
    data: bytes
    where: str
    limits: ConversionLimits
    converters: Converters = field(default_factory=default_converters)
    #: the file's source stamp (:mod:`~latechunk_dagster.sources.stamps`), carried to its document
    source_stamp: str | None = None

    def convert(self) -> Document | RejectedRow:
        """The document (with :attr:`source_stamp`), or its rejection: :func:`document_of_file` of the file's bytes."""
        doc = document_of_file(self.doc_id, self.name, self.data, self.where, self.limits, self.converters)
        return replace(doc, source_stamp=self.source_stamp) if isinstance(doc, Document) and self.source_stamp else doc


def read_text_file(
    file: PurePath,
    doc_id: str,
    limits: ConversionLimits | None = None,
    *,
    defer_conversion: bool = False,
    converters: Converters | None = None,
) -> Document | RejectedRow | UnconvertedFile:
    """One text-tree document (BOM removed), or a ``RejectedRow`` when the file cannot be read
    (``unreadable_file``), is UTF-16 / UTF-32 (``bad_encoding``, naming the encoding), or its
    path (the doc_id) is not valid UTF-8 (reason ``bad_id``; the id and file named with
    :func:`~latechunk_dagster.sources.documents.printable` escapes, e.g. ``r\\xe9sum\\xe9.txt``).

    ``limits`` (default :meth:`ConversionLimits.from_env`): a file over ``max_file_bytes`` is
    ``too_large``, found without holding more than that many bytes. The file (local or an object)
    is read once, whole, through :func:`~latechunk_dagster.sources.storage.open_input`; its bytes
    become text in :func:`document_of_file`, or, with ``defer_conversion`` and a converted format,
    come back as an :class:`UnconvertedFile` for the caller to convert. ``converters``: which
    converter reads which suffix (default :func:`~latechunk_dagster.sources.converters.default_converters`)."""
    limits = ConversionLimits.from_env() if limits is None else limits
    data = fetch_text_file(file, doc_id, limits)
    if isinstance(data, RejectedRow):
        return data
    return text_file_document(file, doc_id, data, limits, defer_conversion=defer_conversion, converters=converters)


def fetch_text_file(file: PurePath, doc_id: str, limits: ConversionLimits) -> bytes | RejectedRow:
    """The bytes of a text-tree file (the I/O half of :func:`read_text_file`, safe to run in threads:
    :mod:`~latechunk_dagster.sources.prefetch` fetches a shard's files concurrently), or its
    rejection (``bad_id``, ``unreadable_file``, ``too_large``)."""
    where = printable(str(file))
    if not is_valid_unicode(doc_id):
        detail = (
            f"{where}: the file's path {printable(doc_id)!r} is not valid UTF-8, so it cannot be a doc_id; "
            "rename the file (e.g. convert the name to UTF-8)"
        )
        return RejectedRow(printable(doc_id), where, "bad_id", detail)
    try:
        if not isinstance(file, ObjectPath):  # a local file's size costs nothing: refused before it is read
            limits.check_size(Path(file).stat().st_size)
        data = _read_one_version(file, limits.max_file_bytes + 1)
        if len(data) > limits.max_file_bytes:
            raise Rejection("too_large", f"over the limit of {limits.max_file_bytes:,} bytes (max_file_bytes)")
    except OSError as exc:
        return RejectedRow(doc_id, where, "unreadable_file", f"{where}: cannot be read: {exc}")
    except Rejection as exc:
        return RejectedRow(doc_id, where, exc.reason, f"{where}: {exc.detail}", file_read=True)
    return data


def text_file_document(
    file: PurePath,
    doc_id: str,
    data: bytes,
    limits: ConversionLimits,
    *,
    defer_conversion: bool = False,
    converters: Converters | None = None,
) -> Document | RejectedRow | UnconvertedFile:
    """The document of a text-tree file's bytes (the second half of :func:`read_text_file`, in the
    calling thread: converters are not all thread-safe): converted by :func:`document_of_file`, or
    an :class:`UnconvertedFile` with ``defer_conversion``."""
    where = printable(str(file))
    converters = default_converters() if converters is None else converters
    if defer_conversion and converters.reads(file.name, data):
        return UnconvertedFile(doc_id, file.name, data, where, limits, converters)
    return document_of_file(doc_id, file.name, data, where, limits, converters)


#: Reads of a text-tree file that was replaced while it was read, before it is ``unreadable_file``.
READ_ATTEMPTS = 3


def _read_one_version(file: PurePath, most: int) -> bytes:
    """At most ``most`` bytes of one version of ``file``: transient errors are tried again
    (:func:`~latechunk_dagster.sources.retries.retried`); a file replaced while it was read
    (:class:`~latechunk_dagster.sources.storage.ChangedWhileReadError`) is read again, up to
    :data:`READ_ATTEMPTS` times (a document is one file: reading it again is cheap and exact).

    Raises:
        OSError: the file cannot be read, or changed at every attempt.
    """

    def read() -> bytes:
        with open_input(file) as handle:  # an object's size: one bounded read, no request of its own
            return handle.read(most)

    for attempt in range(READ_ATTEMPTS):
        try:
            return retried(read, file)  # 503, 500, a request not answered in time: tried again, bounded
        except ChangedWhileReadError:
            if attempt == READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def document_of_file(
    doc_id: str,
    name: str,
    data: bytes,
    where: str,
    limits: ConversionLimits | None = None,
    converters: Converters | None = None,
) -> Document | RejectedRow:
    """The one place a text-tree file's bytes become a document's text: a file one of ``converters``
    reads (default :func:`~latechunk_dagster.sources.converters.default_converters`: PDF, DOCX, PPTX,
    HTML, and the entry point group's), or whose first bytes are a binary format whatever its suffix
    (:meth:`~latechunk_dagster.sources.converters.Converters.reads`: a PDF named ``.txt`` or ``.html``
    is read as a PDF, a PNG named ``.md`` is ``wrong_format``), is read into Markdown by
    :meth:`~latechunk_dagster.sources.converters.Converters.convert` (the document then carries its
    converter's lineage and pages); any other file is UTF-8 text (a UTF-16 / UTF-32 one is
    ``bad_encoding``). A converter's refusal is a ``RejectedRow`` of its reason (``encrypted``,
    ``no_text_layer``, ``unreadable_file``, ``too_large``, ``wrong_format``) with ``file_read=True``: the file was read,
    its content is refused, so it is rejected alone and its shard's other documents are written.

    Args:
        doc_id: the document's id; name: the file's name (its suffix picks the format);
        data: the file's bytes; where: the file as messages name it; limits: as :func:`read_text_file`.
    """
    converters = default_converters() if converters is None else converters
    if converters.reads(name, data):
        try:
            converted = converters.convert(name, data, limits)
        except Rejection as exc:
            return RejectedRow(doc_id, where, exc.reason, f"{where}: {exc.detail}", file_read=True)
        return Document.from_converted(doc_id, converted.text, converted.converter, converted.pages, converted.boxes)
    encoding = foreign_encoding(data)
    if encoding is not None:
        return RejectedRow(doc_id, where, "bad_encoding", encoding.file_detail(where))
    text = decode(data)
    try:  # the one text limit of every file (issue 47 kind 4: a 256 MiB .txt is within max_file_bytes)
        (ConversionLimits.from_env() if limits is None else limits).check_text(text)
    except Rejection as exc:
        return RejectedRow(doc_id, where, exc.reason, f"{where}: {exc.detail}", file_read=True)
    return Document.from_text(doc_id, text)
