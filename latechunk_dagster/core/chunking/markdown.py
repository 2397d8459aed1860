"""``MarkdownSections``: one chunk per Markdown section, each tagged with its heading path.

Headings are found by markdown-it-py (CommonMark), so ATX (``## Title``) and setext
(``Title`` over ``=====``) headings count and ``#`` lines inside fenced or indented
code blocks do not (:mod:`~latechunk_dagster.core.chunking.structure`). A section too long for
the budget is cut by :mod:`~latechunk_dagster.core.chunking.packing` (blocks, then items, rows,
lines or sentences, then between words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from latechunk_dagster.core.chunking.base import Span, TokenBudgetStrategy
from latechunk_dagster.core.chunking.packing import Packer
from latechunk_dagster.core.chunking.structure import markdown_blocks
from latechunk_dagster.core.tokenization import Tokenization


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


def headings(text: str) -> list[Heading]:
    """The top-level ATX and setext headings of ``text``, in order.

    Only headings at the top level of the document count: ``#`` lines inside code
    blocks are not headings, and headings nested in block quotes or list items are
    ignored (they are content, not document structure). A leading byte order mark is
    not text (see :func:`~latechunk_dagster.core.tokenization.bom_length`); ``start`` and
    ``end`` still index ``text`` as passed.

    Example:
        >>> [(h.level, h.text, h.start, h.end) for h in headings("# A\\n\\nB *b*\\n---\\n")]
        [(1, 'A', 0, 4), (2, 'B b', 5, 15)]
    """
    blocks = markdown_blocks(text, parse=True)
    return [Heading(b.level, b.title, b.start, b.end) for b in blocks if b.kind == "heading"]


@dataclass(frozen=True)
class MarkdownSections(TokenBudgetStrategy):
    """One chunk per Markdown section, cut further only when it exceeds ``max_tokens``.

    A section runs from the first line of a top-level heading (ATX or setext, found by
    markdown-it-py; ``#`` lines in code blocks do not count) up to the next such
    heading. Text before the first heading is a section of its own with an empty
    heading path. Every span carries ``headings``: the heading texts from the outermost
    open heading to the section's own, e.g. ``("Install", "On Linux")``.

    Sections are never packed together, however short. A section longer than ``max_tokens``
    tokens is cut like :class:`~latechunk_dagster.core.chunking.paragraphs.Paragraphs`
    does (blocks packed greedily, the heading with the block after it; an oversized block cut
    at its items, rows, lines or sentences; an oversized part between words), and every piece
    keeps the section's heading path. Pieces under ``min_tokens`` join a neighbour of their
    section. Special tokens join the first / last chunk (contract section 2).

    Args:
        max_tokens: the token budget of a chunk (>= 1).
        language, segmenter: the sentence segmenter of the fallback (default ``"sentencex"``).
        min_tokens: see :class:`~latechunk_dagster.core.chunking.base.TokenBudgetStrategy`.

    Raises:
        ValueError: ``max_tokens`` or ``min_tokens`` is not a positive int.

    Example:
        >>> MarkdownSections(max_tokens=256).describe()
        "markdown_sections(language='en', max_tokens=256, min_tokens=8, segmenter='sentencex')"
    """

    name: ClassVar[str] = "markdown_sections"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        packer = Packer(text, tokens, self.max_tokens, self.smallest, self.language, self.segmenter)
        return packer.spans("blocks", within_sections=True)
