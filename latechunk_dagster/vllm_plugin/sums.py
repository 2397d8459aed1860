"""The span-sum kernel in host memory: one home for the host's span path
(:mod:`latechunk_dagster.core.pooling`, re-exported there) and the plugin's CPU sums
(:func:`latechunk_dagster.vllm_plugin.span_sum_pairs` of rows in host memory).

Imports only numpy, so loading it in a vLLM process imports nothing of ``latechunk_dagster.core``.
"""

from __future__ import annotations

import numpy as np


def sum_pairs(sums: np.ndarray) -> np.ndarray:
    """Float64 sums as float32 pairs ``[hi | lo]``, ``[n, 2 * dim]``: ``hi = float32(sum)``,
    ``lo = float32(sum - hi)``; ``hi + lo`` in float64 is the sum to ~3.5e-15 relative. What the
    engine's span path returns (float32 crosses the engine boundary, the hostpool's shared memory
    and HTTP unchanged).

    Args:
        sums: float64 ``[n, dim]``.
    """
    hi = sums.astype(np.float32)
    lo = (sums - hi).astype(np.float32)
    return np.concatenate([hi, lo], axis=1)


def piece_sums(states: np.ndarray, pieces: np.ndarray) -> np.ndarray:
    """The span path computed from token states in host memory (an engine without the span plugin,
    and the plugin's rows on the CPU engine): numpy's float64 reduce per piece, on one thread.

    Args:
        states: one window's rows, ``[n_rows, dim]``, any float dtype. Not copied.
        pieces: int ``[n, 2+]``, half-open row ranges first (checked by the caller).

    Returns:
        float32 ``[n, 2 * dim]`` (:func:`sum_pairs` of float64 sums).
    """
    sums = np.empty((len(pieces), states.shape[1]), dtype=np.float64)
    for k, (a, b) in enumerate(pieces[:, :2].tolist()):
        np.add.reduce(states[a:b], axis=0, dtype=np.float64, out=sums[k])
    return sum_pairs(sums)
