"""``Sentences``: sentences found by the sentence segmenter, packed greedily up to ``max_tokens``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from latechunk_dagster.core.chunking.base import (
    Span,
    TokenBudgetStrategy,
    pack_units,
    spans_from_char_boundaries,
)
from latechunk_dagster.core.chunking.segmenters import sentence_starts
from latechunk_dagster.core.tokenization import Tokenization, bom_length


@dataclass(frozen=True)
class Sentences(TokenBudgetStrategy):
    """Chunks of whole sentences, packed greedily up to ``max_tokens`` tokens each.

    Sentence starts come from ``segmenter`` (default ``"sentencex"``, linear-time; ``"pysbd"``
    selectable), see :mod:`latechunk_dagster.core.chunking.segmenters`. A sentence longer
    than ``max_tokens`` is split at token boundaries. Leading and trailing special tokens
    count toward the first and last chunk (contract section 2).

    Raises:
        ValueError: at construction, bad ``max_tokens``, unknown ``segmenter`` or a
            ``language`` it does not support (e.g. ``language='pt'`` with ``segmenter='pysbd'``).

    Example:
        >>> Sentences(max_tokens=64).describe()
        "sentences(language='en', max_tokens=64, segmenter='sentencex')"
    """

    name: ClassVar[str] = "sentences"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        skip = bom_length(text)  # a leading BOM is not text: pySBD would split "\ufeffMr." off
        starts = sentence_starts(text[skip:], self.language, base=skip, segmenter=self.segmenter)
        units = spans_from_char_boundaries(tokens, starts)
        return pack_units(units, self.max_tokens)


__all__ = ["Sentences", "sentence_starts"]
