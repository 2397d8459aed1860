"""Where the mean happens: span means of contextual token states (SPEC section 3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.chunking.base import Span


def mean_pool_spans(states: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Mean of the token states inside each span, accumulated in float64.

    Args:
        states: token states of one document, shape ``[n_tokens, dim]``, any float dtype
            (float32, float16; bfloat16 arrives from torch as float32 rows).
        spans: spans tiling ``[0, n_tokens)``.

    Returns:
        ``np.ndarray`` float32, shape ``[n_spans, dim]``. Every token of a span counts
        once, special tokens included.

    The sum is taken in float64 (SPEC section 3 asks for float32 or wider) so that a
    long chunk of bf16/fp16 states loses no bits to accumulation; only the result is
    rounded to float32.
    """
    # shape: [n_tokens, dim]
    wide = np.asarray(states, dtype=np.float64)
    starts = np.fromiter((s.start for s in spans), dtype=np.int64, count=len(spans))
    lengths = np.fromiter((len(s) for s in spans), dtype=np.float64, count=len(spans))
    # shape: [n_spans, dim]
    sums = np.add.reduceat(wide, starts, axis=0)
    return (sums / lengths[:, None]).astype(np.float32)
