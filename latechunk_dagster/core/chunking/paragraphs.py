"""``Paragraphs``: blank-line separated paragraphs, packed greedily up to ``max_tokens``.

A paragraph longer than the budget is cut at its sentence starts (the sentence segmenter) and its
sentences are packed; a sentence still too long is cut at token boundaries. Every
character boundary is mapped to tokens by the contract section 2 rule through the
helpers of :mod:`latechunk_dagster.core.chunking.base`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from latechunk_dagster.core.chunking.base import (
    Span,
    TokenBudgetStrategy,
    pack_units,
    segment_of_each_token,
    spans_from_segments,
)
from latechunk_dagster.core.chunking.segmenters import DEFAULT_SEGMENTER, sentence_starts
from latechunk_dagster.core.tokenization import Tokenization, bom_length

#: Line breaks, as CommonMark (and markdown-it) count them: ``\r\n``, ``\r`` or ``\n``.
#: ``str.splitlines`` also breaks at ``\x0b``, ``\x0c``, ``\x1c``-``\x1e``, ``\x85``,
#: ``\u2028`` and ``\u2029``, which would shift line numbers against markdown-it's.
_NEWLINE = re.compile(r"\r\n?|\n")


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


def paragraph_starts(text: str, base: int = 0) -> list[int]:
    """Character offsets (into ``text``, plus ``base``) where paragraphs start.

    A paragraph is a run of non-blank lines; a blank line is one that holds only
    whitespace (``str.isspace``) or nothing. A paragraph starts at the beginning of
    its first line (so leading indentation belongs to it); the blank lines after a
    paragraph belong to that paragraph's character region. The result is strictly
    increasing and empty when ``text`` has no non-blank line. When ``base`` is 0 (``text``
    starts the document) a leading byte order mark is not text: a line holding only it is blank.

    Example:
        >>> paragraph_starts("One.\\n\\n  Two\\nlines.\\n \\nThree.")
        [0, 6, 21]
    """
    starts: list[int] = []
    bounds = line_starts(text)
    skip = bom_length(text) if base == 0 else 0
    prev_blank = True
    for a, b in zip(bounds, bounds[1:]):
        blank = not text[max(a, skip) : b].strip()
        if prev_blank and not blank:
            starts.append(base + a)
        prev_blank = blank
    return starts


def _slice(tokens: Tokenization, lo: int, hi: int) -> Tokenization:
    """Tokens ``[lo, hi)`` as a tokenization of their own (it must hold a sourced token)."""
    return tokens.slice(lo, hi)


def cut_at_chars(
    tokens: Tokenization, lo: int, hi: int, boundaries: Sequence[int], headings: tuple[str, ...]
) -> list[tuple[Span, int]]:
    """Cut tokens ``[lo, hi)`` at character ``boundaries`` by the contract's rule; each span with its segment index.

    Segment ``j`` is the text from ``boundaries[j - 1]`` (or the region start) up to
    ``boundaries[j]`` (or the region end). Tokens ``[lo, hi)`` must hold a sourced token
    and, taken alone, map the same way as in the whole document: true for any span
    produced by the contract's rule (its unsourced tokens follow a sourced one in it, or lead
    the document).
    """
    seg = segment_of_each_token(_slice(tokens, lo, hi), boundaries)
    spans = spans_from_segments(seg)
    firsts = seg[[s.start for s in spans]].tolist()
    return [(Span(lo + s.start, lo + s.end, headings), j) for s, j in zip(spans, firsts)]


def segment_region(boundaries: Sequence[int], j: int, start: int, end: int) -> tuple[int, int]:
    """Character range of segment ``j`` of the region ``[start, end)`` cut at ``boundaries``."""
    return (boundaries[j - 1] if j > 0 else start, boundaries[j] if j < len(boundaries) else end)


def pack_paragraphs(
    text: str,
    tokens: Tokenization,
    span: Span,
    region: tuple[int, int],
    max_tokens: int,
    extra_starts: Iterable[int] = (),
    language: str = "en",
    segmenter: str = DEFAULT_SEGMENTER,
) -> list[Span]:
    """Chunk the tokens of ``span`` (covering characters ``region`` of ``text``) by paragraphs.

    Paragraphs (see :func:`paragraph_starts`, plus any ``extra_starts``) are packed
    greedily up to ``max_tokens`` tokens. A paragraph longer than that is cut at its
    sentence starts and its sentences are packed on their own (its pieces are never
    merged with neighbouring paragraphs); a sentence still too long is cut into
    ``max_tokens``-token pieces. Every returned span carries ``span.headings``.

    Args:
        span: tokens to chunk; they must hold a sourced token (any span made by the contract's rule does).
        region: ``(start, end)`` characters of ``text`` whose tokens are ``span`` (by first character).
        max_tokens: token budget of a chunk (>= 1).
        extra_starts: more paragraph starts (character offsets), e.g. the line after a heading.
        language, segmenter: the sentence segmenter of the fallback (see
            :mod:`latechunk_dagster.core.chunking.segmenters`).

    Returns:
        Spans tiling ``[span.start, span.end)`` in order, none longer than ``max_tokens``.
    """
    if len(span) <= max_tokens:
        return [span]
    a, b = region
    starts = sorted(set(paragraph_starts(text[a:b], base=a)).union(s for s in extra_starts if a < s < b))
    out: list[Span] = []
    run: list[Span] = []
    for unit, j in cut_at_chars(tokens, span.start, span.end, starts, span.headings):
        if len(unit) <= max_tokens:
            run.append(unit)
            continue
        out.extend(pack_units(run, max_tokens))
        run = []
        pa, pb = segment_region(starts, j, a, b)
        pa = max(pa, bom_length(text))  # a leading BOM is not text (pySBD would split "\ufeffMr." off)
        sent_starts = sentence_starts(text[pa:pb], language, base=pa, segmenter=segmenter)
        sents = cut_at_chars(tokens, unit.start, unit.end, sent_starts, span.headings)
        out.extend(pack_units([s for s, _ in sents], max_tokens))
    out.extend(pack_units(run, max_tokens))
    return out


@dataclass(frozen=True)
class Paragraphs(TokenBudgetStrategy):
    """Chunks of whole paragraphs, packed greedily up to ``max_tokens`` tokens each.

    Paragraphs are separated by blank lines (lines holding only whitespace; line
    ends are ``\\r\\n``, ``\\r`` or ``\\n``). Consecutive paragraphs are packed while the
    chunk stays within ``max_tokens`` tokens (special and prefix tokens included). A
    paragraph longer than ``max_tokens`` is cut at its sentence starts (``segmenter``,
    ``language``) and its sentences are packed into chunks of its own; a sentence
    still too long is cut at token boundaries. Blank lines between paragraphs go with
    the paragraph before them; leading special tokens join the first chunk, trailing
    ones the last (contract section 2).

    Args:
        max_tokens: the token budget of a chunk (>= 1).
        language, segmenter: the sentence segmenter of the fallback (default ``"sentencex"``).

    Raises:
        ValueError: ``max_tokens`` is not a positive int; unknown segmenter or unsupported language.

    Example:
        >>> Paragraphs(max_tokens=128).describe()
        "paragraphs(language='en', max_tokens=128, segmenter='sentencex')"
    """

    name: ClassVar[str] = "paragraphs"

    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        return pack_paragraphs(
            text,
            tokens,
            Span(0, len(tokens)),
            (0, len(text)),
            self.max_tokens,
            language=self.language,
            segmenter=self.segmenter,
        )
