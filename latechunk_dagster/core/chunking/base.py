"""The strategy interface and the contract section 2 rules shared by every strategy.

A strategy turns a document's text and its one :class:`Tokenization` into token
spans that tile ``[0, n_tokens)``. Boundary strategies choose *character*
boundaries on the text and call :func:`spans_from_char_boundaries`, which maps
them to tokens by the contract's rule (a token belongs to the chunk that contains its
first character; tokens without a source range go with their neighbours).

A leading byte order mark (U+FEFF) is not part of a document's text (like Python's
``utf-8-sig``): it is not tokenized, no strategy treats it as text (Markdown headings,
paragraphs and sentences are found on the text after it), and every character offset,
``char_range`` included, still indexes the text as the caller passed it. See
:func:`latechunk_dagster.core.tokenization.bom_length`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from latechunk_dagster.core.chunking.segmenters import DEFAULT_SEGMENTER, check_segmenter
from latechunk_dagster.core.tokenization import Tokenization

#: Default ``min_tokens`` of the token-budget strategies (see :class:`TokenBudgetStrategy`).
MIN_TOKENS = 8


@dataclass(frozen=True)
class Span:
    """A half-open token range ``[start, end)`` of one chunk, plus strategy metadata.

    Attributes:
        start, end: token indices into the document's token ids (``end > start``).
        headings: heading path of the chunk's start (Markdown headings), outermost first; ``()`` before
            the first heading and for text without headings.
        word_cut: the chunk ends inside a word, because one word was longer than the budget
            (:mod:`~latechunk_dagster.core.chunking.words`); not part of equality.
    """

    start: int
    end: int
    headings: tuple[str, ...] = field(default=())
    word_cut: bool = field(default=False, compare=False)

    def __len__(self) -> int:
        return self.end - self.start


class ChunkingStrategy(ABC):
    """Turns one document into token spans that tile its tokens (contract section 2).

    Subclasses are small frozen dataclasses: their fields are the strategy's
    parameters (recorded in lineage via :meth:`params`) and they implement
    :meth:`spans`. The engine never looks inside a strategy.
    """

    name: ClassVar[str]

    @abstractmethod
    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        """Return spans tiling ``[0, len(tokens))`` in order, none empty."""

    def params(self) -> dict[str, Any]:
        """The strategy's parameters, JSON-serializable, for lineage."""
        return asdict(self)  # type: ignore[call-overload]

    def describe(self) -> str:
        """``name(k=v, ...)``: a stable one-line description for lineage columns."""
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params().items()))
        return f"{self.name}({args})"


@dataclass(frozen=True)
class TokenBudgetStrategy(ChunkingStrategy):
    """Base of the boundary strategies that pack text units into chunks of at most ``max_tokens``.

    Attributes:
        max_tokens: the token budget of a chunk (>= 1), special and prefix tokens included.
        language: language code of the sentence segmenter (see
            :data:`~latechunk_dagster.core.chunking.segmenters.SEGMENTER_LANGUAGES`).
        segmenter: ``"sentencex"`` (default, linear-time) or ``"pysbd"``; see
            :mod:`latechunk_dagster.core.chunking.segmenters`.
        min_tokens: a chunk under this many tokens joins a neighbour of its section when the merge
            fits the budget (:mod:`~latechunk_dagster.core.chunking.packing`); at most a quarter of
            ``max_tokens`` applies (:attr:`smallest`). Default 8 (:data:`MIN_TOKENS`): about five
            English words; below that a chunk is a fragment (a lone section number, ``See below.``,
            a closing bracket) whose vector the special tokens weigh as much as its text, and issue 46
            found 232 chunks under 15 characters among 3,590 at 32 tokens.

    Raises:
        ValueError: at construction, ``max_tokens`` or ``min_tokens`` is not a positive int, the
            segmenter is unknown or it does not support ``language`` (the message names the value
            and the supported ones), so a bad run config fails before any engine starts.
    """

    max_tokens: int
    language: str = "en"
    segmenter: str = DEFAULT_SEGMENTER
    min_tokens: int = MIN_TOKENS

    def __post_init__(self) -> None:
        if type(self.max_tokens) is not int or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if type(self.min_tokens) is not int or self.min_tokens < 1:
            raise ValueError(f"min_tokens must be a positive int, got {self.min_tokens!r}")
        if not isinstance(self.language, str) or not isinstance(self.segmenter, str):
            raise ValueError(f"language and segmenter must be str, got {self.language!r}, {self.segmenter!r}")
        check_segmenter(self.segmenter, self.language)

    @property
    def smallest(self) -> int:
        """The minimum chunk length that applies: ``min(min_tokens, max_tokens // 4)``, at least 1."""
        return max(1, min(self.min_tokens, self.max_tokens // 4))

    @abstractmethod
    def budget_spans(self, text: str, tokens: Tokenization) -> list[Span]:
        """Spans cut on the text's structure within the budget (may leave specials alone)."""

    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        return attach_unsourced(self.budget_spans(text, tokens), tokens)


def attach_unsourced(spans: Sequence[Span], tokens: Tokenization) -> list[Span]:
    """Merge a span of only unsourced tokens (specials, prefix) into its neighbour (contract section 2).

    A token budget cut at token boundaries can leave e.g. ``[SEP]`` alone in the last chunk;
    the contract sends leading unsourced tokens to the first text chunk and trailing ones to the
    last, so such a span joins the next span (at the start) or the previous one (elsewhere),
    even if that chunk then exceeds ``max_tokens`` by those tokens.
    """
    # sourced tokens before each position: span [a, b) holds one iff before[b] > before[a]
    before = np.concatenate(([0], np.cumsum(tokens.sourced())))
    bounds = np.fromiter((x for s in spans for x in (s.start, s.end)), dtype=np.int64, count=2 * len(spans))
    holds = (before[bounds[1::2]] > before[bounds[0::2]]).tolist()
    out: list[Span] = []
    pending: Span | None = None
    for s, sourced in zip(spans, holds):
        if pending is not None:
            s = Span(pending.start, s.end, s.headings)
            pending = None
        if sourced:
            out.append(s)
        elif out:
            out[-1] = Span(out[-1].start, s.end, out[-1].headings)
        else:
            pending = s
    if pending is not None:  # no sourced token at all: keep it (tokenization refuses such documents)
        out.append(pending)
    return out


def split_fixed(start: int, end: int, size: int, headings: tuple[str, ...] = ()) -> list[Span]:
    """Cut ``[start, end)`` into pieces of ``size`` tokens; the last keeps what is left."""
    return [Span(s, min(s + size, end), headings) for s in range(start, end, size)]


def chunk_of_each_token(tokens: Tokenization, boundaries: Sequence[int]) -> list[int]:
    """Assign each token to a segment between character boundaries (contract section 2).

    Args:
        boundaries: sorted character offsets where a new segment starts (0 may be omitted).

    Returns:
        ``list[int]`` of length ``n_tokens``: the segment index of each token,
        non-decreasing. A sourced token goes to the segment containing its first
        character; leading unsourced tokens go to the first sourced token's segment,
        trailing ones to the last sourced token's segment, any other to the segment of
        the token before it. (:func:`segment_of_each_token` gives the same as an array.)
    """
    return segment_of_each_token(tokens, boundaries).tolist()


def segment_of_each_token(tokens: Tokenization, boundaries: Sequence[int]) -> np.ndarray:
    """:func:`chunk_of_each_token` as an int64 ``[n_tokens]`` array (no Python object per token)."""
    return segment_of_starts(tokens.offset_arrays()[0], boundaries)


def segment_of_starts(starts: np.ndarray, boundaries: Sequence[int]) -> np.ndarray:
    """:func:`segment_of_each_token` of tokens given by their start offsets (int ``[n]``, -1: no source);
    a slice of a document's starts maps as that run of tokens alone (it must hold a sourced token)."""
    sourced = np.flatnonzero(starts >= 0)
    # segment of each sourced token: bisect_right(boundaries, start), all at once
    seg = np.searchsorted(np.asarray(boundaries, dtype=np.int64), starts[sourced], side="right")
    # each token takes the segment of the last sourced token at or before it (the first one if none)
    last = np.full(len(starts), -1, dtype=np.int64)
    last[sourced] = np.arange(len(sourced))
    last = np.maximum.accumulate(last)
    return seg[np.maximum(last, 0)]


def spans_from_segments(
    segment_of_token: Sequence[int] | np.ndarray, headings: Sequence[tuple[str, ...]] | None = None
) -> list[Span]:
    """Group consecutive tokens of the same segment into spans (segments without tokens vanish).

    Args:
        segment_of_token: the segment index of each token (``list[int]`` or an int ``[n_tokens]`` array).
        headings: the heading path of each segment, when the spans carry one.
    """
    seg = np.asarray(segment_of_token)
    cuts = np.concatenate(([0], np.flatnonzero(seg[1:] != seg[:-1]) + 1, [len(seg)])).tolist()
    if headings is None:
        return [Span(a, b) for a, b in zip(cuts, cuts[1:])]
    firsts = seg[cuts[:-1]].tolist()
    return [Span(a, b, headings[k]) for a, b, k in zip(cuts, cuts[1:], firsts)]


def spans_from_char_boundaries(tokens: Tokenization, boundaries: Sequence[int]) -> list[Span]:
    """Token spans of the text segments that start at ``boundaries`` (see :func:`chunk_of_each_token`)."""
    return spans_from_segments(segment_of_each_token(tokens, sorted(boundaries)))


def check_tiling(spans: Sequence[Span], n_tokens: int) -> None:
    """Raise ``AssertionError`` unless ``spans`` tile ``[0, n_tokens)`` in order with none empty."""
    pos = 0
    for s in spans:
        if s.start != pos or s.end <= s.start:
            raise AssertionError(f"spans do not tile the tokens at {s} (expected start {pos})")
        pos = s.end
    if pos != n_tokens:
        raise AssertionError(f"spans end at {pos}, document has {n_tokens} tokens")
