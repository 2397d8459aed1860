"""``MarkdownSections``: one chunk per Markdown section, each tagged with its heading path.

Headings are found by markdown-it-py (CommonMark), so ATX (``## Title``) and setext
(``Title`` over ``=====``) headings count and ``#`` lines inside fenced or indented
code blocks do not. A section too long for the budget is cut by
:func:`~latechunk_dagster.core.chunking.paragraphs.pack_paragraphs` (paragraphs, then
sentences, then tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from latechunk_dagster.core.chunking.base import Span, TokenBudgetStrategy
from latechunk_dagster.core.chunking.paragraphs import cut_at_chars, line_starts, pack_paragraphs, segment_region
from latechunk_dagster.core.tokenization import Tokenization, bom_length


@dataclass(frozen=True)
class Heading:
    """One top-level Markdown heading.

    Attributes:
        level: 1 for ``#`` / ``===``, ... 6 for ``######``.
        text: the heading's plain text (inline markup dropped, whitespace collapsed).
        start, end: character range of the heading's lines in the document (line ends included).
    """

    level: int
    text: str
    start: int
    end: int


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def _plain(inline: Any) -> str:
    """Plain text of a markdown-it ``inline`` token: text, code and image alt text; breaks become spaces."""
    parts: list[str] = []
    for child in inline.children or ():
        if child.type in ("text", "code_inline", "image"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return " ".join("".join(parts).split())


def headings(text: str) -> list[Heading]:
    """The top-level ATX and setext headings of ``text``, in order.

    Only headings at the top level of the document count: ``#`` lines inside code
    blocks are not headings, and headings nested in block quotes or list items are
    ignored (they are content, not document structure). A leading byte order mark is
    not text (see :func:`~latechunk_dagster.core.tokenization.bom_length`): markdown-it
    would read ``"\\ufeff# Title"`` as a paragraph, so it is parsed without it (line
    numbers are unchanged; ``start`` and ``end`` still index ``text`` as passed).

    Example:
        >>> [(h.level, h.text, h.start, h.end) for h in headings("# A\\n\\nB *b*\\n---\\n")]
        [(1, 'A', 0, 4), (2, 'B b', 5, 15)]
    """
    lines = line_starts(text)
    tokens = _parser().parse(text[bom_length(text) :])
    out: list[Heading] = []
    for i, t in enumerate(tokens):
        if t.type == "heading_open" and t.level == 0 and t.map is not None:
            first, last = t.map
            start, end = lines[min(first, len(lines) - 1)], lines[min(last, len(lines) - 1)]
            out.append(Heading(int(t.tag[1:]), _plain(tokens[i + 1]), start, end))
    return out


def heading_paths(found: list[Heading]) -> list[tuple[str, ...]]:
    """The heading path of each heading: the texts of its open ancestors, outermost first, then its own.

    A heading closes every open heading of the same or a deeper level; skipped levels
    (``#`` then ``###``) simply nest.

    Example:
        >>> heading_paths([Heading(1, "A", 0, 1), Heading(3, "B", 1, 2), Heading(2, "C", 2, 3)])
        [('A',), ('A', 'B'), ('A', 'C')]
    """
    stack: list[Heading] = []
    paths: list[tuple[str, ...]] = []
    for h in found:
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
        paths.append(tuple(x.text for x in stack))
    return paths


@dataclass(frozen=True)
class MarkdownSections(TokenBudgetStrategy):
    """One chunk per Markdown section, cut further only when it exceeds ``max_tokens``.

    A section runs from the first line of a top-level heading (ATX or setext, found by
    markdown-it-py; ``#`` lines in code blocks do not count) up to the next such
    heading. Text before the first heading is a section of its own with an empty
    heading path. Every span carries ``headings``: the heading texts from the outermost
    open heading to the section's own, e.g. ``("Install", "On Linux")``.

    Sections are never merged, however short. A section longer than ``max_tokens``
    tokens is cut like :class:`~latechunk_dagster.core.chunking.paragraphs.Paragraphs`
    does (paragraphs packed greedily, the heading lines counting as a paragraph of their
    own; an oversized paragraph cut at sentences; an oversized sentence at tokens), and
    every piece keeps the section's heading path. Special tokens join the first / last
    chunk (contract section 2).

    Args:
        max_tokens: the token budget of a chunk (>= 1).
        language, segmenter: the sentence segmenter of the fallback (default ``"sentencex"``).

    Raises:
        ValueError: ``max_tokens`` is not a positive int.

    Example:
        >>> MarkdownSections(max_tokens=256).describe()
        "markdown_sections(language='en', max_tokens=256, segmenter='sentencex')"
    """

    name: ClassVar[str] = "markdown_sections"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        found = headings(text)
        paths = heading_paths(found)
        starts = [h.start for h in found]
        out: list[Span] = []
        for section, j in cut_at_chars(tokens, 0, len(tokens), starts, ()):
            # Segment j > 0 is the section of heading j - 1; segment 0 is the text before the first heading.
            heads = paths[j - 1] if j > 0 else ()
            extra = (found[j - 1].end,) if j > 0 else ()
            piece = Span(section.start, section.end, heads)
            region = segment_region(starts, j, 0, len(text))
            out.extend(
                pack_paragraphs(text, tokens, piece, region, self.max_tokens, extra, self.language, self.segmenter)
            )
        return out
