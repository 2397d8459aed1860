"""Where the mean happens: span means of contextual token states (contract section 3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.chunking.base import Span

#: Tokens per float64 block of :func:`mean_pool_spans`: bounds its temporary memory to
#: ``BLOCK_TOKENS * dim * 8`` bytes (12 MiB at dim 384) whatever the document length.
BLOCK_TOKENS = 4096


def mean_pool_spans(states: np.ndarray, spans: Sequence[Span], block_tokens: int = BLOCK_TOKENS) -> np.ndarray:
    """Mean of the token states inside each span, accumulated in float64.

    Args:
        states: token states of one document, shape ``[n_tokens, dim]``, any float dtype
            (float32, float16; bfloat16 arrives from torch as float32 rows). Not copied whole.
        spans: spans tiling ``[0, n_tokens)`` in order.
        block_tokens: consecutive spans are summed together in blocks of at most this many
            tokens (a span longer than that in pieces of it).

    Returns:
        ``np.ndarray`` float32, shape ``[n_spans, dim]``. Every token of a span counts
        once, special tokens included.

    The sums are taken in float64 (contract section 3 asks for float32 or wider) so that a
    long chunk of bf16/fp16 states loses no bits to accumulation; only the result is
    rounded to float32. Each block of spans is cast to float64 and summed with one
    ``np.add.reduceat`` (measured faster than ``reduceat(..., dtype=float64)`` on float32
    input, which casts the whole input too, or than a per-span ``sum(dtype=float64)``), so
    the float64 copy never exceeds ``block_tokens`` rows.
    """
    n = len(spans)
    starts = np.fromiter((s.start for s in spans), dtype=np.int64, count=n)
    ends = np.fromiter((s.end for s in spans), dtype=np.int64, count=n)
    # shape: [n_spans, dim]
    sums = np.empty((n, states.shape[1]), dtype=np.float64)
    i = 0
    while i < n:
        j = max(int(np.searchsorted(ends, starts[i] + block_tokens, side="right")), i + 1)
        lo, hi = int(starts[i]), int(ends[j - 1])
        if hi - lo <= block_tokens:
            block = np.asarray(states[lo:hi], dtype=np.float64)
            sums[i:j] = np.add.reduceat(block, starts[i:j] - lo, axis=0)
        else:  # one span longer than a block: sum it in pieces
            acc = np.zeros(states.shape[1], dtype=np.float64)
            for b in range(lo, hi, block_tokens):
                acc += np.asarray(states[b : min(b + block_tokens, hi)], dtype=np.float64).sum(axis=0)
            sums[i] = acc
        i = j
    return (sums / (ends - starts)[:, None]).astype(np.float32)
