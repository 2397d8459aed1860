"""What a file really is, from its first bytes: a file's suffix can lie (a PDF saved as ``.html``, a
DOCX renamed ``.txt``), and read by the suffix's reader such a file becomes searchable garbage
(``%PDF-1.4 ... endstream``) or a misleading error ("File is not a zip file").

:func:`sniff` looks at the magic numbers (the signatures in WHATWG's MIME Sniffing standard, section
6, and the formats' own specifications) and, for a zip package, at its part names (its central
directory only, nothing decompressed); for an OLE2 compound file at its directory's stream names:

* ``%PDF-`` in the first 1024 bytes (ISO 32000-1 7.5.2 allows bytes before the header): ``pdf``;
* ``PK\\x03\\x04`` / ``PK\\x05\\x06``: a zip; ``[Content_Types].xml`` with ``word/document.xml`` is
  ``docx``, with ``ppt/presentation.xml`` ``pptx``, with ``xl/workbook.xml`` ``xlsx``; an
  OpenDocument package (``mimetype`` part) ``opendocument``; any other zip ``zip``, one whose central
  directory cannot be read (a truncated DOCX) ``damaged_zip``;
* ``D0 CF 11 E0 A1 B1 1A E1``: an OLE2 compound file; with an ``EncryptedPackage`` stream it is a
  password-protected OOXML file (DOCX, PPTX, XLSX: ECMA-376 Part 2, MS-OFFCRYPTO 2.3.4.4), else a
  legacy Office file (``.doc``, ``.ppt``, ``.xls``, ``.msg``);
* gzip, zstd, bzip2, xz, 7z, PNG, JPEG, GIF, WebP, TIFF, ELF: ``gzip`` ... ``elf``.

Anything else (text, HTML, XML) is ``None``: the suffix decides.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass

#: The bytes :func:`sniff` looks at for a PDF header (ISO 32000-1 allows leading bytes; readers
#: accept the header within the first 1024).
PDF_HEADER_WINDOW = 1024

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

#: Magic numbers of formats no built-in converter reads: (prefix, format, what it is).
_MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"\x1f\x8b", "gzip", "a gzip archive"),
    (b"\x28\xb5\x2f\xfd", "zstd", "a zstd archive"),
    (b"\xfd7zXZ\x00", "xz", "an xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7z", "a 7z archive"),
    (b"\x89PNG\r\n\x1a\n", "png", "a PNG image"),
    (b"\xff\xd8\xff", "jpeg", "a JPEG image"),
    (b"II*\x00", "tiff", "a TIFF image"),
    (b"MM\x00*", "tiff", "a TIFF image"),
    (b"\x7fELF", "elf", "an ELF executable"),
)

#: OOXML packages by a part only that format has: (part name, format, what it is).
_PACKAGE_PARTS: tuple[tuple[str, str, str], ...] = (
    ("word/document.xml", "docx", "a DOCX document"),
    ("ppt/presentation.xml", "pptx", "a PPTX presentation"),
    ("xl/workbook.xml", "xlsx", "an XLSX workbook"),
)


@dataclass(frozen=True)
class Sniffed:
    """What :func:`sniff` found.

    Attributes:
        format: ``"pdf"``, ``"docx"``, ``"pptx"`` (formats a built-in converter reads: the name of that
            converter), ``"encrypted_office"``, ``"xlsx"``, ``"opendocument"``, ``"zip"``, ``"ole2"``,
            ``"damaged_zip"``, ``"gzip"``, ``"png"`` ... (the module docstring lists them).
        what: the format in words, for messages (``"a PDF document"``).
        evidence: the bytes or parts that say so (``"starts with %PDF-"``).
    """

    format: str
    what: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.what} ({self.evidence})"


def sniff(data: bytes) -> Sniffed | None:
    """The format ``data`` really is, or ``None`` for anything without a known signature (text,
    HTML, XML: the file's suffix decides). Reads no more than the first 1024 bytes, a zip's central
    directory or an OLE2 file's directory stream names; never raises on any input."""
    head = data[:PDF_HEADER_WINDOW]
    at = head.find(b"%PDF-")
    if at == 0 or (at > 0 and _is_junk(head[:at])):
        return Sniffed("pdf", "a PDF document", "starts with %PDF-" if at == 0 else f"%PDF- at byte {at}")
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _sniff_zip(data)
    if data.startswith(_OLE2):
        if _has_ole2_entry(data, "EncryptedPackage"):
            return Sniffed(
                "encrypted_office",
                "a password-protected Office file",
                "an OLE2 compound file with an EncryptedPackage stream",
            )
        return Sniffed("ole2", "a legacy Office file (.doc, .ppt, .xls or .msg)", "an OLE2 compound file, D0 CF 11 E0")
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return Sniffed("webp", "a WebP image", "starts with RIFF....WEBP")
    for magic, fmt, what in _MAGIC:
        if data.startswith(magic):
            return Sniffed(fmt, what, "starts with " + magic.hex(" ").upper())
    # magic numbers a text could start with ("BZh", "GIF89a"): only with the binary bytes after them
    if re.match(rb"BZh[1-9]1AY&SY", data):
        return Sniffed("bzip2", "a bzip2 archive", "starts with BZh and a block header")
    if data.startswith((b"GIF87a", b"GIF89a")) and _is_junk(data[6:13]):
        return Sniffed("gif", "a GIF image", "starts with GIF8 and a binary screen descriptor")
    return None


def _is_junk(prefix: bytes) -> bool:
    """Whether the bytes before a ``%PDF-`` are junk before a real PDF's header (only whitespace and
    a BOM, or a control byte), as opposed to text that merely quotes ``%PDF-1.4`` (a Markdown page
    about PDFs)."""
    return not prefix.replace(b"\xef\xbb\xbf", b"").strip() or any(b < 0x09 or 0x0E <= b < 0x20 for b in prefix)


def _has_ole2_entry(data: bytes, name: str) -> bool:
    """Whether an OLE2 compound file has a directory entry (stream or storage) called ``name``: a
    directory entry is 128 bytes, aligned to 128 in the file (sectors are 512 or 4096 bytes after a
    512-byte header), its UTF-16LE name first and the name's byte length, NUL included, at byte 64
    ([MS-CFB] 2.6.1), so text that merely holds the word is not taken for one."""
    encoded = name.encode("utf-16-le")
    size = (len(name) + 1) * 2
    at = data.find(encoded)
    while at >= 0:
        if at % 128 == 0 and int.from_bytes(data[at + 64 : at + 66], "little") == size:
            return True
        at = data.find(encoded, at + 1)
    return False


#: WHATWG MIME Sniffing 7.1: the tags an HTML document starts with (after whitespace), case-insensitive,
#: each followed by a space or ``>``.
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<script", b"<iframe", b"<h1", b"<div", b"<font")
_HTML_STARTS += (b"<table", b"<a", b"<style", b"<title", b"<b", b"<body", b"<br", b"<p", b"<!--")


def looks_like_html(data: bytes) -> bool:
    """Whether ``data`` starts (after whitespace and a UTF-8 BOM) as an HTML document does, by the
    WHATWG MIME Sniffing standard's list (7.1: ``<!DOCTYPE HTML``, ``<html``, ``<head``, ``<body``,
    ``<p``, ``<!--``, ...). Used only for a file whose suffix names a binary format (an HTML page
    saved as ``.pdf``); a ``.txt`` or ``.md`` file is text whatever it starts with."""
    head = data[:512].removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n\x0c").lower()
    return any(
        head.startswith(tag)
        and head[len(tag) : len(tag) + 1] in (b" ", b">", b"\t", b"\n", b"\r", b"\x0c")
        or head.startswith(tag)
        and tag == b"<!--"
        for tag in _HTML_STARTS
    )


def _sniff_zip(data: bytes) -> Sniffed:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            names = set(package.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return Sniffed("damaged_zip", "a damaged zip archive", "starts with PK 03 04, its directory unreadable")
    if "[Content_Types].xml" in names:
        for part, fmt, what in _PACKAGE_PARTS:
            if part in names:
                return Sniffed(fmt, what, f"a zip package with [Content_Types].xml and {part}")
    if "mimetype" in names:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as package:
                mimetype = package.read("mimetype")[:100].decode("ascii", "replace").strip()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError, RuntimeError):
            mimetype = "?"
        what = "an EPUB book" if "epub" in mimetype else "an OpenDocument file"
        return Sniffed("opendocument", what, f"a zip package of mimetype {mimetype}")
    return Sniffed("zip", "a zip archive", "starts with PK 03 04")
