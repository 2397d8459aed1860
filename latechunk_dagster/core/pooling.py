"""Where the mean happens: span means of contextual token states (contract section 3).

Each span's sum is one numpy reduction of the span's rows with a float64 accumulator
(``np.add.reduce(rows, axis=0, dtype=float64)``): numpy casts the float32 rows through its
small internal buffer (no float64 copy of the states) and adds them in float64, so the error of
a sum stays ~1e-16 relative whatever the span length or the states' norms. Measured
(``bench/host_stages.py``) 3-4x faster than the former blocked ``np.add.reduceat`` (numpy's
``reduceat`` along the token axis has a slow inner loop) and than float32 BLAS with a 0/1 span
matrix, which would also accumulate in float32.

Windowed documents (contract section 5) are pooled straight from their windows' rows:
:func:`window_pieces` says which rows of which window each span takes (from
:meth:`~latechunk_dagster.core.windows.WindowPlan.segments`), so a span is summed piece by piece
from those rows and the document's states are never gathered into a copy.

**Two paths, one mean.** On the token-state path the host sums each piece (:func:`span_means`).
On the span path (``engine_path="spans"``) the engine sums the same pieces where the states are
(:mod:`latechunk_dagster.vllm_plugin`, float64, returned as float32 pairs: :func:`sum_pairs`)
and the host only adds a windowed span's pieces and divides (:func:`means_from_pair_sums`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.windows import WindowPlan

# The span-sum kernel's one home is a numpy-only leaf that the vLLM plugin shares without importing
# the core; re-exported here, where the host's span path has always found it.
from latechunk_dagster.vllm_plugin.sums import piece_sums, sum_pairs

__all__ = [
    "mean_pool_spans",
    "means_from_pair_sums",
    "piece_sums",
    "span_means",
    "span_sums",
    "sum_pairs",
    "sums_from_pair_sums",
    "window_pieces",
    "window_span_sums",
]


def span_sums(states: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Float64 sums of the token states inside each span.

    Args:
        states: token states of one document, ``[n_tokens, dim]``, any float dtype (float32,
            float16; bfloat16 arrives from torch as float32 rows). Not copied.
        spans: spans tiling ``[0, n_tokens)`` in order (or, for :meth:`LateChunker.embed_queries`,
            one span that starts after the prompt).

    Returns:
        float64 ``[n_spans, dim]``.
    """
    sums = np.empty((len(spans), states.shape[1]), dtype=np.float64)
    for k, s in enumerate(spans):
        np.add.reduce(states[s.start : s.end], axis=0, dtype=np.float64, out=sums[k])
    return sums


def span_means(rows: Sequence[np.ndarray], plan: WindowPlan, spans: Sequence[Span]) -> np.ndarray:
    """Float64 means of each span's token states, read from the document's window rows.

    Args:
        rows: the rows of each window of ``plan``, ``[len(window), dim]``, in order.
        plan: the document's :class:`WindowPlan` (one window, or several, contract section 5).
        spans: spans tiling ``[0, n_tokens)`` in order (see :func:`span_sums`).

    Returns:
        float64 ``[n_spans, dim]``: equal (to float64 rounding) to the means of
        ``plan.gather(rows)`` over the spans, without building that copy.
    """
    return window_span_sums(rows, plan, spans) / _lengths(spans)[:, None]


def window_span_sums(rows: Sequence[np.ndarray], plan: WindowPlan, spans: Sequence[Span]) -> np.ndarray:
    """Float64 sums of each span's token states, read from the document's window rows (the sums of
    :func:`span_means`; arguments as there). Returns float64 ``[n_spans, dim]``."""
    if plan.source is None:
        return span_sums(rows[0], spans)
    sums = np.zeros((len(spans), rows[0].shape[1]), dtype=np.float64)
    for window, pieces in zip(rows, window_pieces(plan, spans)):
        for a, b, k in pieces.tolist():
            sums[k] += np.add.reduce(window[a:b], axis=0, dtype=np.float64)
    return sums


def _lengths(spans: Sequence[Span]) -> np.ndarray:
    return np.fromiter((s.end - s.start for s in spans), dtype=np.float64, count=len(spans))


def mean_pool_spans(states: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Mean of the token states inside each span, accumulated in float64.

    Args:
        states: token states of one document, shape ``[n_tokens, dim]``, any float dtype. Not copied.
        spans: spans tiling ``[0, n_tokens)`` in order.

    Returns:
        ``np.ndarray`` float32, shape ``[n_spans, dim]``. Every token of a span counts
        once, special tokens included.

    The sums are taken in float64 (contract section 3 asks for float32 or wider) so that a long
    chunk of bf16/fp16 states loses no bits to accumulation; only the result is rounded to float32.
    """
    return span_means([states], WindowPlan([], None), spans).astype(np.float32)


# -- the span path: span sums computed where the states are (latechunk_dagster.vllm_plugin) -----


def window_pieces(plan: WindowPlan, spans: Sequence[Span]) -> list[np.ndarray]:
    """What each window of ``plan`` sums for ``spans``: the pieces of every span that the window owns.

    Args:
        plan: the document's :class:`WindowPlan`.
        spans: spans tiling ``[0, n_tokens)`` in order (or starting after the prompt, see
            :meth:`LateChunker.pooled_spans`).

    Returns:
        One int64 ``[n_pieces, 3]`` per window: ``(row start, row end, span index)`` per piece, rows
        of that window, sorted by row. A span inside one window is one piece; a span across windows
        is one piece per window, whose sums :func:`means_from_pair_sums` adds.
    """
    pieces: list[list[tuple[int, int, int]]] = [[] for _ in plan.windows] or [[]]
    segments = plan.segments().tolist()  # [doc_start, doc_end, window, row_start] per run
    seg = 0
    for k, s in enumerate(spans):
        while segments[seg][1] <= s.start:
            seg += 1
        j = seg
        while j < len(segments) and segments[j][0] < s.end:
            a, b, w, r = segments[j]
            lo, hi = max(a, s.start), min(b, s.end)
            if hi > lo:
                pieces[w].append((r + lo - a, r + hi - a, k))
            j += 1
    return [np.array(sorted(p), dtype=np.int64).reshape(-1, 3) for p in pieces]


def means_from_pair_sums(
    pairs: Sequence[np.ndarray], pieces: Sequence[np.ndarray], spans: Sequence[Span]
) -> np.ndarray:
    """Float64 span means from the engine's piece sums (the span path of :func:`span_means`).

    Args:
        pairs: float32 ``[n_pieces, 2 * dim]`` per window (:func:`sum_pairs`), in the order of
            ``pieces``. pieces: :func:`window_pieces` of the document. spans: as given to it.

    Returns:
        float64 ``[n_spans, dim]``: each span's pieces added in float64, divided by its length.
    """
    return sums_from_pair_sums(pairs, pieces, len(spans)) / _lengths(spans)[:, None]


def sums_from_pair_sums(pairs: Sequence[np.ndarray], pieces: Sequence[np.ndarray], n_spans: int) -> np.ndarray:
    """Float64 span sums from the engine's piece sums (the sums of :func:`means_from_pair_sums`;
    arguments as there). Returns float64 ``[n_spans, dim]``."""
    dim = pairs[0].shape[1] // 2
    sums = np.zeros((n_spans, dim), dtype=np.float64)
    for rows, p in zip(pairs, pieces):
        if len(p):
            np.add.at(sums, p[:, 2], rows[:, :dim].astype(np.float64) + rows[:, dim:])
    return sums
