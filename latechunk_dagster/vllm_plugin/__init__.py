"""Span sums inside vLLM: the token states stay in the engine, only each span's sum leaves it.

A vLLM plugin (entry point ``vllm.general_plugins`` -> :func:`register`, loaded by every vLLM
process: the in-process engine, a ``vllm serve`` engine core, its workers). It extends vLLM's
token-embedding pooler (``TokenPooler``, the ``token_embed`` task) with one optional request field:

* a request whose ``PoolingParams.extra_kwargs`` holds :data:`SPANS_KEY` (a flat list
  ``[start_0, end_0, start_1, end_1, ...]`` of half-open row ranges of that prompt) gets, instead of
  its ``[n_tokens, dim]`` token rows, a float32 ``[n_spans, 2 * dim + 1]`` array per request:
  ``[:, :dim]`` the float64 sum of each range's rows rounded to float32 (``hi``), ``[:, dim:2*dim]``
  what that rounding lost (``lo = float32(sum - hi)``), ``[:, -1]`` the range's row count. ``hi + lo``
  in float64 is the float64 sum to ~3.5e-15 relative (a float32 pair, since the pooler output
  crosses to the host and over HTTP as float32).
* every other request is answered exactly as before: the plugin is inert unless a request asks.

The rows summed are what the ``token_embed`` head returns with ``use_activation=False``: the
encoder's states with the model's *linear* projection (if any) applied per token, no normalization
(contract section 3: a linear projection commutes with the mean; the head proper is applied by the
host after the mean, :mod:`latechunk_dagster.core.head`).

Sums are accumulated in float64: on an accelerator with one ``index_add_`` into a float64 buffer on
the device; rows in host memory (the CPU engine) with numpy's float64 reduce per range, on one thread.
Nothing a request carries may raise here: an exception in the worker fails every request of the
batch and kills the engine core, and with it a shared server (a span end of ``2**63`` once made
``torch.tensor`` raise "Overflow"). So the ranges are checked in plain Python before torch sees
them (:func:`span_ranges`: a list of integers, ``true`` excluded, even, at most two per row, each
inside the prompt, sorted, non-overlapping, non-empty), and whatever breaks a rule, or anything
else that raises while summing, gets a ``[0, 2*dim+1]`` answer instead of an error; the host
refuses that document alone (:class:`~latechunk_dagster.core.errors.SpanError`). The server route
refuses such requests before they reach the engine (:func:`~.protocol.read_request`).

The server route that carries these requests over HTTP is :mod:`latechunk_dagster.vllm_plugin.endpoint`.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: The ``PoolingParams.extra_kwargs`` key of a span-sum request.
SPANS_KEY = "latechunk_spans"

_PATCHED = "_latechunk_span_sums"


def register() -> None:
    """Give vLLM's token-embedding pooler span sums (module docstring). Idempotent: vLLM loads
    general plugins once per process, and the in-process engine calls this too."""
    from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler

    if getattr(TokenPooler, _PATCHED, False):
        return
    plain_forward = TokenPooler.forward

    def forward(self: Any, hidden_states: Any, pooling_metadata: Any) -> Any:
        out = plain_forward(self, hidden_states, pooling_metadata)
        for i, params in enumerate(pooling_metadata.pooling_params):
            extra = getattr(params, "extra_kwargs", None)
            if isinstance(extra, dict) and SPANS_KEY in extra and out[i] is not None:
                out[i] = _answer(out[i], extra[SPANS_KEY])
        return out

    TokenPooler.forward = forward
    setattr(TokenPooler, _PATCHED, True)


def _answer(rows: Any, spans: Any) -> Any:
    """:func:`span_sum_pairs`, or the empty answer when anything raises (module docstring): never an error."""
    try:
        return span_sum_pairs(rows, spans)
    except Exception:  # the engine must live: this request alone gets no rows
        log.exception("latechunk span sums failed for one request; it gets an empty answer")
        import torch

        return torch.zeros((0, 2 * int(rows.shape[-1]) + 1), dtype=torch.float32)


def span_ranges(spans: Any, n: int) -> list[tuple[int, int]] | None:
    """The ``(start, end)`` ranges of a flat ``[start_0, end_0, ...]`` list, or ``None`` where it
    breaks a rule: a list (or tuple) of 2 to ``2 * n`` Python integers (``bool`` is not one), an
    even number, each range inside ``[0, n]``, non-empty, sorted and not overlapping. Plain Python,
    the length checked first: no value can make it raise or run long."""
    if not isinstance(spans, list | tuple) or not 2 <= len(spans) <= 2 * n or len(spans) % 2:
        return None
    ranges = []
    end = 0
    for start, stop in zip(spans[::2], spans[1::2]):
        if type(start) is not int or type(stop) is not int or not end <= start < stop <= n:
            return None
        ranges.append((start, stop))
        end = stop
    return ranges


def span_sum_pairs(rows: Any, spans: Any) -> Any:
    """Float64 sums of ``rows[start:end]`` per range, as float32 ``(hi, lo, count)`` rows.

    Args:
        rows: ``torch.Tensor`` ``[n_rows, dim]`` (any float dtype, any device).
        spans: flat ``[start_0, end_0, ...]``: sorted, non-overlapping, non-empty, within ``n_rows``
            (:func:`span_ranges`); any other value is answered with no rows.

    Returns:
        float32 ``[n_spans, 2 * dim + 1]`` on ``rows``' device (module docstring); ``[0, 2 * dim + 1]``
        when ``spans`` breaks a rule above.
    """
    import torch

    n, dim = rows.shape
    ranges = span_ranges(spans, int(n))
    if ranges is None:
        return rows.new_zeros((0, 2 * dim + 1), dtype=torch.float32)
    bounds = torch.tensor(ranges, dtype=torch.long)  # shape: [n_spans, 2]
    if rows.device.type == "cpu":
        return _cpu_sum_pairs(rows, bounds)
    return _device_sum_pairs(rows, bounds)


def _cpu_sum_pairs(rows: Any, bounds: Any) -> Any:
    """:func:`span_sum_pairs` of rows in host memory: numpy's float64 reduce per range, the host's
    own rule (:func:`latechunk_dagster.vllm_plugin.sums.piece_sums`), on one thread.

    Not torch's ops: on the CPU engine each of them over a window's rows (more than torch's grain of
    32,768 elements) opens an OpenMP region on every core, and a region waits for a core another
    process holds: measured 54 ms a window instead of 0.2 ms on 2 loaded cores (bench/README.md)."""
    import numpy as np
    import torch

    from latechunk_dagster.vllm_plugin.sums import piece_sums

    b = bounds.numpy()
    pairs = piece_sums(rows.float().numpy(), b)  # float32 [k, 2 * dim]: hi | lo
    counts = (b[:, 1] - b[:, 0]).astype(np.float32)[:, None]
    return torch.from_numpy(np.concatenate([pairs, counts], axis=1))


def _device_sum_pairs(rows: Any, bounds: Any) -> Any:
    """:func:`span_sum_pairs` on an accelerator: one float64 ``index_add_`` of every row into its range."""
    import torch

    n, dim = rows.shape
    k = bounds.shape[0]
    starts, ends = bounds[:, 0].contiguous(), bounds[:, 1].contiguous()
    # each row's range, or k for rows no range takes (rows another window owns); shape [n]
    at = torch.arange(n)
    idx = torch.searchsorted(starts, at, right=True) - 1
    owner = torch.where((idx >= 0) & (at < ends[idx.clamp(min=0)]), idx, k).to(rows.device)
    # shape: [k + 1, dim], float64 accumulation (the float32 running sum misses float64 by > 1e-6 at 8k tokens)
    sums = torch.zeros((k + 1, dim), dtype=torch.float64, device=rows.device)
    sums.index_add_(0, owner, rows.to(torch.float64))
    sums = sums[:k]
    hi = sums.to(torch.float32)
    lo = (sums - hi.to(torch.float64)).to(torch.float32)
    return torch.cat([hi, lo, (ends - starts).to(device=rows.device, dtype=torch.float32)[:, None]], dim=1)
