"""``Paragraphs``: a document's blocks (blank-line separated paragraphs), packed greedily up to ``max_tokens``.

A block longer than the budget is cut at its own places (a list between items, a table between rows, a
code block between lines, prose between sentences), then between words; see
:mod:`latechunk_dagster.core.chunking.packing`. Every character boundary is mapped to tokens by the
contract section 2 rule through the helpers of :mod:`latechunk_dagster.core.chunking.base`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from latechunk_dagster.core.chunking.base import Span, TokenBudgetStrategy
from latechunk_dagster.core.chunking.packing import Packer
from latechunk_dagster.core.chunking.structure import line_starts, markdown_blocks
from latechunk_dagster.core.tokenization import Tokenization


def paragraph_starts(text: str, base: int = 0) -> list[int]:
    """Character offsets (into ``text``, plus ``base``) where paragraphs start.

    A paragraph is a run of non-blank lines; a blank line is one that holds only
    whitespace (``str.isspace``) or nothing (line ends are ``\\r\\n``, ``\\r`` or ``\\n``). A
    paragraph starts at the beginning of its first line (so leading indentation belongs to it).
    The result is strictly increasing and empty when ``text`` has no non-blank line. When
    ``base`` is 0 (``text`` starts the document) a leading byte order mark is not text: a line
    holding only it is blank.

    Example:
        >>> paragraph_starts("One.\\n\\n  Two\\nlines.\\n \\nThree.")
        [0, 6, 21]
    """
    if base:  # a slice of a document: a BOM at its start is a character like any other
        text = " " + text
        return [base + max(b.start - 1, 0) for b in markdown_blocks(text, parse=False)]
    return [b.start for b in markdown_blocks(text, parse=False)]


@dataclass(frozen=True)
class Paragraphs(TokenBudgetStrategy):
    """Chunks of whole blocks, packed greedily up to ``max_tokens`` tokens each.

    A block is a paragraph (a run of non-blank lines) or, in Markdown, a heading, a list, a table or
    a code block (:mod:`~latechunk_dagster.core.chunking.structure`). Consecutive blocks are packed
    while the chunk stays within ``max_tokens`` tokens (special and prefix tokens included); a
    heading always goes with the block after it. A block longer than ``max_tokens`` is cut at its
    own places (items, rows, lines; prose at its sentence starts by ``segmenter``, ``language``)
    and those parts are packed into chunks of its own; a part still too long is cut between words.
    Chunks under ``min_tokens`` join a neighbour of their section. Blank lines between blocks go
    with the block before them; leading special tokens join the first chunk, trailing ones the last
    (contract section 2). Each chunk carries the heading path of its start.

    Args:
        max_tokens: the token budget of a chunk (>= 1).
        language, segmenter: the sentence segmenter of the fallback (default ``"sentencex"``).
        min_tokens: see :class:`~latechunk_dagster.core.chunking.base.TokenBudgetStrategy`.

    Raises:
        ValueError: ``max_tokens`` or ``min_tokens`` is not a positive int; unknown segmenter or
            unsupported language.

    Example:
        >>> Paragraphs(max_tokens=128).describe()
        "paragraphs(language='en', max_tokens=128, min_tokens=8, segmenter='sentencex')"
    """

    name: ClassVar[str] = "paragraphs"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        packer = Packer(text, tokens, self.max_tokens, self.smallest, self.language, self.segmenter)
        return packer.spans("blocks", within_sections=False)


__all__ = ["Paragraphs", "line_starts", "paragraph_starts"]
