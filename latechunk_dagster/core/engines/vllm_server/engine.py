"""The engine class of a vLLM server over HTTP (the package docstring,
:mod:`latechunk_dagster.core.engines.vllm_server`): the parts it holds, put together. Its transport
(:class:`~.transport.ServerTransport`: the requests, the rotation, failover and the errors), its
routes (:class:`~.states.TokenStateRoute`, :class:`~.spans.SpanRoute`, :class:`~.native.NativeRoute`)
and its fleet (:class:`~.fleet.ServerFleet`: the probes and the one rule of a fleet) are objects
built in :meth:`VLLMServerEngine.__init__`, not bases: the engine's one base is
:class:`~latechunk_dagster.core.engines.base.Engine`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from latechunk_dagster.core.engines.base import Engine, NativeChunks
from latechunk_dagster.core.engines.vllm_server.fleet import PROBE_TEXTS, ServerFleet
from latechunk_dagster.core.engines.vllm_server.info import ServerInfo
from latechunk_dagster.core.engines.vllm_server.native import NativeRoute
from latechunk_dagster.core.engines.vllm_server.settings import ServerSettings
from latechunk_dagster.core.engines.vllm_server.spans import SpanRoute
from latechunk_dagster.core.engines.vllm_server.states import TokenStateRoute
from latechunk_dagster.core.engines.vllm_server.transport import ServerTransport

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split


class VLLMServerEngine(Engine):
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
        self.transport = ServerTransport(base_url, cfg)
        self.state_route = TokenStateRoute(self.transport)
        self.span_route = SpanRoute(self.transport)
        self.native_route = NativeRoute(self.transport)
        self.fleet = ServerFleet(
            self.transport, self.state_route, self.span_route, served_model=cfg.served_model, native=native
        )
        self.transport.late_probe = self.fleet.probe_late
        t0 = time.perf_counter()
        try:
            info = self.fleet.probe_all()
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.perf_counter() - t0
        self.version = info.version
        self.supports_native = info.native
        self.supports_span_sums = info.span_sums
        self.max_model_len = info.max_model_len
        log.info("%s", self.describe())

    # -- what the fleet found, and the transport's settings and counters, as the engine's own -------

    @property
    def info(self) -> ServerInfo:
        """What the start-up probe found (:class:`ServerInfo`), every server's the same (the fleet's)."""
        return self.fleet.info

    @info.setter
    def info(self, value: ServerInfo) -> None:
        self.fleet.info = value

    @property
    def base_urls(self) -> list[str]:
        """Each server's root URL, credentials masked."""
        return self.transport.base_urls

    @property
    def base_url(self) -> str:
        """The first server's root URL, credentials masked."""
        return self.transport.base_url

    @property
    def retry_after_s(self) -> float:
        """Seconds a failing server stays out of the rotation before it is tried again (default 10)."""
        return self.transport.retry_after_s

    @retry_after_s.setter
    def retry_after_s(self, value: float) -> None:
        self.transport.retry_after_s = value

    @property
    def retried(self) -> int:
        """Attempts repeated after a connection error, timeout or 5xx (for logs and tests)."""
        return self.transport.retried

    @property
    def max_in_flight(self) -> int:
        """Requests in flight per server at most."""
        return self.transport.max_in_flight

    @property
    def timeout_s(self) -> float:
        """Seconds a request may take."""
        return self.transport.timeout_s

    @property
    def retries(self) -> int:
        """Extra attempts of a failing request."""
        return self.transport.retries

    @property
    def backoff_s(self) -> float:
        """First backoff wait in seconds (doubled per attempt, jittered)."""
        return self.transport.backoff_s

    @property
    def max_inputs_per_request(self) -> int:
        """Inputs per request at most."""
        return self.transport.max_inputs_per_request

    @property
    def max_tokens_per_request(self) -> int:
        """Tokens per request at most."""
        return self.transport.max_tokens_per_request

    def server_states(self) -> dict[str, str]:
        """Each server's state by URL: ``"up"``, ``"down"`` (failed lately, tried again when due),
        ``"not probed"`` (silent since start) or ``"excluded: <why>"``."""
        return self.transport.server_states()

    def requests_by_server(self) -> dict[str, int]:
        """Requests each server has answered (any status), by URL."""
        return self.transport.requests_by_server()

    def server_info(self) -> dict[str, ServerInfo | None]:
        """What the probe of each server found, by URL (``None``: not probed yet, silent since start):
        its paths (``span_sums``, ``native``) and how it sends token states (``states_encoding``)."""
        return self.transport.server_info()

    def check_tokenization(self, tokenizer: Any, prefix: str = "", probes: Sequence[str] = PROBE_TEXTS) -> None:
        """Refuse a server whose tokenizer differs from ours (contract section 1): each probe (with
        ``prefix``) goes to ``POST /tokenize`` (special tokens on) of every server and through
        ``tokenizer`` locally; the ids must be equal. A server that answers late is checked too.

        Raises:
            TokenizationMismatchError: the first probe whose ids differ, with the first differing position.
        """
        self.fleet.check_tokenization(tokenizer, prefix, probes)

    # -- the Engine interface -------------------------------------------------------------------

    def describe(self) -> str:
        if self.supports_span_sums:
            path = "spans"
        else:
            path = f"token_states as {self.info.states_encoding}"
        if self.supports_native:
            path = f"native + {path}"
        return f"{self.name} {self.version} at {', '.join(self.base_urls)} (model {self.info.model}, {path})"

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Per-token states (``use_activation: false``) of our token ids, float32 ``[len(prompt), dim]`` each.

        Raises:
            ServerRejectedError: the server answered 4xx for some prompts (indices in ``rejected``).
            ServerUnavailableError: retries exhausted.
        """
        return self.state_route.token_states(prompts, self.info)

    def span_sums(self, prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray]) -> list[np.ndarray]:
        """:meth:`Engine.span_sums` from the server's span route where it has one (``supports_span_sums``:
        ``(2 * dim + 1) * 4`` bytes per piece cross the network), else from its token states.

        Raises:
            ValueError: pieces that are not row ranges of their prompt (:func:`check_pieces`).
            ServerRejectedError: the server answered 4xx for some prompts (indices in ``rejected``).
            EngineAnswerError: the last server left answered wrongly (another size, width or count).
            ServerUnavailableError: retries exhausted.
        """
        if not self.supports_span_sums:
            return super().span_sums(prompts, pieces)
        return self.span_route.span_sums(prompts, pieces, self.info.dim)

    def native_chunks(
        self, texts: Sequence[str], chunk_size: int, *, dimensions: int | None, normalize: bool
    ) -> list[NativeChunks]:
        """Fixed-size chunk means from ``/v1/embeddings`` with ``late_chunking_params`` (vLLM >= 0.33;
        :meth:`NativeRoute.native_chunks <.native.NativeRoute.native_chunks>`).

        Raises:
            NotImplementedError: the servers have no native late chunking.
        """
        if not self.supports_native:
            raise NotImplementedError(f"{self.describe()} has no native late chunking")
        return self.native_route.native_chunks(
            texts, chunk_size, self.info.model, dimensions=dimensions, normalize=normalize
        )

    def close(self) -> None:
        """Stop the request pool and close every connection. Safe to call twice."""
        transport = getattr(self, "transport", None)  # None: the URLs were refused in __init__
        if transport is not None:
            transport.close()
