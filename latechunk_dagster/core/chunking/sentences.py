"""``Sentences``: sentences found by pySBD, packed greedily up to ``max_tokens``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from latechunk_dagster.core.chunking.base import (
    Span,
    TokenBudgetStrategy,
    pack_units,
    spans_from_char_boundaries,
)
from latechunk_dagster.core.tokenization import Tokenization, bom_length


@lru_cache(maxsize=8)
def _segmenter(language: str) -> Any:
    import pysbd

    return pysbd.Segmenter(language=language, clean=False, char_span=True)


def sentence_starts(text: str, language: str = "en", base: int = 0) -> list[int]:
    """Character offsets (into ``text``, plus ``base``) where sentences start.

    Sentence boundaries come from pySBD (rule-based "Golden Rules" segmenter, works
    offline, nothing downloaded). Offsets that pySBD reports out of order are dropped
    so the result is strictly increasing.
    """
    starts: list[int] = []
    for piece in _segmenter(language).segment(text):
        s = base + piece.start
        if not starts or s > starts[-1]:
            starts.append(s)
    return starts


@dataclass(frozen=True)
class Sentences(TokenBudgetStrategy):
    """Chunks of whole sentences, packed greedily up to ``max_tokens`` tokens each.

    A sentence longer than ``max_tokens`` is split at token boundaries. Leading and
    trailing special tokens count toward the first and last chunk (SPEC section 2).

    Example:
        >>> Sentences(max_tokens=64).describe()
        "sentences(language='en', max_tokens=64)"
    """

    name: ClassVar[str] = "sentences"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        skip = bom_length(text)  # a leading BOM is not text: pySBD would split "\ufeffMr." off
        units = spans_from_char_boundaries(tokens, sentence_starts(text[skip:], self.language, base=skip))
        return pack_units(units, self.max_tokens)
