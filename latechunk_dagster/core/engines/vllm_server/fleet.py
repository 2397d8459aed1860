"""The fleet of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`: the start-up
probe of each server (version, model, length, width, the states encoding, the span route, native
late chunking: :class:`ServerInfo`), the one rule of a fleet (every server of one engine serves the
same), the late probe of a server silent at start, and the tokenizer check (contract section 1)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from latechunk_dagster.core.engines.vllm_server.spans import SpanRoute
from latechunk_dagster.core.engines.vllm_server.states import BASE64
from latechunk_dagster.core.engines.vllm_server.transport import (
    ServerError,
    ServerUnavailableError,
    _hint,
    _Rejected,
    _Server,
)
from latechunk_dagster.core.errors import EngineAnswerError, TokenizationMismatchError
from latechunk_dagster.vllm_plugin.protocol import PLUGINS, ROUTE

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split

#: Probe texts for the tokenization check: case, accents, CJK, emoji, digits, punctuation, spacing.
PROBE_TEXTS: tuple[str, ...] = (
    "Berlin is the capital of Germany. It has 3.8M people.",
    "Ünïcödé naïve café — “quotes”, CJK 東京 and emoji 🙂 in one line.",
    "  leading spaces,\ttabs\nand newlines; x=42, y=-3.14e-5 (ok?) [see §2]  ",
)


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


class ServerFleet(SpanRoute):
    """Probing and checking the engine's servers (module docstring)."""

    _served_model: str | None  #: the model asked for (``None``: the first one listed)
    _native: bool | None  #: ``None`` probes for native late chunking, ``False`` skips the probe
    #: (tokenizer, prefix, probes) of each check_tokenization call, replayed on a server that answers late
    _checks: list[tuple[Any, str, Sequence[str]]]

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

    def _probe(self, srv: _Server, served_model: str | None, native: bool | None) -> ServerInfo:
        try:
            version = str(self._call("GET", "/version", server=srv).get("version", "unknown"))
            models = self._call("GET", "/v1/models", server=srv).get("data") or []
        except _Rejected as exc:  # 401/403/407 (credentials), 404 (not a vLLM server)...
            raise ServerError(f"{srv.url} answers its probe with {exc}{_hint(str(exc))}") from None
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
