"""OCR rate of scanned PDF pages (issue 45 item 3), side by side with the same pages' text layer.

The pages: ``--lines`` lines of prose a page (the words known), made twice by ``tests/document_files.py``:
as a scan (``scanned_pdf_bytes``: A4 page pictures at 200 dpi, no text layer) and with a text layer
(``pdf_bytes``). Measured in one run, alternating, best of ``--repeat``: the PDF converter with OCR on
(:class:`~latechunk_dagster.sources.converters.registry.PdfConverter` ``(ocr=True)``, each page rendered
at 300 dpi and read by the ``tesseract`` command) on the scan, with as many OpenMP threads as CPUs
(Tesseract's own default) and with one (``OMP_THREAD_LIMIT=1``, what ``converters/ocr.py`` sets
unless the environment does), and the converter on the text layer. Reported: pages/s, the ratio to
the text layer, and the share of the scan's words that OCR read back (the words drawn, compared as
lower-case sets).

Run: ``python bench/ocr.py [--pages 4] [--lines 30] [--repeat 2]``; ``--quick``: 1 page, 10 lines, once.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.sources.converters import ConversionLimits  # noqa: E402
from latechunk_dagster.sources.converters.ocr import ocr_version  # noqa: E402
from latechunk_dagster.sources.converters.registry import PdfConverter  # noqa: E402
from tests.document_files import pdf_bytes, scanned_pdf_bytes  # noqa: E402

SENTENCE = "Line {k}: the pumps are tested before they ship, and the team repairs them within a day."


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 page of 10 lines, once: seconds")
    args = parser.parse_args()
    if args.quick:
        args.pages, args.lines, args.repeat = 1, 10, 1
    pages = [[SENTENCE.format(k=p * args.lines + k) for k in range(args.lines)] for p in range(args.pages)]
    scan, layer = scanned_pdf_bytes(pages), pdf_bytes(pages)
    limits = ConversionLimits()
    ocr, plain = PdfConverter(ocr=True), PdfConverter()
    best: dict[str, float] = {}
    texts: dict[str, str] = {}
    runs = {
        f"ocr, {os.cpu_count()} OpenMP threads": (ocr, scan, str(os.cpu_count())),  # Tesseract's own default
        "ocr, 1 thread (ocr.py's)": (ocr, scan, None),
        "text layer": (plain, layer, None),
    }
    for _ in range(args.repeat):
        for name, (converter, data, threads) in runs.items():
            if threads is None:
                os.environ.pop("OMP_THREAD_LIMIT", None)
            else:
                os.environ["OMP_THREAD_LIMIT"] = threads
            start = time.perf_counter()
            texts[name] = converter.convert("bench.pdf", data, limits).text
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    os.environ.pop("OMP_THREAD_LIMIT", None)
    truth = _words(" ".join(line for page in pages for line in page))
    print(f"{args.pages} page(s) of {args.lines} lines, best of {args.repeat}; {ocr_version()}; {os.cpu_count()} CPUs")
    for name, seconds in best.items():
        rate = args.pages / seconds
        ratio = best["text layer"] / seconds
        read = len(truth & _words(texts[name])) / len(truth)
        print(f"{name:26s} {rate:9.2f} pages/s  {ratio:8.4f}x the text layer  words read {read:.3f}")


if __name__ == "__main__":
    main()
