"""PDF: the text layer of each page (pypdfium2, PDFium's text extraction), the outline as headings.

Chosen by measurement (``bench/conversion.py``, bench/README.md): on the same 12 PDFs pypdfium2
converted 15.7k tokens/s (60 pages/s), pypdf 11x and pdfminer.six (markitdown's PDF path) 16x
slower, with the same words. PDFium is the PDF engine of Chrome; the wheel is self-contained.

Text: the pages in order, separated by a blank line, each page's lines as PDFium gives them; a
page without text adds nothing (it starts where the text before it ends). Each
outline (bookmark) entry becomes a Markdown heading of its depth (``#`` for the top level) on the
page it points to: the page's first line equal to the title is marked as the heading, else the
heading is put at the top of that page. :attr:`Converted.pages` holds where each page starts.

Refused (:class:`~latechunk_dagster.sources.converters.base.Rejection`): a PDF that needs a password
to open (``encrypted``; a PDF encrypted with an empty user password opens and is read), one whose
pages hold no text at all (``no_text_layer``: a scan, read only with OCR on), one PDFium cannot parse
(``unreadable_file``: truncated, corrupt, not a PDF).
"""

from __future__ import annotations

from latechunk_dagster.sources.converters.base import Converted, Rejection, converter_name, heading, tidy
from latechunk_dagster.sources.converters.ocr import no_text_layer_detail, ocr_page

#: Version of this module's rules (page joining, outline headings): part of the converter's name.
RULES = 1


def convert_pdf(data: bytes, *, ocr: bool = False) -> Converted:
    """Markdown text of a PDF's text layer, with the start of each page; with ``ocr``, a page without
    a text layer is read by OCR (:func:`~latechunk_dagster.sources.converters.ocr.ocr_page`).

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
        pages = []
        for page in document:
            textpage = page.get_textpage()
            text = textpage.get_text_bounded()
            text = ocr_page(page) if ocr and not text.strip() else text
            pages.append(tidy(text).split("\n"))
            textpage.close()
            page.close()
        outline = [(b.level + 1, b.get_title(), _page_of(b.get_dest())) for b in document.get_toc()]
    except pdfium.PdfiumError as exc:
        raise Rejection("unreadable_file", f"a page of the PDF cannot be read ({exc})") from None
    finally:
        document.close()
    if not any(line.strip() for lines in pages for line in lines):
        raise Rejection("no_text_layer", no_text_layer_detail(len(pages), ocr))
    for level, title, index in outline:
        if index is None or not 0 <= index < len(pages) or not title.strip():
            continue
        lines = pages[index]
        match = next((k for k, line in enumerate(lines) if line.strip() == title.strip()), None)
        if match is None:
            lines.insert(0, heading(level, title))
        else:
            lines[match] = heading(level, title)
    text, starts = "", []
    for lines in pages:
        body = "\n".join(lines).strip("\n")
        body = body if body.strip() else ""  # a blank page adds no blank lines (tidy's normal form)
        text += "\n\n" if text and body else ""
        starts.append(len(text))
        text += body
    return Converted(text, converter_name("pdf", RULES, "pypdfium2"), tuple(starts))


def _page_of(dest: object) -> int | None:
    """The page index (from 0) a bookmark's destination points to, or ``None`` (no destination)."""
    return None if dest is None else dest.get_index()  # type: ignore[attr-defined]
