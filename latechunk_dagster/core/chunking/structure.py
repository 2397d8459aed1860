"""A document's Markdown block structure: what every boundary strategy keeps whole (issue 46).

Converted documents are Markdown (headings ``#``..``######``, pipe tables, fenced code), so every
boundary strategy reads the same structure: top-level blocks found by markdown-it-py (CommonMark plus
GFM pipe tables), block rules only (the inline parse is skipped: about 2x faster; a heading's own text
is parsed inline alone). A block is a heading, a paragraph, a list, a table, a code block (fenced or
indented) or another block (block quote, HTML, thematic break); lists, tables and code blocks name
the places they may be cut (items, body rows, lines).

Text with no Markdown block marker at a line start (no ``#``, fence, list marker, ``|`` or setext
underline) is read as blank-line separated paragraphs without parsing it, so plain text pays nothing
and its indented lines stay prose (CommonMark would read them as code).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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


@lru_cache(maxsize=1)
def _block_parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    md.core.ruler.disable("inline")  # blocks only; a heading's text is parsed alone (_plain)
    return md


def _plain(source: str) -> str:
    """Plain text of inline Markdown: text, code and image alt text; breaks become spaces."""
    parts: list[str] = []
    for inline in _parser().parseInline(source):
        for child in inline.children or ():
            if child.type in ("text", "code_inline", "image"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
    return " ".join("".join(parts).split())


_KINDS = {
    "heading_open": "heading",
    "paragraph_open": "paragraph",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "table_open": "table",
    "fence": "code",
    "code_block": "code",
}


def is_markdown(text: str) -> bool:
    """Whether ``text`` has a Markdown block marker at a line start (see the module docstring)."""
    return _MARKER.search(text) is not None


def markdown_blocks(text: str, parse: bool | None = None) -> list[Block]:
    """The top-level blocks of ``text``, in order.

    Args:
        text: the document's text as passed; a leading byte order mark is not text (markdown-it would
            read ``"\\ufeff# Title"`` as a paragraph), yet every offset still indexes ``text``.
        parse: ``True`` parses as Markdown, ``False`` reads blank-line paragraphs only; ``None``
            (default) parses when :func:`is_markdown`.

    Returns:
        Blocks in document order, non-overlapping; headings in block quotes or list items are not
        headings (they are content). Text with no non-blank line gives ``[]``.

    Example:
        >>> [(b.kind, b.start, b.end) for b in markdown_blocks("# A\\n\\nB.\\n- x\\n- y\\n")]
        [('heading', 0, 4), ('paragraph', 5, 8), ('list', 8, 16)]
    """
    lines = line_starts(text)
    skip = bom_length(text)
    if not (is_markdown(text) if parse is None else parse):
        return _paragraph_blocks(text, lines, skip)

    def at(line: int) -> int:
        return lines[min(line, len(lines) - 1)]

    tokens = _block_parser().parse(text[skip:])
    out: list[Block] = []
    for i, t in enumerate(tokens):
        if t.level != 0 or t.map is None or t.nesting == -1:
            continue
        first, last = t.map
        kind = _KINDS.get(t.type, "other")
        if kind == "heading":
            out.append(Block(kind, at(first), at(last), (), int(t.tag[1:]), _plain(tokens[i + 1].content)))
            continue
        if kind == "list":
            parts = _child_starts(tokens, i, "list_item_open", 1)[1:]
        elif kind == "table":
            parts = _child_starts(tokens, i, "tr_open", 2)[1:]
        elif kind == "code":
            inner = range(first + 2, last - 1) if t.type == "fence" else range(first + 1, last)
            parts = list(inner)
        else:
            parts = []
        out.append(Block(kind, at(first), at(last), tuple(at(p) for p in parts)))
    return out


def _child_starts(tokens: list[Any], i: int, child: str, level: int) -> list[int]:
    """First lines of the ``child`` tokens at ``level`` inside the block that opens at ``tokens[i]``."""
    found: list[int] = []
    for t in tokens[i + 1 :]:
        if t.level == 0:
            break
        if t.type == child and t.level == level and t.map is not None:
            found.append(t.map[0])
    return found


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
