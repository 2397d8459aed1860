"""A document's Markdown block structure: what every boundary strategy keeps whole (issue 46).

Converted documents are Markdown (headings ``#``..``######``, pipe tables, fenced code), so every
boundary strategy reads the same structure: top-level blocks, read line by line as CommonMark (plus GFM
pipe tables) defines them. A block is a heading, a paragraph, a list, a table, a code block or another
block (a thematic break); lists, tables and code blocks name the places they may be cut (items, body
rows, lines). markdown-it-py's block parse gives the same blocks but costs about 6x the whole of the
former sentence chunking (bench/chunk_quality.py), so only a heading's own text goes through it
(inline markup dropped).

Text with no Markdown block marker at a line start (no ``#``, fence, list marker, ``|`` or setext
underline) is read as blank-line separated paragraphs without scanning it, and indented lines are
never code here: plain text stays prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from latechunk_dagster.core.tokenization import bom_length

#: Line breaks, as CommonMark (and markdown-it) count them: ``\r\n``, ``\r`` or ``\n``.
#: ``str.splitlines`` also breaks at ``\x0b``, ``\x0c``, ``\x1c``-``\x1e``, ``\x85``,
#: ``\u2028`` and ``\u2029``, which would shift line numbers against markdown-it's.
_NEWLINE = re.compile(r"\r\n?|\n")

#: A line that makes the text Markdown for us: an ATX heading, a fence, a list item, a table row or
#: a setext underline (up to 3 spaces of indentation, as CommonMark allows).
_MARKER = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|```|~~~|[-*+][ \t]|\d{1,9}[.)][ \t]|\||=+[ \t]*$|-+[ \t]*$)", re.M)


def line_starts(text: str) -> list[int]:
    """Character offsets where the lines of ``text`` start, plus ``len(text)`` as a sentinel.

    Lines end at ``\\r\\n``, ``\\r`` or ``\\n`` (CommonMark line endings), so line ``k``
    here is line ``k`` of markdown-it's ``Token.map``. The result is non-decreasing,
    starts with 0 and ends with ``len(text)``; entry ``k`` is the offset of line ``k``.

    Example:
        >>> line_starts("a\\nbb\\r\\nc")
        [0, 2, 6, 7]
    """
    if "\r" not in text:  # "\n" only: found at C speed
        starts = (np.flatnonzero(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) == 10) + 1).tolist()
        starts.insert(0, 0)
    else:
        starts = [0]
        starts.extend(m.end() for m in _NEWLINE.finditer(text))
    if starts[-1] != len(text):
        starts.append(len(text))
    return starts


@dataclass(frozen=True)
class Block:
    """One top-level block of a document.

    Attributes:
        kind: ``"heading"``, ``"paragraph"``, ``"list"``, ``"table"``, ``"code"`` or ``"other"``.
        start, end: character range of the block's lines (line ends included; blank lines after it
            are not in it).
        parts: where the block may be cut, as character offsets inside it: the starts of a list's
            items after the first, of a table's body rows, of a code block's lines between its fences;
            ``()`` for the other kinds.
        level: a heading's level (1 for ``#``, ... 6), else 0.
        title: a heading's plain text (inline markup dropped, whitespace collapsed), else ``""``.
    """

    kind: str
    start: int
    end: int
    parts: tuple[int, ...] = ()
    level: int = 0
    title: str = ""


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def _plain(source: str) -> str:
    """Plain text of inline Markdown: text, code and image alt text; breaks become spaces."""
    if not _INLINE_MARKUP.search(source):
        return " ".join(source.split())
    parts: list[str] = []
    for inline in _parser().parseInline(source):
        for child in inline.children or ():
            if child.type in ("text", "code_inline", "image"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
    return " ".join("".join(parts).split())


#: Characters that may start inline markup (emphasis, code, links, images, HTML, escapes, entities).
_INLINE_MARKUP = re.compile(r"[*_`\[\]!<>\\&]")


def is_markdown(text: str) -> bool:
    """Whether ``text`` has a Markdown block marker at a line start (see the module docstring)."""
    return _MARKER.search(text) is not None


def markdown_blocks(text: str, parse: bool | None = None) -> list[Block]:
    """The top-level blocks of ``text``, in order (CommonMark's block structure, read line by line).

    Args:
        text: the document's text as passed; a leading byte order mark is not text (``"\\ufeff# Title"``
            is a heading), yet every offset still indexes ``text``.
        parse: ``True`` reads Markdown, ``False`` blank-line paragraphs only; ``None`` (default) reads
            Markdown when :func:`is_markdown`.

    Returns:
        Blocks in document order, non-overlapping; ``#`` lines inside fenced code, headings indented
        4 spaces or more (code, or inside list items) and quoted ones (``> #``) are not headings.
        Text with no non-blank line gives ``[]``.

    Example:
        >>> [(b.kind, b.start, b.end) for b in markdown_blocks("# A\\n\\nB.\\n- x\\n- y\\n")]
        [('heading', 0, 4), ('paragraph', 5, 8), ('list', 8, 16)]
    """
    lines = line_starts(text)
    skip = bom_length(text)
    if not (is_markdown(text) if parse is None else parse):
        return _paragraph_blocks(text, lines, skip)
    return _Scanner(text, lines, skip).blocks()


_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*(?:\r\n?|\n)?")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*(?:\r\n?|\n)?")
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})")
_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|\r|\n|$)")
_ROW = re.compile(r" {0,3}\|")
_DELIMITER = re.compile(r" {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*(?:\r\n?|\n)?")
_BREAK = re.compile(r" {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})(?:\r\n?|\n)?")


#: First characters (after spaces) of a line that may start or end a block; "" and whitespace: a blank line.
_MARKS = frozenset("#`~=-*+_|0123456789\t\r\n\f\v") | {""}


@lru_cache(maxsize=64)
def _closing_fence(mark: str) -> re.Pattern[str]:
    """The line that closes a fence opened with ``mark``: the same character, at least as many."""
    return re.compile(rf"[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*(?:\r\n?|\n)?")


class _Scanner:
    """CommonMark's top-level blocks of one text, line by line: ATX and setext headings, fenced code,
    lists (items at up to 3 spaces, continued by indented or lazy lines), GFM pipe tables (a ``|`` row
    over a delimiter row), thematic breaks, paragraphs. Markdown-it-py reads the same blocks about
    20x slower (bench/chunk_quality.py); indented code, block quotes and HTML are paragraphs here."""

    def __init__(self, text: str, lines: list[int], skip: int) -> None:
        self.text, self.lines, self.skip = text, lines, skip
        self.out: list[Block] = []

    def line(self, i: int) -> str:
        return self.text[self.lines[i] if i else self.skip : self.lines[i + 1]]

    def blocks(self) -> list[Block]:
        i, n = 0, len(self.lines) - 1
        para = -1  # first line of the open paragraph
        while i < n:
            s = self.line(i)
            lead = s.lstrip(" ")[:1]
            if lead not in _MARKS:  # a prose line (the common case): no rule to try
                para = i if para < 0 else para
                i += 1
                continue
            if not s.strip():
                para = self._close(para, i)
                i += 1
                continue
            fence = _FENCE.match(s)
            if fence:
                para = self._close(para, i)
                i = self._fence(i, fence.group(1))
            elif _ATX.fullmatch(s):
                para = self._close(para, i)
                m = _ATX.fullmatch(s)
                assert m is not None
                self._add("heading", i, i + 1, (), len(m.group(1)), _plain(m.group(2) or ""))
                i += 1
            elif para >= 0 and _SETEXT.fullmatch(s):
                title = _plain(self.text[self.lines[para] : self.lines[i]].strip())
                self._add("heading", para, i + 1, (), 1 if s.lstrip()[0] == "=" else 2, title)
                para, i = -1, i + 1
            elif _BREAK.fullmatch(s):
                para = self._close(para, i)
                self._add("other", i, i + 1)
                i += 1
            elif _ITEM.match(s):
                para = self._close(para, i)
                i = self._list(i)
            elif _ROW.match(s) and i + 1 < n and _DELIMITER.fullmatch(self.line(i + 1)):
                para = self._close(para, i)
                i = self._table(i)
            else:
                para = i if para < 0 else para
                i += 1
        self._close(para, n)
        return self.out

    def _add(
        self, kind: str, first: int, last: int, parts: tuple[int, ...] = (), level: int = 0, title: str = ""
    ) -> None:
        self.out.append(Block(kind, self.lines[first], self.lines[last], parts, level, title))

    def _close(self, para: int, i: int) -> int:
        if para >= 0:
            self._add("paragraph", para, i)
        return -1

    def _fence(self, i: int, mark: str) -> int:
        """A fenced code block from line ``i`` to its closing fence (or the end); returns the line after it."""
        n, j = len(self.lines) - 1, i + 1
        close = _closing_fence(mark)
        while j < n and not close.fullmatch(self.line(j)):
            j += 1
        end = min(j + 1, n)
        self._add("code", i, end, tuple(self.lines[k] for k in range(i + 2, min(j, n))))
        return end

    def _list(self, i: int) -> int:
        """A list from its first item at line ``i``: items at up to 3 spaces; indented, lazy and fenced lines
        continue the item; a blank line ends it unless the next line is indented or an item."""
        n, items, j, last = len(self.lines) - 1, [i], i + 1, i
        while j < n:
            s = self.line(j)
            if not s.strip():
                k = j + 1
                while k < n and not self.line(k).strip():
                    k += 1
                if k >= n or not (self.line(k)[:1] in " \t" or _ITEM.match(self.line(k))):
                    break
                j = k
                continue
            fence = _FENCE.match(s)
            if _ITEM.match(s) and not _BREAK.fullmatch(s):
                items.append(j)
            elif fence and s[:1] in " \t":
                j = self._skip_fence(j, fence.group(1))
            elif s[:1] not in " \t" and (_ATX.fullmatch(s) or fence or _BREAK.fullmatch(s)):
                break
            last = j
            j += 1
        self._add("list", i, last + 1, tuple(self.lines[k] for k in items[1:]))
        return last + 1

    def _skip_fence(self, i: int, mark: str) -> int:
        n, j = len(self.lines) - 1, i + 1
        close = _closing_fence(mark)
        while j < n and not close.fullmatch(self.line(j)):
            j += 1
        return min(j, n - 1)

    def _table(self, i: int) -> int:
        """A pipe table: its header and delimiter rows, then rows up to a blank or non-``|`` line."""
        n, j = len(self.lines) - 1, i + 2
        while j < n and _ROW.match(self.line(j)):
            j += 1
        self._add("table", i, j, tuple(self.lines[k] for k in range(i + 2, j)))
        return j


def _paragraph_blocks(text: str, lines: list[int], skip: int) -> list[Block]:
    """Runs of non-blank lines as paragraph blocks (a line holding only whitespace, or a BOM, is blank)."""
    out: list[Block] = []
    start = -1
    for a, b in zip(lines, lines[1:]):
        blank = not text[max(a, skip) : b].strip()
        if not blank and start < 0:
            start = a
        elif blank and start >= 0:
            out.append(Block("paragraph", start, a))
            start = -1
    if start >= 0:
        out.append(Block("paragraph", start, lines[-1]))
    return out


def heading_paths(found: list[Block]) -> list[tuple[str, ...]]:
    """The heading path of each heading block: its open ancestors' titles, outermost first, then its own.

    A heading closes every open heading of the same or a deeper level; skipped levels
    (``#`` then ``###``) simply nest.

    Example:
        >>> heads = [Block("heading", 0, 1, (), 1, "A"), Block("heading", 1, 2, (), 3, "B")]
        >>> heading_paths(heads + [Block("heading", 2, 3, (), 2, "C")])
        [('A',), ('A', 'B'), ('A', 'C')]
    """
    stack: list[Block] = []
    paths: list[tuple[str, ...]] = []
    for h in found:
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
        paths.append(tuple(x.title for x in stack))
    return paths


#: A "sentence" that is only a section number (``1.3.``, ``## 2.6.``, ``IV.``): the segmenter's end
#: after it is no sentence end (issue 46: ``## 1.3.`` was cut from its title).
_NUMBER_ONLY = re.compile(r"\s*(?:#{1,6}\s*)?(?:\d{1,3}\.)+\d{0,3}\s*|\s*[IVXLC]{1,6}\.\s*")


def drop_number_ends(text: str, starts: list[int], lo: int) -> list[int]:
    """``starts`` (sentence starts in ``text``, the first sentence starting at ``lo``) without those that
    follow a sentence holding only a section number (see ``_NUMBER_ONLY``)."""
    out: list[int] = []
    prev = lo
    for s in starts:
        if not _NUMBER_ONLY.fullmatch(text, prev, s):
            out.append(s)
            prev = s
    return out
