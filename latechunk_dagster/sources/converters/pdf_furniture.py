"""Page furniture of a PDF: the lines a reader skips, found so the converter keeps them out of the text.

- **Running headers and footers**: a line at the top or bottom of its page (one of the page's first
  or last :data:`EDGE_LINES` lines, or inside the top / bottom :data:`MARGIN` of the page) whose text,
  with its digits normalised (``Chapter 4: Function reference 12`` and ``... 13`` are one), is at the
  edge of :data:`REPEATS` or more pages, at the height most of them sit at (the same words elsewhere,
  such as the document's title on its title page, stay). A chapter's head on a chapter of one or two pages repeats
  less: a top or bottom line at the height (within :data:`SAME_Y` points) where repeated heads sit,
  and that carries a page number at one end, is a head too.
- **Bare page numbers**: an edge line that is only a page number (``12``, ``- 12 -``, ``xii``,
  ``Page 3 of 9``).
- **Dot leaders** of a table of contents or an index (``1 Introduction . . . . . . 1``), anywhere.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from latechunk_dagster.sources.converters.pdf_lines import Line

#: How many lines at each end of a page are candidates for running heads and page numbers.
EDGE_LINES = 3
#: Fraction of the page's height at the top and at the bottom that counts as its margin.
MARGIN = 0.1
#: On how many pages an edge line's normalised text must sit to be a running head or foot (issue 45).
REPEATS = 3
#: Points within which a line sits at the height of the repeated heads.
SAME_Y = 1.5

_PAGE_NUMBER = re.compile(r"^[\W_]*(?:page\s*)?(?:\d{1,5}|[ivxlcdm]{1,8})(?:\s*(?:of|/)\s*\d{1,5})?[\W_]*$", re.I)
_DOT_LEADER = re.compile(r"(?:\.\s?){4,}\s*(?:\d{1,5}|[ivxlcdm]{1,8})?\s*$", re.I)
_NUMBER_AT_END = re.compile(r"^\W*\d{1,5}\b(?![.:]\d)|\b\d{1,5}\W*$")  # a page number, not "1.3." first


def normalised(text: str) -> str:
    """The text a running head repeats: lower case, each run of digits ``#``, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"\d+", "#", text.lower())).strip()


def furniture(pages: Sequence[Sequence[Line]], heights: Sequence[float]) -> list[dict[int, str]]:
    """The furniture lines of each page: ``{line index: kind}``, kind ``"running"`` (a running head or
    foot), ``"page_number"`` or ``"dot_leader"`` (module docstring).

    Args:
        pages: each page's lines (:mod:`~latechunk_dagster.sources.converters.pdf_lines`).
        heights: each page's height in points (its margins are :data:`MARGIN` of it).
    """
    edges = [_edge_lines(lines, height) for lines, height in zip(pages, heights, strict=True)]
    seen: dict[str, list[float]] = defaultdict(list)  # key -> the height of each page's line of it
    pages_of: dict[str, set[int]] = defaultdict(set)
    for p, (lines, edge) in enumerate(zip(pages, edges, strict=True)):
        for k in edge:
            key = normalised(lines[k].text)
            if re.search(r"[^\W\d_#]", key):  # a line of letters (bare numbers are the next rule's)
                pages_of[key].add(p)
                if lines[k].has_boxes:
                    seen[key].append(lines[k].top)
    repeated = {key: _usual(seen[key]) for key, where in pages_of.items() if len(where) >= REPEATS}
    out: list[dict[int, str]] = []
    heads_y: list[float] = []
    for lines, edge in zip(pages, edges, strict=True):
        found: dict[int, str] = {}
        for k in edge:
            key = normalised(lines[k].text)
            if key in repeated:
                usual = repeated[key]
                if usual is not None and lines[k].has_boxes and abs(lines[k].top - usual) > SAME_Y:
                    continue  # the same words elsewhere on the page: the title on the title page
                found[k] = "running"
                if usual is not None:
                    heads_y.append(usual)
            elif _PAGE_NUMBER.match(lines[k].text):
                found[k] = "page_number"
        out.append(found)
    for lines, edge, found in zip(pages, edges, out, strict=True):
        for k in edge:
            line = lines[k]
            if k in found or not line.has_boxes or not _NUMBER_AT_END.search(line.text):
                continue
            if any(abs(line.top - y) <= SAME_Y for y in heads_y):
                found[k] = "running"
        for k, line in enumerate(lines):
            if k not in found and (". ." in line.text or "...." in line.text) and _DOT_LEADER.search(line.text):
                found[k] = "dot_leader"
    return out


def _usual(tops: list[float]) -> float | None:
    """The height most of a running head's lines sit at (their median), ``None`` without boxes."""
    return float(sorted(tops)[len(tops) // 2]) if tops else None


def _edge_lines(lines: Sequence[Line], height: float) -> list[int]:
    """Indices of a page's lines that may be furniture: its first and last :data:`EDGE_LINES` lines in
    reading order and in height, and any line inside its top or bottom margin."""
    n = len(lines)
    picked = set(range(min(EDGE_LINES, n))) | set(range(max(0, n - EDGE_LINES), n))
    boxed = [k for k in range(n) if lines[k].has_boxes]
    by_height = sorted(boxed, key=lambda k: -lines[k].top)
    picked |= set(by_height[:EDGE_LINES]) | set(by_height[-EDGE_LINES:])
    if height > 0:
        picked |= {k for k in boxed if lines[k].bottom >= height * (1 - MARGIN) or lines[k].top <= height * MARGIN}
    return sorted(picked)
