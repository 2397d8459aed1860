"""The engine class of a vLLM server over HTTP (the package docstring,
:mod:`latechunk_dagster.core.engines.vllm_server`): start-up, description and the native route
(vLLM >= 0.33, ``/v1/embeddings`` with ``late_chunking_params``: ``TokenEmbeddingRequest`` in
``vllm/entrypoints/pooling/token_embed/protocol.py``); the rest is in its bases (fleet, spans,
states, transport)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.engines.vllm_server.fleet import ServerFleet
from latechunk_dagster.core.engines.vllm_server.settings import ServerSettings
from latechunk_dagster.core.engines.vllm_server.states import _json_rows
from latechunk_dagster.core.head import Head, apply_head_after_projection

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split


class VLLMServerEngine(ServerFleet):
    """A running vLLM OpenAI-compatible server (``--runner pooling``, pooler task ``token_embed``).

    Example (a server of the shipped model on port 8000)::

        from latechunk_dagster.core.engines.vllm_server import VLLMServerEngine

        engine = VLLMServerEngine("http://127.0.0.1:8000", max_in_flight=4)
        [states] = engine.token_states([[101, 7592, 102]])   # float32 [3, 384]
        engine.describe()                                     # 'vllm-server 0.32.0 at http://127.0.0.1:8000 ...'
        engine.close()

    Several servers of one model: pass a list of root URLs. Each request goes to the server with
    the fewest requests in flight (ties: the one that answered fewest, so equal servers take turns).
    A server that drops a connection, times out or answers 429/5xx is taken out of the rotation for
    :attr:`retry_after_s` seconds and the request is retried at once on another one; when its time
    is up it is tried again and is back once it answers. Every server that answers at start is
    probed and must serve the same model, version, maximum length, state width, native support,
    span route, states encoding and tokenizer (a fleet of servers with and without the latechunk
    plugins is refused). A server that answers a request wrongly (the package docstring) is left
    out for good and the request goes to another one. A server that does not answer at start (while at
    least one other does) is left out: at the first request after each :attr:`retry_after_s`
    seconds a background thread probes it again with the same checks (no timer: an idle engine
    probes nothing), and it joins the rotation once it answers and matches; one that answers but
    differs is left out for good, with an error in the log (:meth:`server_states` tells which is
    which, :meth:`server_info` what each probe found).

    Args:
        base_url: the server's root URL (``http://host:port``; no ``/v1``), or a list of them.
        settings: request settings (:class:`ServerSettings`; ``max_in_flight`` is per server);
            ``**overrides`` replace single ones (``max_in_flight=8``).
        native: ``None`` probes for ``late_chunking_params``; ``False`` skips the probe.

    Raises:
        ServerUnavailableError: no server answers the probe within the retries.
        ServerError: a server answers but is not a ``token_embed`` pooling server, answers its probe
            wrongly (the span route included), or the servers differ (:class:`ServerInfo`).
        ValueError: no URL, a repeated URL, or a setting out of range (:func:`check_server_setting`).
    """

    name = "vllm-server"

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        settings: ServerSettings | None = None,
        native: bool | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = cfg = replace(settings or ServerSettings(), **overrides)
        self._open(base_url, cfg)
        self._served_model, self._native = cfg.served_model, native
        self._checks = []
        t0 = time.perf_counter()
        try:
            self.info = self._probe_all()
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.perf_counter() - t0
        self.version = self.info.version
        self.supports_native = self.info.native
        self.supports_span_sums = self.info.span_sums
        self.max_model_len = self.info.max_model_len
        log.info("%s", self.describe())

    def describe(self) -> str:
        if self.supports_span_sums:
            path = "spans"
        else:
            path = f"token_states as {self.info.states_encoding}"
        if self.supports_native:
            path = f"native + {path}"
        return f"{self.name} {self.version} at {', '.join(self.base_urls)} (model {self.info.model}, {path})"

    def native_chunks(
        self, texts: Sequence[str], chunk_size: int, *, dimensions: int | None, normalize: bool
    ) -> list[NativeChunks]:
        """Fixed-size chunk means from ``/v1/embeddings`` with ``late_chunking_params`` (vLLM >= 0.33).

        vLLM's ``/v1/embeddings`` of a token_embed server takes no ``dimensions``: with a
        Matryoshka cut the server returns un-normalized means and the cut and the L2 norm are
        applied here (the order of vLLM's own head: projection, cut, normalize). Token ids come
        from ``/tokenize`` of the same text (the response has token ranges, not ids).
        """
        if not self.supports_native:
            raise NotImplementedError(f"{self.describe()} has no native late chunking")
        server_norm = normalize and dimensions is None

        def send(idx: list[int]) -> list[NativeChunks]:
            batch = [texts[k] for k in idx]
            rows = self._call(
                "POST",
                "/v1/embeddings",
                {
                    "model": self._model,
                    "input": batch,
                    "late_chunking_params": {"chunk_size": chunk_size},
                    "use_activation": server_norm,
                },
                decode=lambda r: _json_rows(r, len(batch)),
            )
            out = []
            for text, r in zip(batch, rows):
                ids = [
                    int(t) for t in self._call("POST", "/tokenize", {"model": self._model, "prompt": text})["tokens"]
                ]
                # shape: [n_chunks, dim]
                vec = np.asarray(r["embedding"], dtype=np.float32).reshape(len(r["late_chunking"]["chunks"]), -1)
                if dimensions is not None:  # the server normalized nothing: the rest of the head here
                    vec = apply_head_after_projection(vec, Head(dimensions=dimensions, normalize=normalize))
                ranges = [(int(c["token_range"][0]), int(c["token_range"][1])) for c in r["late_chunking"]["chunks"]]
                out.append(NativeChunks(ids, ranges, np.ascontiguousarray(vec, dtype=np.float32)))
            return out

        # a text's token count is unknown before the server tokenizes it: ~4 characters per token
        return self._run(list(texts), [max(1, len(t) // 4) for t in texts], send) if texts else []
