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
~``dim * 5.3`` bytes (base64 JSON) per token. A window vLLM refuses (a token id out of the
vocabulary, more tokens than ``--max-model-len``) fails the request with vLLM's own 400 answer
(its exception handlers), as ``/pooling`` does, so the client isolates that window's document.

``GET /latechunk/span_sums`` answers ``{"version": ...}``: the start-up probe of
:class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine` tells servers with the route
from servers without it (404).
"""

import asyncio
import uuid
from typing import Any

from fastapi import Request, Response  # with vLLM's server (FastAPI resolves the route's annotations)
from fastapi.responses import JSONResponse

from latechunk_dagster.vllm_plugin import SPANS_KEY
from latechunk_dagster.vllm_plugin.protocol import DIM_HEADER, FORMAT_VERSION, ROUTE, encode_answer


class SpanSumsEndpoint:
    """The ``vllm.endpoint_plugins`` factory (vLLM calls it with no arguments)."""

    name = "latechunk_spans"
    required_tasks = ("token_embed",)

    def __init__(self) -> None:
        self.engine_client: Any = None

    def attach_router(self, app: Any) -> None:
        @app.get(ROUTE)
        async def probe() -> Any:
            return JSONResponse({"version": FORMAT_VERSION})

        @app.post(ROUTE)
        async def span_sums(request: Request) -> Any:
            body = await request.json()
            windows = body.get("windows") if isinstance(body, dict) else None
            if not isinstance(windows, list) or not all(_is_window(w) for w in windows):
                return JSONResponse({"error": "expected {'windows': [{'ids': [int], 'spans': [int]}]}"}, 400)
            if self.engine_client is None:
                return JSONResponse({"error": "this server has no engine"}, 503)
            answers = await asyncio.gather(*(self._one(w) for w in windows))
            payload, dim = encode_answer(answers)
            return Response(payload, media_type="application/octet-stream", headers={DIM_HEADER: str(dim)})

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        self.engine_client = engine_client

    async def _one(self, window: dict[str, Any]) -> Any:
        from vllm import PoolingParams, TokensPrompt

        params = PoolingParams(task="token_embed", use_activation=False, extra_kwargs={SPANS_KEY: window["spans"]})
        final = None
        async for out in self.engine_client.encode(
            TokensPrompt(prompt_token_ids=window["ids"]), params, f"latechunk-{uuid.uuid4().hex}"
        ):
            final = out
        assert final is not None
        return final.outputs.data.float().numpy()


def _is_window(w: Any) -> bool:
    return (
        isinstance(w, dict)
        and isinstance(w.get("ids"), list)
        and isinstance(w.get("spans"), list)
        and all(isinstance(x, int) for x in w["ids"])
        and all(isinstance(x, int) for x in w["spans"])
    )
