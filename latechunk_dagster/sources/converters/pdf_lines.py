"""A PDF page's lines as PDFium's text layer gives them, each character with its box, each line with
its font size and weight: what the PDF converter's rules (furniture, headings, joins) read.

:func:`text_layer_lines` reads one page's text page (pypdfium2); :func:`plain_lines` makes the same
lines from text that has no boxes (a page read by OCR stands in for its text layer there).
"""

from __future__ import annotations

import ctypes
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
        at = np.flatnonzero(~np.isnan(self.boxes[:, 0])) if len(self.boxes) else np.zeros(0, np.intp)
        self.has_boxes: bool = bool(len(at))
        # from the first and last boxed characters only: the same with and without char_boxes
        ends = self.boxes[[at[0], at[-1]]] if self.has_boxes else None
        self.top: float = float(ends[:, 3].max()) if ends is not None else float("nan")
        self.bottom: float = float(ends[:, 1].min()) if ends is not None else float("nan")


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


def text_layer_lines(textpage: Any, page: int, *, char_boxes: bool = True) -> list[Line]:
    """The non-blank lines of one page's text layer, in PDFium's order, with each character's box.

    Args:
        textpage: a pypdfium2 ``PdfTextPage``; page: the page's index (from 0).
        char_boxes: read every character's box (one PDFium call a character: most of the
            conversion's time, bench/pdf_quality.py); ``False`` reads only each line's first and last
            character's and gives every character of the line the line's box (enough for the rules,
            not for a chunk's boxes within a line).

    Returns:
        The lines; ``[]`` for a page without text. PDFium's own line breaks (``\\r\\n``) split lines; a
        lone ``\\r`` or NUL it gives (a glyph without a Unicode value) becomes a space.
    """
    import pypdfium2.raw as pdfium_c

    n = textpage.count_chars()
    if n <= 0:
        return []
    text = _page_text(textpage, n)
    boxes = _char_boxes(textpage, n) if char_boxes else None
    out = []
    # PDFium's "\r\n" pairs are two chars of its list: split on the chars themselves, keeping indices
    start = 0
    for brk in [*(m.start() for m in _LINE_BREAK.finditer(text)), n]:
        raw = text[start:brk]
        lead = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if body:
            first = start + lead
            chars = body.replace("\r", " ").replace("\0", " ")
            size, bold = _font(pdfium_c, textpage, first)
            if len(chars) > 1:  # a line is as large and as bold as its first and last characters both
                last_size, last_bold = _font(pdfium_c, textpage, first + len(chars) - 1)
                size, bold = min(size, last_size), bold and last_bold
            last = first + len(chars) - 1
            rect = boxes[first : last + 1] if boxes is not None else _line_box(textpage, first, last, len(chars))
            out.append(Line(chars, rect, page, size, bold))
        start = brk + (2 if text.startswith("\r\n", brk) else 1)
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


def _char_boxes(textpage: Any, n: int) -> np.ndarray:
    """``float32 [n, 4]``: PDFium's box of each character (``FPDFText_GetCharBox``), NaN for one whose
    box has no area (the spaces and line breaks PDFium generates)."""
    import pypdfium2.raw as pdfium_c

    left, right, bottom, top = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
    get = pdfium_c.FPDFText_GetCharBox
    raw = textpage.raw
    refs = (ctypes.byref(left), ctypes.byref(right), ctypes.byref(bottom), ctypes.byref(top))
    values: list[float] = []
    extend = values.extend  # a flat list grown per character: 2.3x faster than numpy item assignment
    for i in range(n):
        get(raw, i, *refs)
        extend((left.value, bottom.value, right.value, top.value))
    out = np.array(values, np.float64).reshape(n, 4)
    empty = (out[:, 2] <= out[:, 0]) & (out[:, 3] <= out[:, 1])
    out[empty] = np.nan
    return out.astype(np.float32)


def _line_box(textpage: Any, first: int, last: int, n: int) -> np.ndarray:
    """``float32 [n, 4]``: the union of the boxes of characters ``first`` and ``last``, for each of ``n``."""
    a, b = textpage.get_charbox(first), textpage.get_charbox(last)  # (left, bottom, right, top)
    rect = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
    return np.tile(np.array(rect, np.float32), (n, 1))


def _font(pdfium_c: Any, textpage: Any, index: int) -> tuple[float, bool]:
    """Font size (points) and boldness of the character at ``index`` (``FPDFText_GetFontSize``,
    ``FPDFText_GetFontWeight``, and the font's name for fonts that declare no weight)."""
    size = float(pdfium_c.FPDFText_GetFontSize(textpage.raw, index))
    weight = int(pdfium_c.FPDFText_GetFontWeight(textpage.raw, index))
    if weight >= BOLD_WEIGHT:
        return size, True
    name = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    got = pdfium_c.FPDFText_GetFontInfo(textpage.raw, index, name, 128, ctypes.byref(flags))
    font = name.value.decode("latin-1", "replace") if got else ""
    return size, bool(re.search(r"bold|black|heavy", font, re.IGNORECASE))
