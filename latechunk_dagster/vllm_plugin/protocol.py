"""The span-sum route's wire format: one home for the server side (:mod:`.endpoint`) and the client
(:class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`).

Imports only numpy, so a client without vLLM (a CPU-only step pod) reads it too.

Request: ``POST`` :data:`ROUTE`, JSON ``{"windows": [{"ids": [int, ...], "spans": [int, ...]}, ...]}``:
each window's token ids and its flat half-open row ranges ``[start_0, end_0, start_1, end_1, ...]``
(:data:`~latechunk_dagster.vllm_plugin.SPANS_KEY`).

Answer: ``application/octet-stream``, header :data:`DIM_HEADER` = ``dim``, body
``int32[n_windows]`` (little-endian: the rows of each window's answer, its number of ranges or 0
where the ranges broke a rule), then window after window float32 ``[rows, 2 * dim + 1]``
(little-endian; ``hi``, ``lo``, ``count`` per range: :func:`~latechunk_dagster.vllm_plugin.span_sum_pairs`).
Bytes per range: ``(2 * dim + 1) * 4``, whatever its length in tokens.

``GET`` :data:`ROUTE` answers ``{"version": FORMAT_VERSION}``: the client's start-up probe.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The route's path.
ROUTE = "/latechunk/span_sums"
#: Version of the request and answer format above (a client uses the route only at its own version).
FORMAT_VERSION = 1
#: The answer's header carrying ``dim``, the width of a token state.
DIM_HEADER = "X-Latechunk-Dim"
#: ``VLLM_PLUGINS`` of a server that answers the route: the pooler's span sums (general plugin) and
#: the route (endpoint plugin; vLLM loads endpoint plugins only where ``VLLM_PLUGINS`` names them).
PLUGINS = "latechunk_span_sums,latechunk_spans"


def encode_answer(answers: Sequence[np.ndarray]) -> tuple[bytes, int]:
    """The answer body of a request's windows and its ``dim``.

    Args:
        answers: float32 ``[rows_k, 2 * dim + 1]`` per window, in request order.

    Returns:
        (body bytes, ``dim``; 0 without windows).
    """
    dim = max((int(a.shape[1]) - 1) // 2 for a in answers) if answers else 0
    head = np.array([a.shape[0] for a in answers], dtype="<i4").tobytes()
    return head + b"".join(np.ascontiguousarray(a, dtype="<f4").tobytes() for a in answers), dim


def decode_answer(body: bytes, n_windows: int, dim: int) -> list[np.ndarray]:
    """The windows' answers in an answer body (the inverse of :func:`encode_answer`).

    Args:
        body: the answer's bytes. n_windows: windows sent. dim: the ``dim`` of :data:`DIM_HEADER`.

    Returns:
        float32 ``[rows_k, 2 * dim + 1]`` per window (views of ``body``), in request order.

    Raises:
        ValueError: the body is not ``n_windows`` answers of width ``2 * dim + 1`` (says what it holds).
    """
    head = 4 * n_windows
    width = 2 * dim + 1
    if dim < 1 or len(body) < head:
        raise ValueError(f"{len(body)} bytes of width {width} for {n_windows} windows")
    rows = np.frombuffer(body, dtype="<i4", count=n_windows).astype(np.int64)
    if (rows < 0).any() or head + int(rows.sum()) * width * 4 != len(body):
        raise ValueError(f"{len(body)} bytes for {rows[:5].tolist()}... rows of width {width} ({n_windows} windows)")
    data = np.frombuffer(body, dtype="<f4", offset=head).reshape(-1, width)
    return np.split(data, np.cumsum(rows)[:-1]) if n_windows else []
