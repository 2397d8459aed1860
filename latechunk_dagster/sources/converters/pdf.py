"""PDF: the text a reader sees on each page (pypdfium2, PDFium's text layer), with headings, and the
box of each character on its page.

Chosen by measurement (``bench/conversion.py``, bench/README.md): on the same 12 PDFs pypdfium2
converted 15.7k tokens/s (60 pages/s), pypdf 11x and pdfminer.six (markitdown's PDF path) 16x
slower, with the same words. PDFium is the PDF engine of Chrome; the wheel is self-contained.

Text (rules version :data:`RULES`; ``bench/pdf_quality.py`` measures them):

1. Each page's lines with their characters' boxes and fonts
   (:func:`page_lines`: the text layer, or OCR for a page without one when ``ocr`` is on).
2. Page furniture out (:mod:`~latechunk_dagster.sources.converters.pdf_furniture`): running heads
   and feet, bare page numbers, dot leaders of a table of contents or an index.
3. Headings (:mod:`~latechunk_dagster.sources.converters.pdf_headings`): the outline's entries at the
   lines that carry them, never inside a sentence; without an outline, from the fonts.
4. Lines joined as a reader reads them (:mod:`~latechunk_dagster.sources.converters.pdf_text`):
   sentences run on across line wraps and page breaks, hyphenated words joined, body lines escaped.

:attr:`Converted.pages` holds where each page starts (a page that starts mid-sentence: at its first
character); :attr:`Converted.boxes` the box of each character
(:class:`~latechunk_dagster.sources.converters.pdf_boxes.CharBoxes`), from which a chunk's boxes are
made.

Refused (:class:`~latechunk_dagster.sources.converters.base.Rejection`): a PDF that needs a password
to open (``encrypted``; a PDF encrypted with an empty user password opens and is read), one whose
pages hold no text at all (``no_text_layer``: a scan, read only with OCR on), one PDFium cannot parse
(``unreadable_file``: truncated, corrupt, not a PDF). An outline entry whose title is not valid
UTF-16 is read with U+FFFD in place of the bad units (issue 47 kind 1); one that cannot be read at
all is left out.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from typing import Any

from latechunk_dagster.sources.converters.base import ConversionLimits, Converted, Rejection, converter_name
from latechunk_dagster.sources.converters.ocr import no_text_layer_detail, ocr_page
from latechunk_dagster.sources.converters.pdf_furniture import furniture
from latechunk_dagster.sources.converters.pdf_headings import font_headings, place_outline
from latechunk_dagster.sources.converters.pdf_lines import Line, no_boxes, plain_lines, text_layer_lines
from latechunk_dagster.sources.converters.pdf_text import Item, join_pages

#: Version of this module's rules (furniture, headings, joins): part of the converter's name.
#: 1: pages as PDFium gives them, outline titles equal to a line or at the page's top; 2: issue 45.
RULES = 2


def convert_pdf(
    data: bytes, limits: ConversionLimits | None = None, *, ocr: bool = False, char_boxes: bool = True
) -> Converted:
    """Markdown text of a PDF's text layer, with the start of each page and each character's box;
    with ``ocr``, a page without a text layer is read by OCR
    (:func:`~latechunk_dagster.sources.converters.ocr.ocr_page`; its characters have no boxes).
    ``char_boxes=False`` gives each character its line's box (faster: :func:`text_layer_lines`).

    ``limits``: the one converter signature's (:class:`~latechunk_dagster.sources.converters.base.ConversionLimits`);
    this format's reading is bounded by ``max_file_bytes`` (checked before) and ``max_text_chars`` (after).

    Raises:
        Rejection: ``encrypted``, ``no_text_layer`` or ``unreadable_file`` (module docstring).
    """
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
            raise Rejection("encrypted", "the PDF is encrypted and needs a password to open") from None
        raise Rejection("unreadable_file", f"not a readable PDF ({exc})") from None
    try:
        outline = read_outline(document)
        fonts = not any(p is not None and 0 <= p < len(document) for _, _, p in outline)  # for headings
        pages: list[list[Line]] = []
        heights: list[float] = []
        for index, page in enumerate(document):
            pages.append(page_lines(page, index, ocr=ocr, char_boxes=char_boxes, fonts=fonts))
            heights.append(page.get_height())
            page.close()
    except pdfium.PdfiumError as exc:
        raise Rejection("unreadable_file", f"a page of the PDF cannot be read ({exc})") from None
    finally:
        document.close()
    if not any(pages):
        raise Rejection("no_text_layer", no_text_layer_detail(len(pages), ocr))
    text, starts, boxes = reader_text(pages, heights, outline)
    return Converted(text, converter_name("pdf", RULES, "pypdfium2"), starts, boxes=boxes)


def page_lines(page: Any, index: int, *, ocr: bool = False, char_boxes: bool = True, fonts: bool = True) -> list[Line]:
    """One page's lines: its text layer's (with boxes, and fonts unless ``fonts`` is off: a PDF with an
    outline takes its headings from it), or, where it has none and ``ocr`` is on, the lines OCR reads
    (without boxes). The one place a page's lines come from."""
    textpage = page.get_textpage()
    try:
        lines = text_layer_lines(textpage, index, char_boxes=char_boxes, fonts=fonts)
    finally:
        textpage.close()
    if not lines and ocr:
        lines = plain_lines(ocr_page(page), index)
    return lines


def reader_text(
    pages: Sequence[Sequence[Line]], heights: Sequence[float], outline: Sequence[tuple[int, str, int | None]]
) -> tuple[str, tuple[int, ...], Any]:
    """Steps 2-4 of the module docstring on the pages' lines: ``(text, page starts, CharBoxes)``."""
    dropped = furniture(pages, heights)
    body = [[line for k, line in enumerate(lines) if k not in drop] for lines, drop in zip(pages, dropped, strict=True)]
    marked: dict[tuple[int, int], int]
    usable = [entry for entry in outline if entry[2] is not None and 0 <= entry[2] < len(body)]
    if usable:
        marked, inserted = place_outline(body, usable)
    else:
        marked, inserted = font_headings(body), []
    items: list[list[Item]] = [[] for _ in body]
    at: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for p, k, level, title in inserted:
        at.setdefault((p, k), []).append((level, title))
    for p, lines in enumerate(body):
        for k in range(len(lines) + 1):
            for level, title in at.get((p, k), []):
                words = re.sub(r"\s+", " ", title).strip()
                items[p].append(Item(Line(words, no_boxes(len(words)), p), level))
            if k < len(lines):
                items[p].append(Item(lines[k], marked.get((p, k))))
    return join_pages(items)


def read_outline(document: Any) -> list[tuple[int, str, int | None]]:
    """``(level from 1, title, page index from 0 or None)`` of each outline entry, in order. A title
    that is not valid UTF-16 (a lone surrogate: pypdfium2's ``get_title`` raises
    ``UnicodeDecodeError``) is decoded with U+FFFD in place of the bad units; an entry PDFium cannot
    read is left out."""
    out = []
    for bookmark in document.get_toc():
        try:
            dest = bookmark.get_dest()
            out.append((bookmark.level + 1, _title(bookmark), None if dest is None else dest.get_index()))
        except (ValueError, OSError):
            continue
    return out


def _title(bookmark: Any) -> str:
    """The bookmark's title, decoded leniently (``FPDFBookmark_GetTitle``: UTF-16LE, NUL-terminated)."""
    import pypdfium2.raw as pdfium_c

    size = pdfium_c.FPDFBookmark_GetTitle(bookmark.raw, None, 0)
    if size <= 2:
        return ""
    buffer = ctypes.create_string_buffer(size)
    pdfium_c.FPDFBookmark_GetTitle(bookmark.raw, buffer, size)
    return buffer.raw[: size - 2].decode("utf-16-le", errors="replace")
