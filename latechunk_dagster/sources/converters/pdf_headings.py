"""A PDF's headings: its outline's entries placed at the lines that carry them, or, for a PDF without
an outline, the lines set larger or bolder than the body text.

**Outline.** An entry's title matches a line of the page it points to when both read the same once
case, spacing, punctuation and a leading section number (``3.3``, ``A.1``, ``Chapter 2:``) are set
aside (``3.3 Invoking asn1Decoding`` carries the entry ``Invoking asn1Decoding``), or a line and the
next together (a title wrapped on the page). The line becomes the heading, as the page writes it.
An entry no line matches is put before the first line of its page that starts a sentence (the
page's first line when the page before ends one, else the line after the first sentence end), so a
heading never cuts a sentence; on a page without one, after the page's last line.

**Fonts.** The body size is the font size most characters are set in. A line is a heading when its
first and last characters are set :data:`LARGER` times the body size or more, or bold where the body
is not, it holds a letter, is at most :data:`MAX_CHARS` long and does not end like a sentence
(``.``, ``,``, ``;``) or continue one. Levels follow the sizes, largest first (bold body-size
headings last), so a heading's level is never above a larger one's; consecutive heading lines of one
size (a wrapped title) are one heading.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from latechunk_dagster.sources.converters.pdf_lines import Line

#: A line set this many times the body size (or more) is a heading candidate.
LARGER = 1.15
#: The longest line (characters) that can be a heading found from fonts.
MAX_CHARS = 120

_SECTION_NUMBER = re.compile(
    r"^\s*(?:(?:chapter|section|appendix|part)\s+)?(?:\d+|[a-z]|[ivxlc]+)(?:[.\-]\d+)*[.:)]?\s+", re.I
)
_SENTENCE_END = re.compile(r"""[.!?:]["'”’)\]]*$""")


def ends_sentence(text: str) -> bool:
    """Whether a line ends a sentence (``.``, ``!``, ``?`` or ``:``, then closing quotes or brackets)."""
    return bool(_SENTENCE_END.search(text))


def _plain(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.lower())


def _keys(text: str) -> set[str]:
    """What a title is compared by: its letters and digits, with and without a leading section number."""
    return {_plain(text), _plain(_SECTION_NUMBER.sub("", text, count=1))} - {""}


def place_outline(
    pages: Sequence[Sequence[Line]], outline: Sequence[tuple[int, str, int | None]]
) -> tuple[dict[tuple[int, int], int], list[tuple[int, int, int, str]]]:
    """Where each outline entry goes (module docstring).

    Args:
        pages: each page's body lines (furniture already out).
        outline: ``(level from 1, title, page index or None)`` in outline order.

    Returns:
        ``({(page, line index): level}`` of lines that carry a heading (a wrapped title's second line
        maps to level 0: joined to the first), ``[(page, line index, level, title)]`` of headings no
        line carries, to be put before that line (``len(lines)``: after the page's last line)).
    """
    marked: dict[tuple[int, int], int] = {}
    inserted: list[tuple[int, int, int, str]] = []
    cursor: dict[int, int] = {}
    for level, title, p in outline:
        if p is None or not 0 <= p < len(pages) or not _plain(title):
            continue
        lines, keys, start = pages[p], _keys(title), cursor.get(p, 0)
        for k in range(start, len(lines)):
            if (p, k) in marked:
                continue
            if _keys(lines[k].text) & keys:
                marked[(p, k)] = level
                cursor[p] = k + 1
                break
            if k + 1 < len(lines) and _keys(lines[k].text + " " + lines[k + 1].text) & keys:
                marked[(p, k)], marked[(p, k + 1)] = level, 0
                cursor[p] = k + 2
                break
        else:
            k = _sentence_start(pages, p, start, marked)
            inserted.append((p, k, level, title))
            cursor[p] = k
    return marked, inserted


def _sentence_start(pages: Sequence[Sequence[Line]], p: int, start: int, headings: dict[tuple[int, int], int]) -> int:
    """The first line at or after ``start`` on page ``p`` that starts a sentence: the line before it
    ends one or is a heading (``len(lines)``: none)."""
    lines = pages[p]
    for k in range(start, len(lines)):
        if k and (p, k - 1) in headings:
            return k
        before = lines[k - 1].text if k else _last_line_before(pages, p)
        if before is None or ends_sentence(before):
            return k
    return len(lines)


def _last_line_before(pages: Sequence[Sequence[Line]], p: int) -> str | None:
    for q in range(p - 1, -1, -1):
        if pages[q]:
            return pages[q][-1].text
    return None


def font_headings(pages: Sequence[Sequence[Line]]) -> dict[tuple[int, int], int]:
    """``{(page, line index): level}`` of the lines that are headings by their fonts (module
    docstring); a wrapped heading's further lines map to level 0 (joined to the first)."""
    weights: Counter[float] = Counter()
    bold_chars = 0
    for lines in pages:
        for line in lines:
            weights[round(line.size * 2) / 2] += len(line.text)
            bold_chars += len(line.text) if line.bold else 0
    if not weights or not max(weights):
        return {}
    body = weights.most_common(1)[0][0]
    body_bold = bold_chars > sum(weights.values()) / 2
    candidates: dict[tuple[int, int], float] = {}
    for p, lines in enumerate(pages):
        for k, line in enumerate(lines):
            size = round(line.size * 2) / 2
            larger = size >= body * LARGER
            bolder = line.bold and not body_bold and size >= body
            if not (larger or bolder) or len(line.text) > MAX_CHARS or not re.search(r"[^\W\d_]", line.text):
                continue
            if line.text.endswith((",", ";", ".")) and not re.search(r"\d\.$", line.text):
                continue  # a sentence, or one that runs on (a numbered heading's "2.1." stays)
            before = lines[k - 1] if k else None
            if before is not None and (before.size, before.bold) != (line.size, line.bold):
                if not ends_sentence(before.text) and before.text[-1:].isalpha() and line.text[:1].islower():
                    continue  # the rest of a sentence set in another font
            candidates[(p, k)] = size if larger else 0.0
    order = sorted({s for s in candidates.values()}, key=lambda s: -s if s else float("inf"))
    levels = {s: min(i + 1, 6) for i, s in enumerate(order)}
    out: dict[tuple[int, int], int] = {}
    for (p, k), size in candidates.items():
        previous = out.get((p, k - 1))
        same = previous is not None and candidates.get((p, k - 1)) == size
        out[(p, k)] = 0 if same and not ends_sentence(pages[p][k - 1].text) else levels[size]
    return out
