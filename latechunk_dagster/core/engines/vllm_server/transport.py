"""The HTTP side of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`: one
client per server, the rotation with failover (fewest in flight first; a failing server out for
:attr:`ServerTransport.retry_after_s`, a wrongly answering one out for good), retries with backoff,
requests split by size and sent in a bounded pool, 4xx inputs isolated by bisection, and the
errors the server's answers raise. A part the engine holds (:class:`ServerTransport`); the routes
and the fleet send through it."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from latechunk_dagster.core.engines.vllm_server.info import ServerInfo
from latechunk_dagster.core.engines.vllm_server.settings import ServerSettings
from latechunk_dagster.core.errors import DocumentError, EngineAnswerError, LateChunkError
from latechunk_dagster.core.redact import redact_url, split_userinfo

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split

#: Answers retried with backoff like a dropped connection: overload and transient server faults.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: The only answers that describe the input (bad request, payload too large, unprocessable): they
#: isolate the documents whose inputs the server refuses (bisection, :class:`ServerRejectedError`).
#: Every other 4xx/5xx (401/403/407: credentials; 404: a server no longer serving the model or the
#: route; 405, 501...) is a fault of the server or of the way to it: the server leaves the rotation
#: like one that does not answer, the request is retried on another, and with none left the call
#: fails (:class:`ServerUnavailableError`); no document is blamed, so none loses its stored rows.
INPUT_STATUS = frozenset({400, 413, 422})
#: Answers that say the server, or a proxy in front of it, refuses our credentials.
CREDENTIAL_STATUS = frozenset({401, 403, 407})
#: Default seconds a failing server stays out of the rotation (:attr:`ServerTransport.retry_after_s`).
RETRY_AFTER_S = 10.0


class ServerError(LateChunkError):
    """The vLLM server could not serve a request (base class)."""


class ServerUnavailableError(ServerError):
    """Connection errors, timeouts, 5xx answers or answers that are not about the input (401, 403,
    404, 407...: :data:`INPUT_STATUS`) persisted through every retry on every server."""


class ServerRejectedError(ServerError):
    """The server answered 400/413/422 (:data:`INPUT_STATUS`) for some inputs: they are bad for the
    server, retrying will not help.

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


@dataclass
class Server:
    """One server of the engine's rotation: its client, requests in flight, when it may be tried again."""

    url: str  #: the server's URL as described (credentials masked: :func:`redact_url`)
    client: httpx.Client
    in_flight: int = 0
    down_until: float = 0.0  #: time.monotonic() before which it is out of the rotation
    requests: int = 0  #: requests answered (any status), for logs and tests
    verified: bool = True  #: probed and checked; False: it did not answer at start (probed when due)
    excluded: str = ""  #: why it is out for good: it serves something else, or answered wrongly
    probing: bool = False  #: a late probe of it is running
    info: ServerInfo | None = None  #: what its probe found (None: not probed yet)


class RejectedRequest(Exception):
    """A 4xx (or 501) answer: in the rotation only an :data:`INPUT_STATUS`; to a probe any of them.

    Attributes:
        status: the HTTP status. message: the server's message (:func:`answer_message`).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def answer_message(resp: httpx.Response) -> str:
    """The error message of an answer (vLLM's ``{"error": {"message": ...}}``), at most 300
    characters, URLs in it redacted (:func:`redact_url`)."""
    try:
        body = resp.json()
    except ValueError:
        return redact_url(resp.text[:300])
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return redact_url(str(err.get("message", err))[:300])
        return redact_url(str(err)[:300])
    return redact_url(str(body)[:300])


def failure_hint(last: str) -> str:
    """What a last failure that is not about the input means (the rule of :data:`INPUT_STATUS`)."""
    if any(f"HTTP {code}:" in last for code in CREDENTIAL_STATUS):
        return (
            " (the server or a proxy in front of it refuses our credentials: check api_key and the URL's; "
            "no document is blamed, stored rows are kept)"
        )
    if "HTTP 404:" in last:
        return " (the server no longer serves this model or route; no document is blamed, stored rows are kept)"
    return ""


class ServerTransport:
    """Requests to the engine's servers (module docstring): a client per URL of ``base_url`` (a root
    URL or a list of them), the rotation and the request pool, with ``cfg``'s settings
    (``max_in_flight`` per server).

    A URL's userinfo (``http://user:pass@host``) is sent as basic auth and never appears where the
    URL is described: :attr:`base_urls`, the keys of :meth:`server_states`, log lines and errors
    name each server by :func:`~latechunk_dagster.core.redact.redact_url` of its URL.

    A server silent at start is probed again, when due, by :attr:`late_probe` (the fleet's, set by
    the engine; run on a background thread, it ends with :meth:`probe_done`).

    Raises:
        ValueError: no URL, a repeated one, or one with a query string (the message redacted).
    """

    def __init__(self, base_url: str | Sequence[str], cfg: ServerSettings) -> None:
        urls = [u.rstrip("/") for u in ([base_url] if isinstance(base_url, str) else base_url)]
        if not urls or len(set(urls)) != len(urls):
            shown = redact_url(repr(base_url))
            raise ValueError(f"base_url must be one URL or a list of distinct URLs, got {shown}")
        bare = [split_userinfo(u) for u in urls]
        shown_urls = [redact_url(u) for u in urls]
        if len(set(shown_urls)) != len(shown_urls):
            raise ValueError(f"base_url: servers that differ only in their credentials: {shown_urls}")
        self.base_urls = shown_urls
        self.base_url = shown_urls[0]
        #: seconds a failing server stays out of the rotation before it is tried again
        self.retry_after_s = RETRY_AFTER_S
        self.max_in_flight = max_in_flight = cfg.max_in_flight
        self.timeout_s = cfg.timeout_s
        self.retries = cfg.retries
        self.backoff_s = cfg.backoff_s
        self.max_inputs_per_request = cfg.max_inputs_per_request
        self.max_tokens_per_request = cfg.max_tokens_per_request
        self.retried = 0  #: attempts repeated after a connection error, timeout or 5xx (for logs and tests)
        self.late_probe: Callable[[Server], None] = self.probe_done  #: the fleet's; until set, none
        self._retried_lock = threading.Lock()
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        #: the engine's servers, in the order of ``base_url``
        self.servers: list[Server] = [
            Server(
                shown,
                httpx.Client(
                    base_url=url,
                    auth=httpx.BasicAuth(*auth) if auth else None,
                    timeout=httpx.Timeout(cfg.timeout_s),
                    headers=headers,
                    limits=limits,
                ),
            )
            for shown, (url, auth) in zip(shown_urls, bare)
        ]
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_in_flight * len(urls), thread_name_prefix="vllm-server"
        )

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._pool is None

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
                for srv in self.servers
            }

    def requests_by_server(self) -> dict[str, int]:
        """Requests each server has answered (any status), by URL."""
        with self._lock:
            return {srv.url: srv.requests for srv in self.servers}

    def server_info(self) -> dict[str, ServerInfo | None]:
        """What the probe of each server found, by URL (``None``: not probed yet)."""
        with self._lock:
            return {srv.url: srv.info for srv in self.servers}

    def leave_out(self, srv: Server) -> None:
        """Take ``srv`` out of the rotation for :attr:`retry_after_s` seconds (it did not answer)."""
        with self._lock:
            srv.down_until = time.monotonic() + self.retry_after_s

    def exclude(self, srv: Server, why: str) -> None:
        """Leave ``srv`` out of the rotation for good (it serves something else, or answered wrongly)."""
        with self._lock:
            srv.excluded, srv.down_until = why, float("inf")

    def admit(self, srv: Server, info: ServerInfo) -> None:
        """Put ``srv`` in the rotation, probed and checked: ``info`` is what its probe found."""
        with self._lock:
            srv.verified, srv.down_until, srv.info = True, 0.0, info

    def probe_done(self, srv: Server) -> None:
        """End a late probe of ``srv`` (another may be claimed when it is due again)."""
        with self._lock:
            srv.probing = False

    def _pick(self) -> Server:
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
                for srv in self.servers
                if not (srv.verified or srv.excluded or srv.probing) and srv.down_until <= now
            ]
            for srv in due:  # claimed: one late probe per server at a time
                srv.probing = True
            ready = [srv for srv in self.servers if srv.verified and not srv.excluded]
            up = [srv for srv in ready if srv.down_until <= now]
            pick = min(up, key=lambda srv: (srv.in_flight, srv.requests)) if up else None
            pick = pick or min(ready, key=lambda srv: srv.down_until, default=None)
        for srv in due:
            threading.Thread(target=self.late_probe, args=(srv,), name="vllm-server-probe", daemon=True).start()
        if pick is None:
            states = "; ".join(f"{url}: {state}" for url, state in self.server_states().items())
            raise EngineAnswerError(f"no server of the engine is left to ask ({states})")
        return pick

    def call(
        self,
        method: str,
        path: str,
        payload: dict | None = None,
        *,
        server: Server | None = None,
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
            ServerError: a probe (``server`` given) answered 401, 403 or 407 (:data:`CREDENTIAL_STATUS`).
            RejectedRequest: a 4xx (or 501) answer, not retried: from the rotation (``server=None``) only an
                :data:`INPUT_STATUS`; any other status there counts as a failed attempt, as a 5xx does.
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
                last = f"{srv.url}: {type(exc).__name__}: {redact_url(str(exc))}"
                self._failed(srv, method, path, last, attempt)
                continue
            finally:
                with self._lock:
                    srv.in_flight -= 1
            with self._lock:
                srv.requests += 1
            code = resp.status_code
            if code in RETRY_STATUS or (
                server is None and code >= 400 and code not in INPUT_STATUS and code not in wrong_status
            ):  # not about the input: another server, or the same one after the backoff
                last = f"{srv.url}: HTTP {code}: {answer_message(resp)}"
                self._failed(srv, method, path, last, attempt)
                continue
            if server is not None and code in CREDENTIAL_STATUS:  # a probe: no route or input is at fault
                why = f"HTTP {code}: {answer_message(resp)}"
                raise ServerError(f"{srv.url} answers {method} {path} with {why}{failure_hint(why)}")
            with self._lock:
                srv.down_until = 0.0  # it answered: back in the rotation
            try:
                if resp.status_code in wrong_status:
                    raise EngineAnswerError(f"HTTP {resp.status_code}: {answer_message(resp)}")
                if resp.status_code >= 400:  # 4xx, and 501 ("the model does not support this API")
                    raise RejectedRequest(resp.status_code, answer_message(resp))
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
            + failure_hint(last)
        )

    def _refuse(self, srv: Server, why: str) -> None:
        """Leave a server that answered wrongly out for good (as one that differs at its probe).

        Raises:
            EngineAnswerError: no other server is left in the rotation (``why`` and that).
        """
        with self._lock:
            srv.excluded, srv.down_until = why, float("inf")
            left = [s.url for s in self.servers if s.verified and not s.excluded]
        log.error("%s; left out for good", why)
        if not left:
            raise EngineAnswerError(f"{why}; no other server of the engine is left, so none of its answers is used")

    def _failed(self, srv: Server, method: str, path: str, why: str, attempt: int) -> None:
        """Log a failed attempt and take the server out of the rotation for :attr:`retry_after_s`."""
        with self._lock:
            srv.down_until = time.monotonic() + self.retry_after_s
        log.warning("%s %s%s failed (%s); attempt %d of %d", method, srv.url, path, why, attempt + 1, self.retries + 1)

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

    def run(self, inputs: Sequence[Any], sizes: Sequence[int], send: Callable[[list[int]], list[Any]]) -> list[Any]:
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
            except RejectedRequest as exc:
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

    def close(self) -> None:
        """Stop the request pool (waiting for requests in flight) and close every client. Safe to call twice."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for srv in self.servers:
            srv.client.close()
