"""Span sums inside vLLM: the token states stay in the engine, only each span's sum leaves it.

A vLLM plugin (entry point ``vllm.general_plugins`` -> :func:`register`, loaded by every vLLM
process: the in-process engine, a ``vllm serve`` engine core, its workers). It extends vLLM's
token-embedding pooler (``TokenPooler``, the ``token_embed`` task; ``AllPooler`` in older trees:
:func:`token_pooler` finds it in each known place, and fails naming the vLLM version where it finds
none) with one optional request field:

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

import importlib
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

#: The ``PoolingParams.extra_kwargs`` key of a span-sum request.
SPANS_KEY = "latechunk_spans"

_PATCHED = "_latechunk_span_sums"

#: Where vLLM's trees have kept the ``token_embed`` task's pooler (``forward(hidden_states,
#: pooling_metadata)`` returning one tensor of token rows per request), newest first: per module, the
#: class names tried in order. ``AllPooler`` comes first where a module has both, because there
#: ``TokenPooler`` is the abstract base whose ``forward`` the concrete pooler overrides (patching it
#: would change nothing). Layouts: ``pooler/tokwise/poolers.py`` (``TokenPooler``, vLLM 0.32-0.33;
#: ``AllPooler`` under an abstract ``TokenPooler`` before), ``pool/poolers/tokenwise.py``,
#: ``pool/tokenwise/poolers.py`` and ``pool/token/poolers.py`` (the ``layers/pool`` layouts), and
#: ``pooler.py`` (``AllPooler``, older trees).
POOLER_PLACES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm.model_executor.layers.pooler.tokwise.poolers", ("AllPooler", "TokenPooler")),
    ("vllm.model_executor.layers.pool.poolers.tokenwise", ("AllPooler",)),
    ("vllm.model_executor.layers.pool.tokenwise.poolers", ("AllPooler",)),
    ("vllm.model_executor.layers.pool.token.poolers", ("AllPooler",)),
    ("vllm.model_executor.layers.pooler", ("AllPooler",)),
)


class PoolerNotFoundError(RuntimeError):
    """The installed vLLM has no token-embedding pooler in any place the span plugin knows
    (:data:`POOLER_PLACES`): span sums cannot be served, and requests would get token states."""


def token_pooler(
    import_module: Callable[[str], ModuleType] = importlib.import_module, vllm_version: str | None = None
) -> type:
    """The class of vLLM's token-embedding pooler, the first concrete one found in :data:`POOLER_PLACES`.

    Args:
        import_module: how a module is imported (``importlib.import_module``; a test gives fake trees).
        vllm_version: named in the error (default: the installed vLLM's version).

    Raises:
        PoolerNotFoundError: none of the places has one, naming the vLLM version and every place
            tried. Never a silent fallback: a request asking for span sums would get token states.
    """
    tried = []
    for module_name, names in POOLER_PLACES:
        try:
            module = import_module(module_name)
        except ImportError:
            tried.append(f"{module_name} (no such module)")
            continue
        for name in names:
            cls = getattr(module, name, None)
            forward = getattr(cls, "forward", None)
            if isinstance(cls, type) and callable(forward) and not getattr(forward, "__isabstractmethod__", False):
                return cls
        tried.append(f"{module_name}.{'/'.join(names)} (not there, or abstract)")
    if vllm_version is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            vllm_version = version("vllm")
        except PackageNotFoundError:
            vllm_version = "(not installed)"
    raise PoolerNotFoundError(
        f"latechunk's span plugin found no token-embedding pooler in vLLM {vllm_version}: tried "
        f"{'; '.join(tried)}. Span sums cannot run on this vLLM; use engine_path='token_states', or a vLLM "
        "whose pooler the plugin knows (latechunk_dagster.vllm_plugin.POOLER_PLACES)"
    )


def register(import_module: Callable[[str], ModuleType] = importlib.import_module) -> None:
    """Give vLLM's token-embedding pooler span sums (module docstring). Idempotent: vLLM loads
    general plugins once per process, and the in-process engine calls this too.

    Raises:
        PoolerNotFoundError: the installed vLLM keeps its pooler nowhere the plugin knows
            (:func:`token_pooler`): the engine does not start, rather than answer span requests with
            token states.
    """
    pooler = token_pooler(import_module)
    if getattr(pooler, _PATCHED, False):
        return
    plain_forward = pooler.forward

    def forward(self: Any, hidden_states: Any, pooling_metadata: Any) -> Any:
        out = plain_forward(self, hidden_states, pooling_metadata)
        for i, params in enumerate(pooling_metadata.pooling_params):
            extra = getattr(params, "extra_kwargs", None)
            if isinstance(extra, dict) and SPANS_KEY in extra and out[i] is not None:
                out[i] = _answer(out[i], extra[SPANS_KEY])
        return out

    pooler.forward = forward  # type: ignore[method-assign]
    setattr(pooler, _PATCHED, True)


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
