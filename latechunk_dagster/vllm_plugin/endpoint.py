"""The span-sum route of a ``vllm serve`` server: token ids and spans in, span sums out, in binary.

An endpoint plugin (entry point ``vllm.endpoint_plugins`` -> :class:`SpanSumsEndpoint`, named
``latechunk_spans``). vLLM loads endpoint plugins only when ``VLLM_PLUGINS`` names them, so a
server that should answer span requests is started with
``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans`` (the general plugin that gives the pooler span
sums, :mod:`latechunk_dagster.vllm_plugin`, and this route); ``deploy/vllm-server.yaml`` does.

``POST /latechunk/span_sums`` with a JSON body::

    {"windows": [{"ids": [101, 2054, ..., 102], "spans": [0, 12, 12, 40]}, ...]}

(``spans``: flat half-open row ranges of that window; :data:`~latechunk_dagster.vllm_plugin.SPANS_KEY`).
The answer is ``application/octet-stream``: ``int32[n_windows]`` (the rows of each window's
answer: its number of ranges, or 0 where the ranges broke a rule), then, window after window,
float32 ``[rows, 2 * dim + 1]`` (hi, lo, count; :func:`~latechunk_dagster.vllm_plugin.span_sum_pairs`).
Header ``X-Latechunk-Dim`` gives ``dim``. What crosses the network is ``(2 * dim + 1) * 4`` bytes per
span instead of ``dim * 4`` bytes (raw) or ~``dim * 5.3`` bytes (base64 JSON) per token.

``GET /latechunk/span_sums`` answers ``{"version": ...}``: the start-up probe of
:class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine` tells servers with the route
from servers without it (404).
"""

import asyncio
import uuid
from typing import Any

import numpy as np
from fastapi import Request, Response  # with vLLM's server (FastAPI resolves the route's annotations)
from fastapi.responses import JSONResponse

from latechunk_dagster.vllm_plugin import SPANS_KEY

#: The route's path.
ROUTE = "/latechunk/span_sums"
#: Version of the request and answer format above.
FORMAT_VERSION = 1


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
            dim = max((int(a.shape[1]) - 1) // 2 for a in answers) if answers else 0
            head = np.array([a.shape[0] for a in answers], dtype="<i4").tobytes()
            payload = b"".join(np.ascontiguousarray(a, dtype="<f4").tobytes() for a in answers)
            headers = {"X-Latechunk-Dim": str(dim)}
            return Response(head + payload, media_type="application/octet-stream", headers=headers)

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
