"""The span-sum route's wire format: one home for the server side (:mod:`.endpoint`) and the client
(:class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`).

Imports only the standard library and numpy, so a client without vLLM (a CPU-only step pod) reads it too.

Request: ``POST`` :data:`ROUTE`, JSON ``{"windows": [{"ids": [int, ...], "spans": [int, ...]}, ...]}``:
each window's token ids and its flat half-open row ranges ``[start_0, end_0, start_1, end_1, ...]``
(:data:`~latechunk_dagster.vllm_plugin.SPANS_KEY`). The route checks every value before anything
reaches the engine (:func:`read_request`) and answers a request that breaks a rule with HTTP 400
naming the field (``windows[3].spans[7]: ...``).

Answer: ``application/octet-stream``, header :data:`DIM_HEADER` = ``dim``, body
``int32[n_windows]`` (little-endian: the rows of each window's answer, its number of ranges or 0
where the ranges broke a rule), then ``n_windows`` digests of :data:`DIGEST_BYTES` bytes
(:func:`answer_digest`: each window's ids, spans and answer bytes, so an answer is bound to its
request), then window after window float32 ``[rows, 2 * dim + 1]`` (little-endian; ``hi``, ``lo``,
``count`` per range: :func:`~latechunk_dagster.vllm_plugin.span_sum_pairs`).
Bytes per range: ``(2 * dim + 1) * 4``, whatever its length in tokens.

``GET`` :data:`ROUTE` answers ``{"version": FORMAT_VERSION}``: the client's start-up probe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

#: The route's path.
ROUTE = "/latechunk/span_sums"
#: Version of the request and answer format above (a client uses the route only at its own version).
#: 2: the answer carries each window's digest (:func:`answer_digest`).
FORMAT_VERSION = 2
#: The answer's header carrying ``dim``, the width of a token state.
DIM_HEADER = "X-Latechunk-Dim"
#: ``VLLM_PLUGINS`` of a server that answers the route: the pooler's span sums (general plugin) and
#: the route (endpoint plugin; vLLM loads endpoint plugins only where ``VLLM_PLUGINS`` names them).
PLUGINS = "latechunk_span_sums,latechunk_spans"
#: Bytes of one window's digest in the answer (BLAKE2b, :func:`answer_digest`).
DIGEST_BYTES = 16
#: Largest token id the route passes on (int64; the vocabulary bound is vLLM's own check).
MAX_TOKEN_ID = 2**63 - 1

#: One window of a request: its token ids and its flat ``[start_0, end_0, ...]`` row ranges.
Window = tuple[list[int], list[int]]


class RequestError(ValueError):
    """A span request that breaks the format (:func:`read_request`); ``field`` names the value."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"{field}: {why}")


def read_request(body: Any, max_tokens: int | None = None) -> list[Window]:
    """The windows of a span request's decoded JSON body, every value checked.

    The rules: ``body`` is ``{"windows": [...]}`` and nothing else; each window is
    ``{"ids": [...], "spans": [...]}``; ``ids`` holds 1 to ``max_tokens`` integers (JSON numbers
    without a fraction; ``true``/``false`` are not integers) in ``[0, MAX_TOKEN_ID]``; ``spans`` holds
    an even number (2 to ``2 * len(ids)``) of integers ``0 <= x <= len(ids)``: half-open ranges,
    each non-empty, sorted and not overlapping. Lengths are checked before elements, so a huge list
    costs one ``len``.

    Args:
        body: the JSON body as ``json.loads`` returns it.
        max_tokens: most ids a window may have (the server's ``max_model_len``); ``None``: unchecked.

    Returns:
        ``(ids, spans)`` per window, in request order.

    Raises:
        RequestError: the first value that breaks a rule, naming its field (``windows[2].spans[5]``).
    """
    if not isinstance(body, dict) or set(body) != {"windows"}:
        raise RequestError("body", "must be a JSON object with one field, 'windows'")
    windows = body["windows"]
    if not isinstance(windows, list):
        raise RequestError("windows", f"must be a list, got {type(windows).__name__}")
    return [_read_window(w, f"windows[{k}]", max_tokens) for k, w in enumerate(windows)]


def _read_window(window: Any, name: str, max_tokens: int | None) -> Window:
    if not isinstance(window, dict) or set(window) != {"ids", "spans"}:
        raise RequestError(name, "must be a JSON object with the fields 'ids' and 'spans'")
    ids, spans = window["ids"], window["spans"]
    if not isinstance(ids, list) or not ids:
        raise RequestError(f"{name}.ids", "must be a non-empty list of token ids")
    if max_tokens is not None and len(ids) > max_tokens:
        raise RequestError(f"{name}.ids", f"{len(ids)} ids, more than the server's max_model_len {max_tokens}")
    for k, x in enumerate(ids):
        if type(x) is not int or not 0 <= x <= MAX_TOKEN_ID:
            raise RequestError(f"{name}.ids[{k}]", f"{x!r} is not a token id (an integer in [0, 2**63))")
    n = len(ids)
    if not isinstance(spans, list) or not spans or len(spans) % 2 or len(spans) > 2 * n:
        size = len(spans) if isinstance(spans, list) else type(spans).__name__
        raise RequestError(f"{name}.spans", f"must be a list of 2 to {2 * n} integers, an even number; got {size}")
    end = 0
    for k, x in enumerate(spans):
        if type(x) is not int or not 0 <= x <= n:
            raise RequestError(f"{name}.spans[{k}]", f"{x!r} is not a row of the window's {n} ids (0..{n})")
        if k % 2 == 0 and x < end:
            raise RequestError(f"{name}.spans[{k}]", f"range starts at {x}, before the previous one ends ({end})")
        if k % 2 == 1 and x <= spans[k - 1]:
            raise RequestError(f"{name}.spans[{k}]", f"range [{spans[k - 1]}, {x}) is empty")
        end = x
    return ids, spans


def answer_digest(window: Window, answer: np.ndarray) -> bytes:
    """BLAKE2b (:data:`DIGEST_BYTES` bytes) of a window's ids and spans (int64 little-endian, each
    list preceded by its length) and of its answer's bytes (float32 little-endian): computed by the
    route over what it received and answers, and by the client over what it sent and got, so an
    answer is bound to its request (another window's answer, or altered bytes, do not match).
    """
    ids, spans = window
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for values in (ids, spans):
        h.update(len(values).to_bytes(8, "little"))
        h.update(np.asarray(values, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(answer, dtype="<f4").tobytes())
    return h.digest()


def encode_answer(windows: Sequence[Window], answers: Sequence[np.ndarray]) -> tuple[bytes, int]:
    """The answer body of a request's windows and its ``dim``.

    Args:
        windows: the request's windows (:func:`read_request`).
        answers: float32 ``[rows_k, 2 * dim + 1]`` per window, in request order.

    Returns:
        (body bytes, ``dim``; 0 without windows).
    """
    dim = max((int(a.shape[1]) - 1) // 2 for a in answers) if answers else 0
    head = np.array([a.shape[0] for a in answers], dtype="<i4").tobytes()
    digests = b"".join(answer_digest(w, a) for w, a in zip(windows, answers))
    return head + digests + b"".join(np.ascontiguousarray(a, dtype="<f4").tobytes() for a in answers), dim


def decode_answer(body: bytes, windows: Sequence[Window], dim: int) -> list[np.ndarray]:
    """The windows' answers in an answer body (the inverse of :func:`encode_answer`), each checked
    against its digest.

    Args:
        body: the answer's bytes. windows: the windows sent. dim: the ``dim`` of :data:`DIM_HEADER`.

    Returns:
        float32 ``[rows_k, 2 * dim + 1]`` per window (views of ``body``), in request order.

    Raises:
        ValueError: the body is not ``len(windows)`` answers of width ``2 * dim + 1`` (says what it
            holds), or a window's answer does not match its digest (names the window).
    """
    n_windows = len(windows)
    head = (4 + DIGEST_BYTES) * n_windows
    width = 2 * dim + 1
    if dim < 1 or len(body) < head:
        raise ValueError(f"{len(body)} bytes of width {width} for {n_windows} windows")
    rows = np.frombuffer(body, dtype="<i4", count=n_windows).astype(np.int64)
    if (rows < 0).any() or head + int(rows.sum()) * width * 4 != len(body):
        raise ValueError(f"{len(body)} bytes for {rows[:5].tolist()}... rows of width {width} ({n_windows} windows)")
    data = np.frombuffer(body, dtype="<f4", offset=head).reshape(-1, width)
    answers = np.split(data, np.cumsum(rows)[:-1]) if n_windows else []
    for k, (window, answer) in enumerate(zip(windows, answers)):
        at = 4 * n_windows + k * DIGEST_BYTES
        if body[at : at + DIGEST_BYTES] != answer_digest(window, answer):
            raise ValueError(f"window {k} of {n_windows}: its answer does not match its digest (another window's?)")
    return answers
