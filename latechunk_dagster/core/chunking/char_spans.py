"""``CharSpans``: caller-given character spans (e.g. from another chunker), mapped to tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span, spans_from_char_boundaries
from latechunk_dagster.core.errors import SpanError
from latechunk_dagster.core.tokenization import Tokenization


def _as_pairs(ranges: Any) -> tuple[tuple[int, int], ...]:
    """``ranges`` as a tuple of ``(start, end)`` int pairs (lists from JSON are accepted)."""
    try:
        pairs = tuple(tuple(p) for p in ranges)
    except TypeError:
        raise ValueError(f"ranges must be a sequence of (start, end) pairs, got {ranges!r}") from None
    for k, p in enumerate(pairs):
        if len(p) != 2 or any(type(x) is not int for x in p):
            raise ValueError(f"range {k} must be a (start, end) pair of ints, got {p!r}")
    return pairs  # type: ignore[return-value]


def _fail(detail: str) -> SpanError:
    # The engine re-raises with the document's real index and id: type(exc)(i, doc_id, exc.detail).
    return SpanError(-1, "?", detail)


@dataclass(frozen=True)
class CharSpans(ChunkingStrategy):
    """One chunk per caller-given character range ``[start, end)`` of the document text.

    The ranges are the field ``ranges`` (the name ``spans`` is taken by the
    :meth:`spans` method every strategy has).

    Offsets are Python ``str`` indices (code points) into the document's own text
    as passed (not the instruction prefix; a leading byte order mark counts as index 0,
    though it is not tokenized, so a span holding only it holds no token). Chunk ``i`` of
    the result belongs to ``ranges[i]``:
    the ranges must be sorted, non-overlapping, non-empty, inside ``[0, len(text)]``,
    each must contain the first character of at least one token, and no span start or
    end may fall strictly inside a token (for a token at ``(s, e)``, no boundary ``b``
    with ``s < b < e``).

    Text that no span covers (gaps) goes to the *following* chunk: the chunk
    boundaries are the ends of all spans but the last, and a token belongs to the chunk
    that holds its first character (contract section 2). So text before the first span
    joins the first chunk and, there being no following chunk, text after the last span
    joins the last chunk. Leading special tokens join the first chunk, trailing ones
    the last.

    The same spans apply to every document the strategy is given: chunk one document
    per call with ``CharSpans`` (the usual case), or use spans that fit every document
    of the call.

    Args:
        ranges: ``((start, end), ...)``; lists (e.g. from JSON) are turned into tuples.

    Raises:
        ValueError: at construction, ``ranges`` is not a sequence of int pairs.
        SpanError: from :meth:`spans`, the spans do not fit the text or its tokens; the
            message names the span and the reason (the engine fills in the document).

    Example:
        >>> CharSpans(ranges=[[0, 5], [6, 11]]).ranges
        ((0, 5), (6, 11))
    """

    name: ClassVar[str] = "char_spans"
    #: what the errors call one range (``"chunk"`` for a document's own chunks, :class:`GivenChunks`)
    unit: ClassVar[str] = "span"
    ranges: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", _as_pairs(self.ranges))

    def check(self, text: str, tokens: Tokenization) -> None:
        """Raise :class:`SpanError` unless the spans fit ``text`` and its ``tokens`` (see the class doc)."""
        pairs = self.ranges
        if not pairs:
            raise _fail("no spans given")
        prev: tuple[int, int] | None = None
        for k, (a, b) in enumerate(pairs):
            if b <= a:
                raise _fail(f"{self.unit} {k} ({a}, {b}) is empty: end must be greater than start")
            if a < 0 or b > len(text):
                raise _fail(f"{self.unit} {k} ({a}, {b}) is out of range: the text has {len(text)} characters")
            if prev is not None and a < prev[0]:
                unit = self.unit
                raise _fail(f"{unit}s are not sorted: {unit} {k} ({a}, {b}) starts before {unit} {k - 1} {prev}")
            if prev is not None and a < prev[1]:
                raise _fail(f"{self.unit} {k} ({a}, {b}) overlaps {self.unit} {k - 1} {prev}")
            prev = (a, b)
        bounds = np.array(sorted({x for p in pairs for x in p}), dtype=np.int64)
        t_starts, t_ends = tokens.offset_arrays()
        src = np.flatnonzero(t_starts >= 0)
        s_src, e_src = t_starts[src], t_ends[src]
        # the first boundary after each sourced token's start: inside the token when it is before its end
        nxt = np.searchsorted(bounds, s_src, side="right")
        inside = nxt < len(bounds)
        inside[inside] = bounds[nxt[inside]] < e_src[inside]
        if inside.any():
            first = int(np.argmax(inside))
            t, s, e, b = int(src[first]), int(s_src[first]), int(e_src[first]), int(bounds[nxt[first]])
            k, side = next((k, side) for k, p in enumerate(pairs) for side, x in zip(("start", "end"), p) if x == b)
            raise _fail(
                f"{self.unit} {k} {pairs[k]}: its {side} {b} falls inside token {t} {text[s:e]!r} at characters "
                f"({s}, {e}); a span boundary must not split a token (use {s} or {e})"
            )
        # the range that holds each sourced token's first character, if any
        range_starts = np.array([a for a, _ in pairs], dtype=np.int64)
        range_ends = np.array([b for _, b in pairs], dtype=np.int64)
        k_of = np.searchsorted(range_starts, s_src, side="right") - 1
        holds = k_of >= 0
        holds[holds] = s_src[holds] < range_ends[k_of[holds]]
        held = np.zeros(len(pairs), dtype=bool)
        held[k_of[holds]] = True
        has_token: list[bool] = held.tolist()
        if not all(has_token):
            k = has_token.index(False)
            raise _fail(
                f"{self.unit} {k} {pairs[k]} holds no token (only {text[pairs[k][0] : pairs[k][1]]!r}); "
                "every span must contain the first character of a token"
            )

    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        self.check(text, tokens)
        return spans_from_char_boundaries(tokens, [b for _, b in self.ranges[:-1]])
