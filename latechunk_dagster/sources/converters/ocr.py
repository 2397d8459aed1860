"""Scanned pages read by OCR: Tesseract, the ``tesseract`` command of Debian's ``tesseract-ocr``
package (``apt-get install tesseract-ocr tesseract-ocr-eng``; ``scripts/ensure-ocr.sh``).

Opt-in (``DocumentStore(ocr=True)``, :class:`~latechunk_dagster.sources.converters.registry.PdfConverter`
``(ocr=True)``): the PDF converter hands each page that has no text layer to :func:`ocr_page`, which
renders it with PDFium (pypdfium2) at :data:`DPI` and has Tesseract read the picture. The engine,
its version and the language are the converter's lineage (:func:`ocr_version`), so a Tesseract
upgrade re-encodes the scanned documents it read.

How Tesseract is run, by measurement (``bench/ocr.py``, bench/README.md 2026-12-07): as a command,
one process a page, the page's PNG on its stdin and its text on stdout, with one OpenMP thread
(``OMP_THREAD_LIMIT=1`` unless the environment sets it): with Tesseract's default threads a page
took 4x longer on a busy 2-core machine (OpenMP threads spin against the other host workers). This
is what pytesseract does (a temporary file instead of stdin), but pytesseract passes
``os.environ`` to every command and takes no environment of its own, so the thread limit would
have to be set process-wide (where it would reach every later subprocess). tesserocr's wheel
bundles its own libtesseract (5.5.4, not the system's 5.3.0) and no language data; it read the same
text at the same rate (0.21 against 0.20 pages/s on 20-line pages), so the system package's
command is the one engine, upgraded with the system.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
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
#: Seconds Tesseract may take on one page before the file is given up (``unreadable_file``): a hung
#: engine, not a slow page (a 30-line page took over 120 s on a 2-core machine at load 24).
PAGE_TIMEOUT_S = 300
#: The command (``tesseract`` on ``PATH``).
TESSERACT = "tesseract"

_INSTALL = "apt-get install tesseract-ocr tesseract-ocr-eng (Debian/Ubuntu; scripts/ensure-ocr.sh)"


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_THREAD_LIMIT": os.environ.get("OMP_THREAD_LIMIT", "1")}


@cache
def tesseract_version() -> str:
    """The installed Tesseract's version (``"5.3.0"``: the first line of ``tesseract --version``),
    asked once a process, and that it has the :data:`LANGUAGE` data.

    Raises:
        RuntimeError: no ``tesseract`` command, or one that does not run or lacks the language,
            naming what to install.
    """
    if shutil.which(TESSERACT) is None:
        raise RuntimeError(f"OCR needs the {TESSERACT} command, which is not on PATH: {_INSTALL}")
    try:
        printed = subprocess.run(
            [TESSERACT, "--version"], capture_output=True, text=True, timeout=30, env=_environment(), check=True
        ).stdout
        langs = subprocess.run(
            [TESSERACT, "--list-langs"], capture_output=True, text=True, timeout=30, env=_environment(), check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"OCR: {TESSERACT} does not run ({exc}): {_INSTALL}") from None
    if LANGUAGE not in langs.split():
        raise RuntimeError(f"OCR: {TESSERACT} has no {LANGUAGE!r} language data: {_INSTALL}")
    first = printed.split()
    if len(first) < 2 or first[0] != "tesseract":
        raise RuntimeError(f"OCR: {TESSERACT} --version printed {printed[:80]!r}, not a version")
    return first[1].removeprefix("v")


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
            pixels, ~8 MB; its PNG goes to Tesseract's stdin).

    Raises:
        RuntimeError: Tesseract is missing, fails on the page (naming its message) or runs past
            :data:`PAGE_TIMEOUT_S` (the converter makes each the file's ``unreadable_file``).
    """
    tesseract_version()
    png = io.BytesIO()
    page.render(scale=DPI / 72, grayscale=True).to_pil().save(png, format="PNG")
    command = [TESSERACT, "stdin", "stdout", "-l", LANGUAGE]
    try:
        done = subprocess.run(
            command, input=png.getvalue(), capture_output=True, timeout=PAGE_TIMEOUT_S, env=_environment()
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Tesseract took over {PAGE_TIMEOUT_S} s on a page") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise RuntimeError(f"Tesseract failed on a page (exit code {done.returncode}): {why}")
    return tidy(done.stdout.decode("utf-8", "replace"))


def no_text_layer_detail(pages: int, ocr: bool) -> str:
    """Why a PDF of ``pages`` pages without any text is ``no_text_layer``, naming the OCR setting."""
    if ocr:
        return f"none of its {pages} page(s) has a text layer, and OCR read no text on them"
    return (
        f"none of its {pages} page(s) has a text layer (a scan?): read scanned pages with OCR, "
        "the store's ocr setting (DocumentStore(ocr=True), the store resource's or connection's ocr: true)"
    )
