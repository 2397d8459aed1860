"""A PDF page's lines as PDFium's text layer gives them, each character with its box, each line with
its font size and weight: what the PDF converter's rules (furniture, headings, joins) read.

:func:`text_layer_lines` reads one page's text page (pypdfium2); :func:`plain_lines` makes the same
lines from text that has no boxes (a page read by OCR stands in for its text layer there).
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

#: A character without a box (one PDFium generated, such as the space between two words, or one
#: the converter inserts): its row of a box array.
NO_BOX = (np.nan, np.nan, np.nan, np.nan)

#: Font weight from which a line counts as bold (the CSS / OpenType scale: 400 regular, 700 bold).
BOLD_WEIGHT = 600

_LINE_BREAK = re.compile(r"\r\n|\n")
_BOLD_NAME = re.compile(rb"bold|black|heavy", re.IGNORECASE)
_NO_ROWS = np.zeros((0, 4), np.float32)


@dataclass
class Line:
    """One line of a page.

    Attributes:
        text: the line's characters, without leading or trailing whitespace (never a line break).
        boxes: ``float32 [len(text), 4]``: each character's box ``(x0, y0, x1, y1)`` in PDF points
            (origin at the page's bottom left, y up); a row of NaN where the character has none.
        page: the page's index, from 0.
        size: the font size of the line's first and last characters (the smaller), in points (0.0 unknown).
        bold: both are set in a bold font (weight >= :data:`BOLD_WEIGHT` or a bold font name).
        has_boxes, top, bottom (set from ``boxes``): whether any character has a box; the highest
            and lowest y of its first and last boxed characters, in points (NaN without boxes).
    """

    text: str
    boxes: np.ndarray
    page: int
    size: float = 0.0
    bold: bool = False

    def __post_init__(self) -> None:
        # from the first and last boxed characters only: the same with and without char_boxes
        n = len(self.boxes)
        first = 0 if n and not math.isnan(self.boxes[0, 0]) else None
        last = n - 1 if n and not math.isnan(self.boxes[n - 1, 0]) else None
        if n and (first is None or last is None):
            at = np.flatnonzero(~np.isnan(self.boxes[:, 0]))
            first, last = (int(at[0]), int(at[-1])) if len(at) else (None, None)
        self.has_boxes: bool = first is not None
        if first is None or last is None:
            self.top, self.bottom = float("nan"), float("nan")
        else:
            a, b = self.boxes[first].tolist(), self.boxes[last].tolist()
            self.top: float = max(a[3], b[3])
            self.bottom: float = min(a[1], b[1])


def no_boxes(n: int) -> np.ndarray:
    """``float32 [n, 4]`` of NaN: the boxes of ``n`` characters that have none."""
    return np.full((n, 4), np.nan, np.float32)


def plain_lines(text: str, page: int) -> list[Line]:
    """The non-blank lines of ``text`` (e.g. a page read by OCR), without boxes or fonts."""
    out = []
    for raw in _LINE_BREAK.split(text.replace("\r", "\n")):
        line = raw.replace("\0", "").strip()
        if line:
            out.append(Line(line, no_boxes(len(line)), page))
    return out


def text_layer_lines(textpage: Any, page: int, *, char_boxes: bool = True, fonts: bool = True) -> list[Line]:
    """The non-blank lines of one page's text layer, in PDFium's order, with each character's box.

    Args:
        textpage: a pypdfium2 ``PdfTextPage``; page: the page's index (from 0).
        char_boxes: read every character's box (one PDFium call a character: most of the
            conversion's time, bench/pdf_quality.py); ``False`` reads only each line's first and last
            character's and gives every character of the line the line's box (enough for the rules,
            not for a chunk's boxes within a line).
        fonts: read each line's font size and weight (``False``: 0.0 and not bold).

    Returns:
        The lines; ``[]`` for a page without text. PDFium's own line breaks (``\\r\\n``) split lines; a
        lone ``\\r`` or NUL it gives (a glyph without a Unicode value) becomes a space.
    """
    n = textpage.count_chars()
    if n <= 0:
        return []
    text = _page_text(textpage, n)
    reader = _Reader(textpage)
    boxes = reader.char_boxes(n) if char_boxes else None
    out = []
    spans: list[tuple[int, int]] = []  # each line's first and last character (line boxes: one array at the end)
    # PDFium's "\r\n" pairs are two chars of its list: split on the chars themselves, keeping indices
    start = 0
    for brk in [*(m.start() for m in _LINE_BREAK.finditer(text)), n]:
        raw = text[start:brk]
        lead = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if body:
            first = start + lead
            last = first + len(body) - 1
            chars = body.replace("\r", " ").replace("\0", " ")
            size, bold = reader.font(first) if fonts else (0.0, False)
            # a line is as large and as bold as its first and last characters both; the last is read
            # only where the first stands out from the line before (a heading candidate)
            if fonts and last > first and (bold or not out or size != out[-1].size):
                last_size, last_bold = reader.font(last)
                size, bold = min(size, last_size), bold and last_bold
            if boxes is None:
                spans.append((first, last))
                rect = _NO_ROWS
            else:
                rect = boxes[first : last + 1]
            out.append(Line(chars, rect, page, size, bold))
        start = brk + (2 if text.startswith("\r\n", brk) else 1)
    if boxes is None and out:  # each character gets its line's box: one array for the page, a view a line
        rects = np.array([reader.line_box(first, last) for first, last in spans], np.float32)
        every = np.repeat(rects, [len(line.text) for line in out], axis=0)
        at = 0
        for line in out:
            line.boxes = every[at : at + len(line.text)]
            line.__post_init__()
            at += len(line.text)
    return out


def _page_text(textpage: Any, n: int) -> str:
    """The page's ``n`` characters, one Python character per PDFium character index (PDFium gives
    UTF-16 units; a unit that is half of a surrogate pair, or a lone one, is U+FFFD, so the string
    stays aligned with the character boxes)."""
    import pypdfium2.raw as pdfium_c

    buffer = (ctypes.c_ushort * (n + 1))()
    written = pdfium_c.FPDFText_GetText(textpage.raw, 0, n, buffer)
    units = np.frombuffer(buffer, np.uint16, count=max(0, min(n, written - 1)))
    if len(units) < n:
        units = np.concatenate([units, np.full(n - len(units), 0x20, np.uint16)])
    surrogate = (units >= 0xD800) & (units <= 0xDFFF)
    units = np.where(surrogate, np.uint16(0xFFFD), units)
    return units.astype("<u2").tobytes().decode("utf-16-le")


class _Reader:
    """PDFium's calls on one text page, with the ctypes buffers they fill made once."""

    def __init__(self, textpage: Any) -> None:
        import pypdfium2.raw as pdfium_c

        self.c = pdfium_c
        self.raw = textpage.raw
        self.edges = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        self.refs = tuple(ctypes.byref(v) for v in self.edges)  # left, right, bottom, top
        self.name = ctypes.create_string_buffer(128)
        self.flags = ctypes.c_int()

    def box(self, index: int) -> tuple[float, float, float, float]:
        """``(x0, y0, x1, y1)`` of one character (``FPDFText_GetCharBox``)."""
        self.c.FPDFText_GetCharBox(self.raw, index, *self.refs)
        left, right, bottom, top = self.edges
        return left.value, bottom.value, right.value, top.value

    def char_boxes(self, n: int) -> np.ndarray:
        """``float32 [n, 4]``: PDFium's box of each character, NaN for one whose box has no area
        (the spaces and line breaks PDFium generates)."""
        get, raw, refs = self.c.FPDFText_GetCharBox, self.raw, self.refs
        left, right, bottom, top = self.edges
        values: list[float] = []
        extend = values.extend  # a flat list grown per character: 2.3x faster than numpy item assignment
        for i in range(n):
            get(raw, i, *refs)
            extend((left.value, bottom.value, right.value, top.value))
        out = np.array(values, np.float64).reshape(n, 4)
        empty = (out[:, 2] <= out[:, 0]) & (out[:, 3] <= out[:, 1])
        out[empty] = np.nan
        return out.astype(np.float32)

    def line_box(self, first: int, last: int) -> tuple[float, float, float, float]:
        """The union of the boxes of characters ``first`` and ``last`` (a line's, from its ends)."""
        a, b = self.box(first), self.box(last)
        return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])

    def font(self, index: int) -> tuple[float, bool]:
        """Font size (points) and boldness of the character at ``index`` (``FPDFText_GetFontSize``,
        ``FPDFText_GetFontWeight``, and the font's name for fonts that declare no weight)."""
        size = float(self.c.FPDFText_GetFontSize(self.raw, index))
        weight = int(self.c.FPDFText_GetFontWeight(self.raw, index))
        if weight >= BOLD_WEIGHT:
            return size, True
        if weight > 0:
            return size, False
        got = self.c.FPDFText_GetFontInfo(self.raw, index, self.name, 128, ctypes.byref(self.flags))
        return size, bool(got) and _BOLD_NAME.search(self.name.value) is not None
