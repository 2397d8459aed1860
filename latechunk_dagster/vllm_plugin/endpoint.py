"""The span-sum route of a ``vllm serve`` server: token ids and spans in, span sums out, in binary.

An endpoint plugin (entry point ``vllm.endpoint_plugins`` -> :class:`SpanSumsEndpoint`, named
``latechunk_spans``). vLLM loads endpoint plugins only when ``VLLM_PLUGINS`` names them, so a
server that should answer span requests is started with
``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans`` (:data:`~.protocol.PLUGINS`: the general plugin
that gives the pooler span sums, :mod:`latechunk_dagster.vllm_plugin`, and this route);
``deploy/vllm-server.yaml`` does. The package is installed beside vLLM with ``pip install --no-deps``:
the plugins import only vLLM, torch, numpy and FastAPI, which come with vLLM.

``POST /latechunk/span_sums`` with a JSON body::

    {"windows": [{"ids": [101, 2054, ..., 102], "spans": [0, 12, 12, 40]}, ...]}

answered in the binary format of :mod:`latechunk_dagster.vllm_plugin.protocol` (its one home):
``(2 * dim + 1) * 4`` bytes per span cross the network instead of ``dim * 4`` bytes (raw) or
~``dim * 5.3`` bytes (base64 JSON) per token, with a digest per window that binds each answer to
its request.

Nothing a request carries reaches the engine unchecked: a body that is not JSON, or breaks a rule
of :func:`~latechunk_dagster.vllm_plugin.protocol.read_request` (a value that is not an integer,
``true`` included, out of range, a range past the window, an odd or too long list, wrong nesting),
is answered HTTP 400 naming the field, and the engine never sees it (a ``true`` among the ids once
stopped the engine core's input thread: every later request hung; a span end of ``2**63`` made the
worker raise, and the engine core died). A window vLLM refuses (a token id out of the vocabulary,
more tokens than ``--max-model-len``) fails the request with HTTP 400 naming the window and vLLM's
message, so the client isolates that window's document.

``GET /latechunk/span_sums`` answers ``{"version": ...}``: the start-up probe of
:class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine` tells servers with the route
from servers without it (404).
"""

import asyncio
import json
import uuid
from typing import Any

from fastapi import Request, Response  # with vLLM's server (FastAPI resolves the route's annotations)
from fastapi.responses import JSONResponse

from latechunk_dagster.vllm_plugin import SPANS_KEY
from latechunk_dagster.vllm_plugin.protocol import (
    DIM_HEADER,
    FORMAT_VERSION,
    ROUTE,
    RequestError,
    Window,
    encode_answer,
    read_request,
)


class SpanSumsEndpoint:
    """The ``vllm.endpoint_plugins`` factory (vLLM calls it with no arguments)."""

    name = "latechunk_spans"
    required_tasks = ("token_embed",)

    def __init__(self) -> None:
        self.engine_client: Any = None
        self.max_model_len: int | None = None

    def attach_router(self, app: Any) -> None:
        @app.get(ROUTE)
        async def probe() -> Any:
            return JSONResponse({"version": FORMAT_VERSION})

        @app.post(ROUTE)
        async def span_sums(request: Request) -> Any:
            try:
                windows = read_request(json.loads(await request.body()), self.max_model_len)
            except RequestError as exc:
                return _bad_request(str(exc), exc.field)
            except (ValueError, RecursionError) as exc:  # not JSON (UnicodeDecodeError included), nested too deep
                return _bad_request(f"body: not JSON ({type(exc).__name__}: {str(exc)[:200]})", "body")
            if self.engine_client is None:
                return JSONResponse({"error": "this server has no engine"}, 503)
            try:
                answers = await asyncio.gather(*(self._one(k, w) for k, w in enumerate(windows)))
            except _WindowRefused as exc:
                return _bad_request(f"windows[{exc.k}].ids: {exc.message}", f"windows[{exc.k}].ids")
            payload, dim = encode_answer(windows, answers)
            return Response(payload, media_type="application/octet-stream", headers={DIM_HEADER: str(dim)})

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        self.engine_client = engine_client
        model_config = getattr(engine_client, "model_config", None)
        max_len = getattr(model_config, "max_model_len", None)
        self.max_model_len = max_len if isinstance(max_len, int) and max_len > 0 else None

    async def _one(self, k: int, window: Window) -> Any:
        """One window's span sums from the engine; vLLM's refusal of its input as :class:`_WindowRefused`."""
        from vllm import PoolingParams, TokensPrompt

        ids, spans = window
        params = PoolingParams(task="token_embed", use_activation=False, extra_kwargs={SPANS_KEY: spans})
        final = None
        try:
            async for out in self.engine_client.encode(
                TokensPrompt(prompt_token_ids=ids), params, f"latechunk-{uuid.uuid4().hex}"
            ):
                final = out
        except Exception as exc:
            if _is_client_error(exc):
                raise _WindowRefused(k, str(exc)) from exc
            raise  # a server fault: vLLM's own handlers answer it (5xx)
        if final is None:
            raise RuntimeError(f"the engine gave no output for window {k}")
        return final.outputs.data.float().numpy()


class _WindowRefused(Exception):
    """vLLM refused window ``k``'s input (its message)."""

    def __init__(self, k: int, message: str) -> None:
        super().__init__(message)
        self.k = k
        self.message = message


def _is_client_error(exc: Exception) -> bool:
    """vLLM's errors of the request (mapped to 4xx by its handlers): its ``VLLMClientError`` and the
    raw ``ValueError`` / ``TypeError`` / ``OverflowError`` it still raises for bad input."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:  # a vLLM before the error hierarchy
        VLLMClientError = ValueError  # noqa: N806
    return isinstance(exc, VLLMClientError | ValueError | TypeError | OverflowError)


def _bad_request(message: str, field: str) -> JSONResponse:
    """HTTP 400 in vLLM's error shape, naming ``field``."""
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "param": field, "code": 400}}, 400)
