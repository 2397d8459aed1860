"""A PDF's body lines joined into Markdown text as a reader reads it, each character keeping its box.

- A page's lines are joined by line breaks (a soft wrap in Markdown: one paragraph); a blank line
  where the gap to the next line is over :data:`PARAGRAPH_GAP` times the page's usual line pitch and
  the line ends a sentence.
- Across a page break the text reads on (one line break) unless the page before ends a sentence or
  the next starts with a heading (a blank line).
- A word hyphenated at a line end (``exam-`` / ``ple``) is joined, its hyphen dropped, only where the
  next line goes on in lower case; PDFium's own mark of such a hyphen inside a line (U+FFFE) is
  dropped the same way, else it is a ``-``. Other hyphens stay.
- Headings are ATX lines (``## 3.3 Invoking asn1Decoding``) preceded by a blank line; body lines are
  escaped (:func:`~latechunk_dagster.sources.converters.base.escape_block`), so a line starting with
  ``#``, ``>``, ``-`` or ``1.`` is not Markdown structure.

Characters the converter writes (``## ``, line breaks, escapes) have no box.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

from latechunk_dagster.sources.converters.base import escape_block
from latechunk_dagster.sources.converters.pdf_boxes import CharBoxes
from latechunk_dagster.sources.converters.pdf_headings import ends_sentence
from latechunk_dagster.sources.converters.pdf_lines import Line, no_boxes

#: A gap between two lines over this many times the page's median line pitch (and after a sentence
#: end) starts a new paragraph.
PARAGRAPH_GAP = 1.5

_HYPHENATED = re.compile(r"[^\W\d_][-\u00ad]$")


@dataclass
class Item:
    """One line of the text to write: a body line (``level`` None), a heading line (``level`` 1..6), or
    the rest of a wrapped heading (``level`` 0); ``line`` is the page's line (its text and boxes)."""

    line: Line
    level: int | None = None


class _Builder:
    """The text and its per-character page, line id and box, grown piece by piece (Python lists of
    pieces; the arrays are made once, at the end)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.rects: list[np.ndarray | None] = []  # None: a piece of the converter's own, without boxes
        self.pages: list[int] = []
        self.size = 0

    def add(self, text: str, rect: np.ndarray | None = None, page: int = -1) -> None:
        if text:
            self.texts.append(text)
            self.rects.append(rect)
            self.pages.append(page + 1)
            self.size += len(text)

    def drop_last(self) -> None:
        """Removes the last character written (a line-end hyphen of a joined word)."""
        rect = self.rects[-1]
        self.texts[-1], self.rects[-1] = self.texts[-1][:-1], None if rect is None else rect[:-1]
        self.size -= 1

    def result(self) -> tuple[str, CharBoxes]:
        text = "".join(self.texts)
        lengths = np.array([len(t) for t in self.texts], np.int64)
        rect = np.full((len(text), 4), np.nan, np.float32)
        has = [boxes is not None for boxes in self.rects]
        if any(has):  # the pieces with boxes, in one copy
            rect[np.repeat(np.array(has), lengths)] = np.concatenate([r for r in self.rects if r is not None])
        boxed = ~np.isnan(rect[:, 0])
        page = np.where(boxed, np.repeat(np.array(self.pages, np.int16), lengths), 0).astype(np.int16)
        piece = np.where(boxed, np.repeat(np.arange(len(self.texts), dtype=np.int32), lengths), -1).astype(np.int32)
        return text, CharBoxes(page, _visual_lines(piece, rect), rect)


def _visual_lines(ids: np.ndarray, rect: np.ndarray) -> np.ndarray:
    """Line ids split where a line's characters jump to another height (PDFium joins the two halves
    of a hyphenated word into one line), renumbered 0, 1, ... in text order."""
    at = np.flatnonzero(ids >= 0)
    if not len(at):
        return ids
    centre = (rect[at, 1] + rect[at, 3]) / 2
    height = np.maximum(rect[at, 3] - rect[at, 1], 1e-3)
    new = np.ones(len(at), bool)
    new[1:] = (np.diff(ids[at]) != 0) | (np.abs(np.diff(centre)) > 0.6 * np.maximum(height[1:], height[:-1]))
    out = np.full(len(ids), -1, np.int32)
    out[at] = np.cumsum(new) - 1
    return out


def _clean(line: Line) -> tuple[str, np.ndarray]:
    """A body line's text and boxes with PDFium's hyphen marks (U+FFFE) resolved (module docstring)."""
    text, rect = line.text, line.boxes
    if "\ufffe" not in text:
        return text, rect
    keep = np.ones(len(text), bool)
    chars = list(text)
    for i, ch in enumerate(chars):
        if ch == "\ufffe":
            if i + 1 < len(chars) and chars[i + 1].islower():
                keep[i] = False
            else:
                chars[i] = "-"
    return "".join(c for c, k in zip(chars, keep, strict=True) if k), rect[keep]


def _escaped(text: str, rect: np.ndarray) -> tuple[str, np.ndarray]:
    """The body line escaped (one backslash, without a box, where :func:`escape_block` puts it)."""
    out = escape_block(text)
    if out == text:
        return text, rect
    at = next(i for i, (a, b) in enumerate(zip(out, text, strict=False)) if a != b)
    return out, np.concatenate([rect[:at], no_boxes(1), rect[at:]])


def _pitch(items: Sequence[Item]) -> float:
    """The page's median line pitch in points (baseline to baseline of consecutive body lines), 0 unknown."""
    bottoms = [it.line.bottom for it in items if it.level is None and it.line.has_boxes]
    steps = [a - b for a, b in zip(bottoms, bottoms[1:], strict=False) if a - b > 0]
    return float(median(steps)) if steps else 0.0  # numpy's median: 20x the time on a page's ~40 steps


def join_pages(pages: Sequence[Sequence[Item]]) -> tuple[str, tuple[int, ...], CharBoxes]:
    """The Markdown text of the pages' items, where each page starts in it, and each character's box.

    Returns:
        ``(text, page starts, boxes)``: a page starts at its first character (mid-sentence when the
        page before runs on into it); a page without items starts where the text before it ends.
    """
    out = _Builder()
    starts: list[int] = []
    previous: Item | None = None
    for items in pages:
        pitch = _pitch(items)
        start: int | None = None
        for n, item in enumerate(items):
            text, rect = (item.line.text, item.line.boxes) if item.level is not None else _clean(item.line)
            joined = False
            if previous is None:
                sep = ""
            elif item.level == 0:
                sep = " "
            elif item.level is not None:
                sep = "\n\n"
            elif previous.level is not None:
                sep = "\n"
            elif _HYPHENATED.search(previous.line.text) and text[:1].islower():
                out.drop_last()
                sep, joined = "", True
            elif n == 0:
                sep = "\n\n" if ends_sentence(previous.line.text) else "\n"
            else:
                gap = previous.line.bottom - item.line.bottom
                wide = pitch > 0 and gap > PARAGRAPH_GAP * pitch and ends_sentence(previous.line.text)
                sep = "\n\n" if wide else "\n"
            out.add(sep)
            if start is None:
                start = out.size
            if item.level:
                out.add("#" * min(item.level, 6) + " ")
            elif item.level is None and not joined:
                text, rect = _escaped(text, rect)
            out.add(text, rect, item.line.page)
            previous = item
        starts.append(out.size if start is None else start)
    text, boxes = out.result()
    return text, tuple(starts), boxes
