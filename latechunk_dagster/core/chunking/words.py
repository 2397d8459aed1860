"""Cutting a unit longer than the budget between words, never inside one unless a word exceeds it (issue 46).

A cut falls between two tokens, at the first character of the second. Each such place gets a rank
from the two characters around it:

- 3, a space: either character is whitespace;
- 2, between words: after punctuation or a symbol (``uid/|gid``, ``String::|from``), or next to a
  letter of a script written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan), where
  every grapheme-cluster boundary is a word boundary for us;
- 1, inside a word (``li|bffi``, ``안녕하세|요``), or before punctuation that ends a word (``word|.``);
- 0, inside a grapheme cluster: before a combining mark or a format character, or after a ZWJ.

A unit over the budget is cut at the last place of rank 2 or 3 that keeps the piece within the budget,
preferring a space when one keeps at least half the budget; at rank 1 only when the piece has no
word boundary (one word longer than the budget), at rank 0 only when it has none at all. Those last
two are the cuts inside a word that :attr:`Span.word_cut <latechunk_dagster.core.chunking.base.Span>`
marks and the partition summary counts.
"""

from __future__ import annotations

import unicodedata
from functools import cache

import numpy as np

from latechunk_dagster.core.chunking.base import Span

_SPACE, _PUNCT, _WORD, _NOSPACE, _EXTEND = 0, 1, 2, 3, 4

#: Blocks of scripts written without spaces between words (code point ranges, inclusive).
_NOSPACE_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def _classify(cp: int) -> int:
    ch = chr(cp)
    if ch.isspace():
        return _SPACE
    cat = unicodedata.category(ch)
    if cat[0] == "M" or cat == "Cf":
        return _EXTEND
    if cat[0] in "LN" or ch == "_":
        return _NOSPACE if any(a <= cp <= b for a, b in _NOSPACE_RANGES) else _WORD
    return _PUNCT


@cache
def _bmp_classes() -> np.ndarray:
    """The class of every code point of the Basic Multilingual Plane (uint8 ``[65536]``), built once (~50 ms)."""
    return np.fromiter((_classify(cp) for cp in range(0x10000)), dtype=np.uint8, count=0x10000)


def _classes(cps: np.ndarray) -> np.ndarray:
    table = _bmp_classes()
    out = table[np.minimum(cps, 0xFFFF)]
    for k in np.flatnonzero(cps > 0xFFFF).tolist():
        out[k] = _classify(int(cps[k]))
    return out


def cut_ranks(text: str, at: np.ndarray) -> np.ndarray:
    """The rank (module docstring) of a cut before each character offset in ``at`` (int ``[k]``).

    Offsets ``<= 0`` or ``>= len(text)`` (no character on one side) rank 3; negative ones (tokens
    without a source range) rank -1: never a cut of choice.
    """
    return token_features(text, at)[0]


def token_features(text: str, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For tokens starting at character ``starts`` (int ``[n]``, -1: no source): the rank of a cut before
    each (int8 ``[n]``, see :func:`cut_ranks`) and whether each starts with a letter or a digit (bool ``[n]``)."""
    inside = (starts > 0) & (starts < len(text))
    ranks = np.full(len(starts), 3, dtype=np.int8)
    ranks[starts < 0] = -1
    wordlike = np.zeros(len(starts), dtype=bool)
    sourced = np.flatnonzero((starts >= 0) & (starts < len(text)))
    if not len(sourced):
        return ranks, wordlike
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    first = _classes(cps[starts[sourced]])
    wordlike[sourced] = ((first == _WORD) & (cps[starts[sourced]] != 0x5F)) | (first == _NOSPACE)  # not "_"
    idx = np.flatnonzero(inside)
    pos = starts[idx]
    before, after = _classes(cps[pos - 1]), _classes(cps[pos])
    r = np.ones(len(idx), dtype=np.int8)
    r[(before == _PUNCT) | (before == _NOSPACE) | (after == _NOSPACE)] = 2
    r[(before == _SPACE) | (after == _SPACE)] = 3
    r[(after == _EXTEND) | (cps[pos - 1] == 0x200D)] = 0
    ranks[idx] = r
    return ranks, wordlike


def split_at_words(ranks: np.ndarray, span: Span, max_tokens: int, first: int = 0) -> list[Span]:
    """Cut ``span`` (longer than ``max_tokens``) into pieces of at most ``max_tokens`` tokens between words.

    Args:
        ranks: the rank of a cut before each token of the document (int ``[n_tokens]``, :func:`token_features`).
        span: the tokens to cut; every piece keeps its ``headings``.
        max_tokens: the budget (>= 1).
        first: no cut before token ``first`` (the first token after the heading lines a unit starts
            with: a heading is never cut, nor left alone at a chunk's end); the first piece then runs
            to the first place past it, over the budget where the headings fill it.

    Returns:
        Spans tiling ``[span.start, span.end)``; a piece that ends inside a word (module docstring)
        has ``word_cut=True``.
    """
    r = ranks[span.start : span.end].tolist()  # positions below are relative to span.start
    half, floor = max(1, max_tokens // 2), first - span.start + 1
    out: list[Span] = []
    pos, end = 0, len(r)
    while end - pos > max_tokens:
        cut, in_word = _best_cut(r, max(pos + 1, floor), pos + max_tokens, pos + half)
        if cut < 0:  # nothing allowed within the budget: the first allowed place after it
            cut, in_word = _first_cut(r, max(pos + max_tokens + 1, floor), end)
            if cut < 0:
                break
        out.append(Span(span.start + pos, span.start + cut, span.headings, in_word))
        pos = cut
    out.append(Span(span.start + pos, span.end, span.headings))
    return out


def _best_cut(ranks: list[int], lo: int, hi: int, half: int) -> tuple[int, bool]:
    """The cut in ``[lo, hi]`` to take (module docstring), and whether it is inside a word; -1 if none."""
    best = [-1, -1, -1, -1]  # the last place of each rank
    for c in range(hi, lo - 1, -1):
        r = ranks[c]
        if r == 3 and c >= half:
            return c, False
        if r >= 0 and best[r] < 0:
            best[r] = c
    if best[3] >= 0 or best[2] >= 0:
        return max(best[3], best[2]), False
    return (best[1], True) if best[1] >= 0 else (best[0], True)


def _first_cut(ranks: list[int], lo: int, end: int) -> tuple[int, bool]:
    """The first cut of rank 2 or 3 in ``[lo, end)`` (else of rank 0 or 1, inside a word); -1 if none."""
    inside = -1
    for c in range(lo, end):
        if ranks[c] >= 2:
            return c, False
        if ranks[c] >= 0 and inside < 0:
            inside = c
    return inside, inside >= 0
