"""What every converter shares: the result (:class:`Converted`), the typed refusal (:class:`Rejection`),
the limits a file is read under (:class:`ConversionLimits`), and the Markdown pieces (tables, headings).

No Dagster, no store: bytes in, Markdown text out.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import version as _metadata_version
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from latechunk_dagster.sources.converters.pdf_boxes import CharBoxes

#: Environment override of :attr:`ConversionLimits.max_file_bytes` (an integer number of bytes).
MAX_FILE_BYTES_ENV = "LATECHUNK_MAX_DOCUMENT_BYTES"

#: Environment override of :attr:`ConversionLimits.max_text_chars` (an integer number of characters).
MAX_TEXT_CHARS_ENV = "LATECHUNK_MAX_DOCUMENT_CHARS"

#: Environment override of :attr:`ConversionLimits.convert_timeout_s` (seconds; ``0``: no limit).
CONVERT_TIMEOUT_ENV = "LATECHUNK_CONVERT_TIMEOUT_S"

#: Reasons a converter refuses a file (the ``reason`` of its rejected row); ``wrong_format``: the
#: file's content is a format no converter reads (an image, an archive, a legacy Office file), named
#: from its first bytes (:mod:`~latechunk_dagster.sources.converters.sniff`).
REASONS = ("encrypted", "no_text_layer", "unreadable_file", "too_large", "wrong_format", "timed_out")


@dataclass(frozen=True)
class Converted:
    """One document file read into text.

    Attributes:
        text: the document's text as Markdown (headings ``#``..``######``, tables as pipe tables);
            every char range of the document's rows indexes this string.
        converter: ``"<format>/<rules> <library> <version>"`` (e.g. ``"pdf/1 pypdfium2 5.15.0"``):
            what made the text; recorded with the rows and part of their ``vector_config``, so a
            converter upgrade re-encodes.
        pages: char offsets into ``text`` where each page (PDF) or slide (PPTX) starts, in order
            (page ``k`` from 1 starts at ``pages[k - 1]``); ``None`` for formats without pages.
        boxes: where each character of ``text`` is on its page (PDF:
            :class:`~latechunk_dagster.sources.converters.pdf_boxes.CharBoxes`, aligned with ``text``),
            from which the rows' ``boxes`` are made; ``None`` for formats without boxes.
    """

    text: str
    converter: str
    pages: tuple[int, ...] | None = None
    boxes: CharBoxes | None = field(default=None, compare=False, repr=False)


@runtime_checkable
class Converter(Protocol):
    """What reads one kind of document file into Markdown text: the one converter signature.

    Attributes:
        name: a short name of the converter (``"pdf"``, ``"docling"``).
        version: what makes its text, versions included (``"2 pypdfium2 5.15.0"``): the rows record
            ``f"{name}/{version}"`` as their ``converter`` and in their ``vector_config``, so a change
            of it re-encodes the documents it read (and only those). Raise it when the text changes.

    ``convert(name, data, limits)`` takes the file's name (its path in the store), its bytes whole and
    the :class:`ConversionLimits` to read it under, and returns a :class:`Converted` (its
    ``converter`` field is filled in by :class:`~latechunk_dagster.sources.converters.registry.Converters`),
    or raises :class:`Rejection`. A converter used with host workers must pickle (a module-level class).
    """

    name: str
    version: str

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted: ...


class Rejection(Exception):  # noqa: N818 (a refusal the caller records, not a failure of the code)
    """A file the converters refuse; ``reason`` is one of :data:`REASONS`, ``detail`` says why
    (without the file name: the caller names the file)."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


def _env_bytes(default: int, name: str = MAX_FILE_BYTES_ENV, unit: str = "bytes") -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"{name}={raw!r}: expected a positive integer number of {unit}")
    return int(raw)


def _env_seconds(default: float | None) -> float | None:
    raw = os.environ.get(CONVERT_TIMEOUT_ENV, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{CONVERT_TIMEOUT_ENV}={raw!r}: expected a number of seconds >= 0 (0: no limit)")
    return seconds or None


@dataclass(frozen=True)
class ConversionLimits:
    """What a document file may cost to read. Every file of a document tree is checked against
    ``max_file_bytes`` before it is read; DOCX and PPTX files (zip packages) against the unpacked
    limits before a part is decompressed (a zip bomb is refused from its directory alone); every
    file's text, converted or read as it is, against ``max_text_chars``.

    Attributes:
        max_file_bytes: the largest file read, in bytes (default 256 MiB, or
            ``LATECHUNK_MAX_DOCUMENT_BYTES``); a larger one is ``too_large``.
        max_unpacked_bytes: the most bytes a zip package's parts may declare unpacked, together
            (default 512 MiB); more is ``too_large``.
        max_ratio: the most a zip part over 1 MiB may expand (unpacked / packed size; default 200:
            Office XML deflates ~5-20x, a bomb of zeros ~1000x); more is ``too_large``.
        max_text_chars: the longest text of one file, in characters (code points; default 16 Mi,
            16,777,216, about 8,000 pages, or ``LATECHUNK_MAX_DOCUMENT_CHARS``); a longer one is
            ``too_large``. It bounds a document's memory on the host: preparing one takes about 15-26
            bytes of memory per character (``bench/partition_memory.py --long``; issue 47 kind 4), so
            the default holds one document under ~420 MiB.
        convert_timeout_s: the longest one file's conversion may run, in seconds (default 300: a PDF
            converts at ~60-490 pages/s a core, ``bench/conversion.py``; or ``LATECHUNK_CONVERT_TIMEOUT_S``,
            ``0`` for none; ``None``: no limit). A host worker's converter child that runs longer is
            killed and the file is ``timed_out``, rejected alone. Conversion in the calling thread
            (``host_workers=0``) cannot be stopped and runs unbounded.
    """

    max_file_bytes: int = 256 << 20
    max_unpacked_bytes: int = 512 << 20
    max_ratio: float = 200.0
    max_text_chars: int = 16 << 20
    convert_timeout_s: float | None = 300.0

    @classmethod
    def from_env(cls) -> ConversionLimits:
        """The defaults, with ``LATECHUNK_MAX_DOCUMENT_BYTES``, ``LATECHUNK_MAX_DOCUMENT_CHARS`` and
        ``LATECHUNK_CONVERT_TIMEOUT_S`` when set.

        Raises:
            ValueError: a variable is not a positive integer (the timeout: a number of seconds >= 0).
        """
        return cls(
            max_file_bytes=_env_bytes(cls.max_file_bytes),
            max_text_chars=_env_bytes(cls.max_text_chars, MAX_TEXT_CHARS_ENV, "characters"),
            convert_timeout_s=_env_seconds(cls.convert_timeout_s),
        )

    def check_size(self, size: int) -> None:
        """Raises :class:`Rejection` (``too_large``) when a file of ``size`` bytes is over ``max_file_bytes``."""
        if size > self.max_file_bytes:
            raise Rejection("too_large", f"{size:,} bytes, over the limit of {self.max_file_bytes:,} (max_file_bytes)")

    def check_text(self, text: str) -> None:
        """Raises :class:`Rejection` (``too_large``) when a file's text is longer than ``max_text_chars``,
        naming both and the setting."""
        if len(text) > self.max_text_chars:
            raise Rejection(
                "too_large",
                f"its text is {len(text):,} characters, over the limit of {self.max_text_chars:,} "
                f"(ConversionLimits.max_text_chars, or {MAX_TEXT_CHARS_ENV})",
            )

    def check_package(self, package: zipfile.ZipFile) -> None:
        """Refuses a zip package (DOCX, PPTX) whose parts declare more than the unpacked limits.
        Python's ``zipfile`` stops reading a part at its declared size (and fails its CRC beyond
        it), so the declared sizes bound what is decompressed.

        Raises:
            Rejection: ``too_large``, naming the part.
        """
        total = 0
        for item in package.infolist():
            total += item.file_size
            if item.file_size > 1 << 20 and item.file_size > self.max_ratio * max(item.compress_size, 1):
                ratio = item.file_size / max(item.compress_size, 1)
                raise Rejection(
                    "too_large",
                    f"part {item.filename!r} unpacks {item.compress_size:,} bytes into {item.file_size:,} "
                    f"({ratio:,.0f}x, over max_ratio {self.max_ratio:g}): a zip bomb?",
                )
        if total > self.max_unpacked_bytes:
            raise Rejection(
                "too_large", f"its parts unpack to {total:,} bytes, over max_unpacked_bytes {self.max_unpacked_bytes:,}"
            )


#: The installed version of a distribution (``importlib.metadata.version``, read once a process: it
#: reads the package's metadata files, ~1-4 ms, more than converting a page of a PDF; a library
#: upgraded while a process runs is not the code it has loaded anyway).
version = cache(_metadata_version)


def converter_name(fmt: str, rules: int, library: str) -> str:
    """``"<fmt>/<rules> <library> <installed version>"``: ``rules`` is the version of our own
    conversion rules for the format (raise it when they change the text)."""
    return f"{fmt}/{library_version(rules, library)}"


def library_version(rules: int, library: str) -> str:
    """A built-in converter's :attr:`Converter.version`: ``"<rules> <library> <installed version>"``."""
    return f"{rules} {library} {version(library)}"


def table_markdown(rows: list[list[str]]) -> str:
    """A GitHub pipe table of ``rows`` (the first is the header); cells on one line, ``|`` escaped."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    cells = [[_cell(c) for c in r] + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(r) + " |" for r in cells]
    lines.insert(1, "|" + " --- |" * width)
    return "\n".join(lines)


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def heading(level: int, title: str) -> str:
    """A Markdown ATX heading line, level clamped to 1..6, the title on one line."""
    return "#" * min(max(level, 1), 6) + " " + re.sub(r"\s+", " ", title).strip()


#: A line that CommonMark would read as the start of a block other than a paragraph: an ATX heading
#: (``# x``), a block quote (``> x``), a list item (``- x``, ``+ x``, ``* x``, ``1. x``, ``1) x``),
#: a code fence (three backticks or tildes), or a line of only ``=``, ``-``, ``*``, ``_`` (a setext
#: underline, which makes the line above it a heading, or a thematic break). Up to 3 spaces before.
_BLOCK_START = re.compile(
    r"^( {0,3})(?:(#{1,6}(?=[ \t]|$))|(>)|([-+*](?=[ \t]|$))|(\d{1,9})([.)](?=[ \t]|$))|(`{3,}|~{3,})"
    r"|([=\-*_])(?=[ \t=\-*_]*$))"
)


def escape_block(text: str) -> str:
    """``text`` (one paragraph of body text, one or more lines) with every line that CommonMark would
    read as a heading, quote, list item, code fence or setext underline escaped as Markdown writers
    do (pandoc, markdownify's ``escape_misc``): a backslash before the marker (``\\# install``,
    ``1\\. step``), so a shell comment in a how-to is not a heading and ``headings`` stay right.
    Other text is unchanged; the backslash is the only character added.

    One home for the rule: the DOCX, PPTX, HTML and PDF converters escape their body text here.
    """
    if not text:
        return text
    return "\n".join(_escape_line(line) for line in text.split("\n"))


def _escape_line(line: str) -> str:
    found = _BLOCK_START.match(line)
    if found is None:
        return line
    if found.group(5) is not None:  # "1." / "1)": the backslash goes before the delimiter
        at = found.start(6)
    else:
        at = len(found.group(1))
    return line[:at] + "\\" + line[at:]


def tidy(text: str) -> str:
    """Line ends as ``\\n``, NULs removed, trailing spaces and runs of 3+ line breaks cut, no
    leading or trailing blank lines: the one normal form of every converter's text."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "")
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")
