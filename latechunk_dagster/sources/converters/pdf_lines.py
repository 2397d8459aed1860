"""A PDF page's lines as PDFium's text layer gives them, each character with its box, each line with
its font size and weight: what the PDF converter's rules (furniture, headings, joins) read.

:func:`text_layer_lines` reads one page's text page (pypdfium2); :func:`plain_lines` makes the same
lines from text that has no boxes (a page read by OCR stands in for its text layer there).
"""

from __future__ import annotations

import ctypes
import math
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import Any

import numpy as np

#: A character without a box (one PDFium generated, such as the space between two words, or one
#: the converter inserts): its row of a box array.
NO_BOX = (np.nan, np.nan, np.nan, np.nan)

#: Font weight from which a line counts as bold (the CSS / OpenType scale: 400 regular, 700 bold).
BOLD_WEIGHT = 600

_LINE_BREAK = re.compile(r"\r\n|\n")
_BOLD_NAME = re.compile(rb"bold|black|heavy", re.IGNORECASE)


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

    @classmethod
    def known(cls, text: str, boxes: np.ndarray, page: int, size: float, bold: bool, top: float, bottom: float) -> Line:
        """A line whose first and last characters have boxes, with ``top`` and ``bottom`` (points) as
        ``__post_init__`` would find them (:func:`text_layer_lines` takes them from the page's arrays
        at once)."""
        line = cls.__new__(cls)
        line.text, line.boxes, line.page, line.size, line.bold = text, boxes, page, size, bold
        line.has_boxes, line.top, line.bottom = True, top, bottom
        return line


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
    spans: list[tuple[int, int, str, float, bool]] = []  # each line's first and last character, text, font
    # PDFium's "\r\n" pairs are two chars of its list: split on the chars themselves, keeping indices
    start = 0
    for brk in [*(m.start() for m in _LINE_BREAK.finditer(text)), n]:
        raw = text[start:brk]
        lead = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if body:
            first = start + lead
            last = first + len(body) - 1
            size, bold = reader.font(first) if fonts else (0.0, False)
            # a line is as large and as bold as its first and last characters both; the last is read
            # only where the first stands out from the line before (a heading candidate)
            if fonts and last > first and (bold or not spans or size != spans[-1][3]):
                last_size, last_bold = reader.font(last)
                size, bold = min(size, last_size), bold and last_bold
            spans.append((first, last, body.replace("\r", " ").replace("\0", " "), size, bold))
        start = brk + (2 if text.startswith("\r\n", brk) else 1)
    if not spans:
        return []
    if char_boxes:
        boxes = reader.char_boxes(n)
        ends = boxes[[i for first, last, *_ in spans for i in (first, last)]].reshape(-1, 2, 4)
        whole = ~np.isnan(ends[:, :, 0]).any(axis=1)  # first and last boxed: their heights are the line's
        tops, bottoms = ends[:, :, 3].max(axis=1).tolist(), ends[:, :, 1].min(axis=1).tolist()
        return [
            Line.known(chars, boxes[first : last + 1], page, size, bold, top, bottom)
            if ok
            else Line(chars, boxes[first : last + 1], page, size, bold)
            for (first, last, chars, size, bold), ok, top, bottom in zip(spans, whole, tops, bottoms, strict=True)
        ]
    # each character gets its line's box (the union of its first and last characters' boxes): one
    # array for the page, a view a line
    ends = reader.boxes([i for first, last, *_ in spans for i in (first, last)]).reshape(-1, 2, 4)
    rects = np.concatenate([ends[:, :, :2].min(axis=1), ends[:, :, 2:].max(axis=1)], axis=1).astype(np.float32)
    every = np.repeat(rects, [len(chars) for _, _, chars, _, _ in spans], axis=0)
    out, at = [], 0
    for (_, _, chars, size, bold), (_, bottom, _, top) in zip(spans, rects.tolist(), strict=True):
        out.append(Line.known(chars, every[at : at + len(chars)], page, size, bold, top, bottom))
        at += len(chars)
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
        self.name = ctypes.create_string_buffer(128)
        self.flags = ctypes.c_int()
        self.named: dict[int, bool] = {}  # a font (its address) without a weight: bold by its name

    def boxes(self, indices: Sequence[int]) -> np.ndarray:
        """``float64 [len(indices), 4]``: PDFium's box ``(x0, y0, x1, y1)`` of each character at
        ``indices``, as it gives them (one with no area included; a character PDFium fails on: 0s).

        One ``FPDFText_GetCharBox`` call a character (PDFium has no call for a page's boxes at once),
        driven by ``map`` over a prototype of plain addresses that writes straight into the array's
        rows: 2.5x a loop over ``byref`` doubles (bench/pdf_quality.py, bench/README.md)."""
        m = len(indices)
        out = np.zeros((m, 4), np.float64)
        base = out.ctypes.data  # rows of (x0, y0, x1, y1): left at +0, bottom +8, right +16, top +24
        end = base + 32 * m
        raw = ctypes.cast(self.raw, ctypes.c_void_p).value
        rows = (range(base + k, end, 32) for k in (0, 16, 8, 24))
        deque(map(_char_box_call(self.c), repeat(raw, m), indices, *rows), maxlen=0)
        return out

    def char_boxes(self, n: int) -> np.ndarray:
        """``float32 [n, 4]``: the box of each of the page's ``n`` characters (:meth:`boxes`), NaN for
        one whose box has no area (the spaces and line breaks PDFium generates)."""
        out = self.boxes(range(n))
        empty = (out[:, 2] <= out[:, 0]) & (out[:, 3] <= out[:, 1])
        out[empty] = np.nan
        return out.astype(np.float32)

    def font(self, index: int) -> tuple[float, bool]:
        """Font size (points) and boldness of the character at ``index`` (``FPDFText_GetFontSize``,
        ``FPDFText_GetFontWeight``, and the font's name for fonts that declare no weight)."""
        size = float(self.c.FPDFText_GetFontSize(self.raw, index))
        weight = int(self.c.FPDFText_GetFontWeight(self.raw, index))
        if weight >= BOLD_WEIGHT:
            return size, True
        if weight > 0:
            return size, False
        # the name is PDFium's slowest font call (~9 us, 20x the others): once a font of the page
        font = self.c.FPDFTextObj_GetFont(self.c.FPDFText_GetTextObject(self.raw, index))
        key = ctypes.cast(font, ctypes.c_void_p).value
        if key is not None and key in self.named:
            return size, self.named[key]
        got = self.c.FPDFText_GetFontInfo(self.raw, index, self.name, 128, ctypes.byref(self.flags))
        bold = bool(got) and _BOLD_NAME.search(self.name.value) is not None
        if key is not None:
            self.named[key] = bold
        return size, bold


@cache
def _char_box_call(pdfium_c: Any) -> Any:
    """``FPDFText_GetCharBox`` with every argument a plain address (``c_void_p``; the text page, then
    left, right, bottom, top), so ctypes converts ints and builds no ``byref`` per call."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, *[ctypes.c_void_p] * 4)
    return proto(ctypes.cast(pdfium_c.FPDFText_GetCharBox, ctypes.c_void_p).value)
