"""Where a PDF's converted text lies on its pages: a box per character (:class:`CharBoxes`), a chunk's
boxes from its char range (:meth:`CharBoxes.chunk_boxes`), and a page drawn with them
(:func:`render_chunk`).

A box is ``(page, x0, y0, x1, y1)``: the page from 1 (as ``page_start``), the rest in PDF points with
the origin at the page's bottom left and y up (PDFium's character boxes, ``FPDFText_GetCharBox``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

#: One box: (page from 1, x0, y0, x1, y1) in PDF points.
Box = tuple[int, float, float, float, float]


@dataclass(frozen=True, eq=False)
class CharBoxes:
    """The box of each character of a converted text, aligned with it (index ``i`` is ``text[i]``).

    Memory: 22 bytes a character (kept while the document is in memory, not stored).

    Attributes:
        page: ``int16 [n]``: the character's page from 1; 0 for a character without a box (one the
            converter inserted: ``# ``, line breaks, an escape; or a space PDFium generated).
        line: ``int32 [n]``: the visual line the character is on (ids increase through the text);
            -1 without a box.
        rect: ``float32 [n, 4]``: ``(x0, y0, x1, y1)`` in points; NaN without a box.
    """

    page: np.ndarray
    line: np.ndarray
    rect: np.ndarray

    def __len__(self) -> int:
        return len(self.page)

    def chunk_boxes(self, char_range: tuple[int, int] | None) -> list[Box]:
        """The boxes of a chunk of the text: for each run of its characters on one visual line, the
        union of their character boxes, in text order. ``[]`` without a range or without boxed
        characters in it.

        Raises:
            ValueError: a range outside the text.
        """
        if char_range is None:
            return []
        start, end = char_range
        if not 0 <= start <= end <= len(self):
            raise ValueError(f"char range {char_range} outside a text of {len(self)} characters")
        lines = self.line[start:end]
        keep = np.flatnonzero(lines >= 0)
        if not len(keep):
            return []
        ids = lines[keep]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1])
        rect = self.rect[start:end][keep].astype(np.float64)
        x0 = np.minimum.reduceat(rect[:, 0], starts)
        y0 = np.minimum.reduceat(rect[:, 1], starts)
        x1 = np.maximum.reduceat(rect[:, 2], starts)
        y1 = np.maximum.reduceat(rect[:, 3], starts)
        pages = self.page[start:end][keep][starts]
        return [
            (int(p), round(float(a), 2), round(float(b), 2), round(float(c), 2), round(float(d), 2))
            for p, a, b, c, d in zip(pages, x0, y0, x1, y1, strict=True)
        ]


def render_chunk(
    pdf_bytes: bytes, boxes: list[Box], page: int, path: str | os.PathLike[str], *, scale: float = 2.0
) -> str:
    """Draw a chunk's boxes (those on ``page``) over that page of the PDF and save it as a PNG.

    Args:
        pdf_bytes: the PDF file; boxes: the chunk's boxes (a row's ``boxes``, or
            :meth:`CharBoxes.chunk_boxes`); page: the page from 1; path: the PNG to write;
            scale: pixels per point (2.0: 144 dpi).

    Returns:
        ``str(path)``.

    Raises:
        ValueError: no such page.
        pypdfium2.PdfiumError: a PDF PDFium cannot open.
    """
    import pypdfium2 as pdfium
    from PIL import ImageDraw

    document = pdfium.PdfDocument(pdf_bytes)
    try:
        if not 1 <= page <= len(document):
            raise ValueError(f"page {page} of a PDF of {len(document)} pages")
        pdf_page = document[page - 1]
        image = pdf_page.render(scale=scale).to_pil().convert("RGB")
        draw = ImageDraw.Draw(image, "RGBA")
        for p, x0, y0, x1, y1 in boxes:
            if p == page:  # page points to the bitmap's pixels as PDFium renders (crop box, /Rotate)
                (ax, ay), (bx, by) = (_to_device(pdf_page, image.size, x, y) for x, y in ((x0, y0), (x1, y1)))
                xy = (min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))
                draw.rectangle(xy, outline=(220, 30, 30, 255), fill=(255, 220, 0, 70), width=2)
        image.save(path, format="PNG")
        pdf_page.close()
    finally:
        document.close()
    return str(path)


def _to_device(page: object, size: tuple[int, int], x: float, y: float) -> tuple[int, int]:
    """A point of the page (PDF points) in the pixels of its bitmap of ``size`` (``FPDF_PageToDevice``,
    rotation 0 as ``render`` draws it)."""
    import ctypes

    import pypdfium2.raw as pdfium_c

    dx, dy = ctypes.c_int(), ctypes.c_int()
    pdfium_c.FPDF_PageToDevice(page.raw, 0, 0, size[0], size[1], 0, x, y, ctypes.byref(dx), ctypes.byref(dy))  # type: ignore[attr-defined]
    return dx.value, dy.value
