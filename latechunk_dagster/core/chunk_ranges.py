"""A chunk's character range and text from its token span (contract section 2)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.results import Chunk
from latechunk_dagster.core.tokenization import (
    Tokenization,
)


def chunks_from_spans(text: str, tokens: Tokenization, spans: Sequence[Span]) -> list[Chunk]:
    """Chunks with char ranges (contract section 2), one per span, in order.

    ``char_range`` = ``(min start, max end)`` over the span's sourced tokens, ``None`` when it has
    none. Characters that produced no token and are not whitespace (combining marks the
    normalizer removed, U+200F, soft hyphens) belong to the chunk of the character before them:
    ``char_end`` extends over them up to the next whitespace or the next sourced token's start,
    so no visible character falls between two chunks. Where tokens' offsets overlap (XLM-R's
    SentencePiece gives a lone ``▁`` the range of the character after it, which the next token also
    has), a chunk ends where the next one begins, so no character is in two chunks; a chunk left
    with no character of its own has ``None``. ``text`` = ``text[char_start:char_end]``.
    """
    if not spans:
        return []
    starts, ends = tokens.offset_arrays()
    # [start_0, end_0, start_1, end_1, ...]: reduceat's even segments are the spans (odd ones unused);
    # one padding element lets an end equal n_tokens
    at = np.fromiter((x for s in spans for x in (s.start, s.end)), dtype=np.int64, count=2 * len(spans))
    # per span: smallest sourced start, largest end (unsourced tokens: start len(text), end -1; spans are never empty)
    sourced_starts = np.where(starts >= 0, starts, len(text))
    lo = np.minimum.reduceat(np.append(sourced_starts, 0), at)[0::2].tolist()
    hi = np.maximum.reduceat(np.append(ends, -1), at)[0::2].tolist()
    # next_start[t]: smallest sourced start of the tokens t.. (len(text) when none): where a chunk
    # ending before token t must stop extending
    next_start = np.append(np.minimum.accumulate(sourced_starts[::-1])[::-1], len(text)).tolist()
    out: list[Chunk] = []
    for i, (s, a, b) in enumerate(zip(spans, lo, hi)):
        if i + 1 < len(spans) and b > lo[i + 1]:  # overlapping offsets: end where the next chunk begins
            b = lo[i + 1]
        if b > a:
            stop = max(b, next_start[s.end])
            b = _NOT_SPACE.match(text, b, stop).end()  # type: ignore[union-attr]  # \S* always matches
            out.append(Chunk(i, (s.start, s.end), (a, b), text[a:b], s.headings, s.word_cut))
        else:
            out.append(Chunk(i, (s.start, s.end), None, None, s.headings, s.word_cut))
    return out


#: A run of non-whitespace characters (``str.isspace`` whitespace, as ``re`` defines ``\s`` for str).
_NOT_SPACE = re.compile(r"\S*")
