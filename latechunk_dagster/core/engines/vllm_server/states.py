"""The token-state route of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`:
``POST /pooling`` with ``"use_activation": false``, answered as raw little-endian float32
(``encoding_format: "bytes_only"``, vLLM >= 0.11) where the server takes it, else base64 in JSON;
the decoding and checking of both answers (request source:
``vllm/entrypoints/pooling/pooling/protocol.py``, ``PoolingCompletionRequest``, vLLM 0.32). A part
the engine holds (:class:`TokenStateRoute`), sending through its transport."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import httpx
import numpy as np

from latechunk_dagster.core.engines.vllm_server.info import BASE64, RAW, ServerInfo
from latechunk_dagster.core.engines.vllm_server.transport import RejectedRequest, Server, ServerError, ServerTransport
from latechunk_dagster.core.errors import EngineAnswerError

__all__ = ["BASE64", "RAW", "TokenStateRoute", "json_rows"]


class TokenStateRoute:
    """Token states of our token ids from ``/pooling`` (module docstring), sent through ``transport``."""

    def __init__(self, transport: ServerTransport) -> None:
        self.transport = transport

    def request(
        self,
        prompts: list[list[int]],
        model: str,
        encoding: str,
        dim: int | None,
        server: Server | None = None,
    ) -> list[np.ndarray]:
        """Token states of ``prompts`` from ``/pooling``, float32 ``[len(prompt), dim]`` each.

        Args:
            model: the served model name. encoding: :data:`RAW` or :data:`BASE64`.
            dim: the probed width (``None``: a probe, which finds it). server: a probe's server
                (``None``: the rotation).

        Raises:
            EngineAnswerError: another number of results, or of floats than the prompts' tokens
                times the probed width.
            RejectedRequest: the server answered 4xx.
        """
        payload = {
            "model": model,
            "input": prompts,
            "use_activation": False,
            "encoding_format": encoding,
            "embed_dtype": "float32",
            "endianness": "little",
        }
        decode = _raw_states if encoding == RAW else _base64_states
        return self.transport.call("POST", "/pooling", payload, server=server, decode=lambda r: decode(r, prompts, dim))

    def probe_raw_states(self, srv: Server, model: str, probe: np.ndarray) -> str:
        """:data:`RAW` when the server sends the probe's states as raw float32 equal to its base64
        answer ``probe``; :data:`BASE64` when it refuses ``bytes_only`` (4xx: a vLLM before 0.11).

        Raises:
            ServerError: it takes ``bytes_only`` but answers other values or another shape.
        """
        try:
            [raw] = self.request([[0, 0]], model, RAW, None, server=srv)
        except RejectedRequest:
            return BASE64
        except EngineAnswerError as exc:
            raise ServerError(f"{srv.url} answers /pooling with encoding_format {RAW!r} wrongly: {exc}") from None
        if raw.shape != probe.shape or not np.array_equal(raw, probe):
            raise ServerError(
                f"{srv.url} answers /pooling with encoding_format {RAW!r} with other states than base64 "
                f"(shape {raw.shape} vs {probe.shape})"
            )
        return RAW

    def token_states(self, prompts: Sequence[Sequence[int]], info: ServerInfo) -> list[np.ndarray]:
        """Per-token states (``use_activation: false``) of our token ids, float32 ``[len(prompt), dim]``
        each, from the servers ``info`` describes (its model, width and states encoding).

        Raises:
            ServerRejectedError: the server answered 4xx for some prompts (indices in ``rejected``).
            ServerUnavailableError: retries exhausted.
        """
        ps = [list(map(int, p)) for p in prompts]

        def send(idx: list[int]) -> list[np.ndarray]:
            return self.request([ps[k] for k in idx], info.model, info.states_encoding, info.dim)

        return self.transport.run(ps, [len(p) for p in ps], send) if ps else []


def json_rows(resp: httpx.Response, n: int) -> list[dict]:
    """The ``data`` items of a JSON answer to ``n`` inputs, by ``index``.

    Raises:
        EngineAnswerError: another number of items, or indices other than ``0..n-1``.
    """
    rows = sorted(resp.json().get("data") or [], key=lambda d: d.get("index", -1))
    if [d.get("index") for d in rows] != list(range(n)):
        raise EngineAnswerError(f"{len(rows)} results (indices {[d.get('index') for d in rows][:5]}) for {n} inputs")
    return rows


def _base64_states(resp: httpx.Response, prompts: list[list[int]], dim: int | None) -> list[np.ndarray]:
    """Token states of ``prompts`` from a base64 JSON answer, float32 ``[len(prompt), dim]`` each
    (``dim`` ``None``: whatever width the floats hold, the same for every prompt).

    Raises:
        EngineAnswerError: another number of results, or floats that are not whole rows of ``dim``.
    """
    out = []
    for p, r in zip(prompts, json_rows(resp, len(prompts))):
        flat = np.frombuffer(base64.b64decode(r["data"]), dtype="<f4")
        dim = dim or (flat.size // len(p))
        if not dim or flat.size != len(p) * dim:
            raise EngineAnswerError(f"{flat.size} floats for {len(p)} tokens of width {dim}")
        # shape: [n_tokens, dim]
        out.append(flat.reshape(len(p), -1).astype(np.float32, copy=True))
    return out


def _raw_states(resp: httpx.Response, prompts: list[list[int]], dim: int | None) -> list[np.ndarray]:
    """Token states of ``prompts`` from a ``bytes_only`` answer: little-endian float32, each prompt's
    ``[len(prompt), dim]`` rows after the previous one's, in request order (vLLM's
    ``encode_pooling_bytes``); ``dim`` ``None``: what the bytes hold per token.

    Raises:
        EngineAnswerError: not raw bytes, or a size other than the prompts' tokens times ``dim`` floats.
    """
    kind = resp.headers.get("content-type", "")
    if not kind.startswith("application/octet-stream"):
        raise EngineAnswerError(f"answered {kind or 'no content type'}, not raw bytes")
    data = resp.content
    tokens = sum(len(p) for p in prompts)
    dim = dim or (len(data) // (4 * tokens) if tokens else 0)
    if not dim or len(data) != 4 * tokens * dim:
        raise EngineAnswerError(f"{len(data)} bytes for {tokens} tokens of {dim} float32")
    # shape: [tokens of every prompt, dim]
    rows = np.frombuffer(data, dtype="<f4").reshape(tokens, -1)
    bounds = np.cumsum([len(p) for p in prompts])[:-1]
    return [r.astype(np.float32, copy=True) for r in np.split(rows, bounds)]
