"""Scanned pages read by OCR: Tesseract (Debian's ``tesseract-ocr`` package, ``apt-get install
tesseract-ocr tesseract-ocr-eng``) through pytesseract (the ``ocr`` extra).

Opt-in (``DocumentStore(ocr=True)``, :class:`~latechunk_dagster.sources.converters.registry.PdfConverter`
``(ocr=True)``): the PDF converter hands each page that has no text layer to :func:`ocr_page`, which
renders it with PDFium (pypdfium2) at :data:`DPI` and reads the image with Tesseract. The engine,
its version and the language are the converter's lineage (:func:`ocr_version`), so a Tesseract
upgrade re-encodes the scanned documents it read.

Chosen by measurement (bench/README.md, 2026-12-07): pytesseract is a pure-Python wheel that runs
the ``tesseract`` command Debian installs (one process a page; its start is ~2% of a page's OCR
time), while tesserocr's wheel bundles its own libtesseract, so the engine that reads would not be
the one the system package updates.
"""

from __future__ import annotations

import shutil
from functools import cache
from typing import Any

from latechunk_dagster.sources.converters.base import tidy

#: Version of the OCR rules (resolution, language, page segmentation): part of the lineage.
OCR_RULES = 1
#: Render resolution in dots per inch: Tesseract reads best at 300 dpi (its documentation,
#: "Improving the quality of the output"); a PDF point is 1/72 inch.
DPI = 300
#: Tesseract's language (the ``tesseract-ocr-eng`` package's ``eng.traineddata``).
LANGUAGE = "eng"
#: Seconds Tesseract may take on one page before the file is given up (``unreadable_file``).
PAGE_TIMEOUT_S = 120

_INSTALL = "apt-get install tesseract-ocr tesseract-ocr-eng (Debian/Ubuntu), and pip install 'latechunk-dagster[ocr]'"


@cache
def tesseract_version() -> str:
    """The installed Tesseract's version (``"5.3.0"``), asked of the ``tesseract`` command once a process.

    Raises:
        RuntimeError: no ``tesseract`` command or no pytesseract, naming what to install.
    """
    try:
        import pytesseract
    except ImportError as exc:
        raise RuntimeError(f"OCR needs pytesseract ({exc}): {_INSTALL}") from None
    if shutil.which(pytesseract.pytesseract.tesseract_cmd) is None:
        raise RuntimeError(f"OCR needs the tesseract command, which is not on PATH: {_INSTALL}")
    try:
        return str(pytesseract.get_tesseract_version())
    except (pytesseract.TesseractError, OSError) as exc:
        raise RuntimeError(f"OCR: tesseract does not run ({exc}): {_INSTALL}") from None


def ocr_version() -> str:
    """The OCR part of the PDF converter's version: ``"ocr/<rules> tesseract <version> <language>"``.

    Raises:
        RuntimeError: Tesseract is not installed (:func:`tesseract_version`).
    """
    return f"ocr/{OCR_RULES} tesseract {tesseract_version()} {LANGUAGE}"


def ocr_page(page: Any) -> str:
    """The text of one PDF page read by OCR, in :func:`~latechunk_dagster.sources.converters.base.tidy`'s
    form (lines as Tesseract reads them, paragraphs separated by a blank line).

    Args:
        page: a ``pypdfium2.PdfPage``; rendered in grey at :data:`DPI` (a US Letter page: 2550 x 3300
            pixels, ~8 MB).

    Raises:
        RuntimeError: Tesseract is missing or fails on the page (the converter makes it the file's
            ``unreadable_file``); ``RuntimeError('Tesseract process timeout')`` past :data:`PAGE_TIMEOUT_S`.
    """
    import pytesseract

    tesseract_version()
    image = page.render(scale=DPI / 72, grayscale=True).to_pil()
    return tidy(pytesseract.image_to_string(image, lang=LANGUAGE, timeout=PAGE_TIMEOUT_S))


def no_text_layer_detail(pages: int, ocr: bool) -> str:
    """Why a PDF of ``pages`` pages without any text is ``no_text_layer``, naming the OCR setting."""
    if ocr:
        return f"none of its {pages} page(s) has a text layer, and OCR read no text on them"
    return (
        f"none of its {pages} page(s) has a text layer (a scan?): read scanned pages with OCR, "
        "the store's ocr setting (DocumentStore(ocr=True), the store resource's or connection's ocr: true)"
    )
