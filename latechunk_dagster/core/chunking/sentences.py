"""``Sentences``: sentences found by the sentence segmenter, packed greedily up to ``max_tokens``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from latechunk_dagster.core.chunking.base import Span, TokenBudgetStrategy
from latechunk_dagster.core.chunking.packing import Packer
from latechunk_dagster.core.chunking.segmenters import sentence_starts
from latechunk_dagster.core.tokenization import Tokenization


@dataclass(frozen=True)
class Sentences(TokenBudgetStrategy):
    """Chunks of whole sentences, packed greedily up to ``max_tokens`` tokens each.

    Sentence starts come from ``segmenter`` (default ``"sentencex"``, linear-time; ``"pysbd"``
    selectable), see :mod:`latechunk_dagster.core.chunking.segmenters`, in the document's prose; its
    Markdown structure is kept as :mod:`~latechunk_dagster.core.chunking.packing` says (a heading goes
    with the text after it, a code block, a table and a list item are units of their own). A unit
    longer than ``max_tokens`` is cut between lines, rows or sentences, then between words
    (:mod:`~latechunk_dagster.core.chunking.words`); chunks under ``min_tokens`` join a neighbour of
    their section. Chunks may span sections; each carries the heading path of its start. Leading and
    trailing special tokens count toward the first and last chunk (contract section 2).

    Raises:
        ValueError: at construction, bad ``max_tokens`` or ``min_tokens``, unknown ``segmenter`` or a
            ``language`` it does not support (e.g. ``language='pt'`` with ``segmenter='pysbd'``).

    Example:
        >>> Sentences(max_tokens=64).describe()
        "sentences(language='en', max_tokens=64, min_tokens=8, segmenter='sentencex')"
    """

    name: ClassVar[str] = "sentences"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        packer = Packer(text, tokens, self.max_tokens, self.smallest, self.language, self.segmenter)
        return packer.spans("sentences", within_sections=False)


__all__ = ["Sentences", "sentence_starts"]
