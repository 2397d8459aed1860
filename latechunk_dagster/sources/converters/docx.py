"""DOCX: paragraphs and tables in body order (python-docx), Word's heading styles as headings.

Chosen by measurement (``bench/conversion.py``, bench/README.md): on the same 12 DOCX files
python-docx converted 29k tokens/s, mammoth (to HTML, then Markdown: markitdown's path) 10x
slower, with the same headings and text.

Text: each non-empty paragraph is a block; a paragraph of style ``Heading N`` (``Title``: level 1)
becomes a level-N Markdown heading; any other paragraph is body text, escaped where Markdown would
read a block marker (``# install`` is ``\\# install``: :func:`~.base.escape_block`); a table becomes
a pipe table (its first row the header; a table nested in a cell is read into that cell's text);
blocks are separated by a blank line. Headers, footers,
comments and notes are left out.

The package is checked against :meth:`ConversionLimits.check_package` (a zip bomb is ``too_large``)
before python-docx reads it; a password-protected DOCX (an OLE2 container with an
``EncryptedPackage`` stream, :mod:`~.sniff`) is ``encrypted``; a file that is not a DOCX package, or
one python-docx cannot parse, is ``unreadable_file``.
"""

from __future__ import annotations

import io
import re
import zipfile

from latechunk_dagster.sources.converters.base import (
    ConversionLimits,
    Converted,
    Rejection,
    converter_name,
    escape_block,
    heading,
    table_markdown,
    tidy,
)
from latechunk_dagster.sources.converters.sniff import sniff

#: Version of this module's rules (blocks, heading styles, tables): part of the converter's name.
RULES = 2

_HEADING = re.compile(r"Heading (\d)$")


def open_package(data: bytes, limits: ConversionLimits, what: str) -> zipfile.ZipFile:
    """``data`` as a zip package within ``limits`` (DOCX, PPTX).

    Raises:
        Rejection: ``encrypted`` (a password-protected package: an OLE2 container with an
            ``EncryptedPackage`` stream), ``unreadable_file`` (not a zip: ``what`` names the format and
            what the bytes are, when :func:`~.sniff.sniff` knows), ``too_large``.
    """
    found = sniff(data)
    if found is not None and found.format == "encrypted_office":
        detail = f"the {what} is password-protected ({found.evidence}); remove the password to index it"
        raise Rejection("encrypted", detail)
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        content = "" if found is None else f"; its content is {found}"
        raise Rejection("unreadable_file", f"not a readable {what} (zip) package ({exc}){content}") from None
    limits.check_package(package)
    return package


def convert_docx(data: bytes, limits: ConversionLimits) -> Converted:
    """Markdown text of a DOCX body.

    Raises:
        Rejection: ``unreadable_file`` or ``too_large`` (module docstring).
    """
    import docx
    from docx.table import Table

    open_package(data, limits, "DOCX").close()
    try:
        document = docx.Document(io.BytesIO(data))
        # style id -> name, read once: python-docx's ``Paragraph.style`` looks the default style up
        # in the styles part on every call (90% of the time on a 300-paragraph file)
        names = {style.style_id: style.name for style in document.styles}
        blocks = []
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                blocks.append(table_markdown([[_cell_text(cell) for cell in row.cells] for row in block.rows]))
                continue
            text = block.text.strip()
            if not text:
                continue
            style = names.get(block._p.style or "", "")  # the paragraph's w:pStyle (None: the default style)
            found = _HEADING.match(style or "")
            level = int(found.group(1)) if found else (1 if style == "Title" else 0)
            blocks.append(heading(level, text) if level else escape_block(text))
    except Rejection:
        raise
    except Exception as exc:  # any parser failure on a hostile file is the file's fault
        raise Rejection("unreadable_file", f"not a readable DOCX ({type(exc).__name__}: {exc})") from None
    return Converted(tidy("\n\n".join(blocks)), converter_name("docx", RULES, "python-docx"))


def _cell_text(cell: object) -> str:
    """A table cell's text, a table nested in it included (python-docx's ``cell.text`` holds only the
    cell's own paragraphs: a nested table's words were lost). Nesting is bounded by lxml's XML depth
    limit (256 levels: a deeper file is ``unreadable_file`` naming it)."""
    from docx.table import Table

    parts = []
    for block in cell.iter_inner_content():  # type: ignore[attr-defined]
        if isinstance(block, Table):
            parts.extend(_cell_text(inner) for row in block.rows for inner in row.cells)
        else:
            parts.append(block.text)
    return " ".join(part for part in parts if part.strip())
