"""The fleet of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`: the start-up
probe of each server (version, model, length, width, the states encoding, the span route, native
late chunking: :class:`ServerInfo`), the one rule of a fleet (every server of one engine serves the
same), the late probe of a server silent at start, and the tokenizer check (contract section 1). A
part the engine holds (:class:`ServerFleet`), probing through its transport and routes."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from latechunk_dagster.core.engines.vllm_server.info import BASE64, ServerInfo
from latechunk_dagster.core.engines.vllm_server.spans import SpanRoute
from latechunk_dagster.core.engines.vllm_server.states import TokenStateRoute
from latechunk_dagster.core.engines.vllm_server.transport import (
    RejectedRequest,
    Server,
    ServerError,
    ServerTransport,
    ServerUnavailableError,
    failure_hint,
)
from latechunk_dagster.core.errors import EngineAnswerError, TokenizationMismatchError
from latechunk_dagster.vllm_plugin.protocol import PLUGINS, ROUTE

__all__ = ["PROBE_TEXTS", "ServerFleet", "ServerInfo"]

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split

#: Probe texts for the tokenization check: case, accents, CJK, emoji, digits, punctuation, spacing.
PROBE_TEXTS: tuple[str, ...] = (
    "Berlin is the capital of Germany. It has 3.8M people.",
    "Ünïcödé naïve café — “quotes”, CJK 東京 and emoji 🙂 in one line.",
    "  leading spaces,\ttabs\nand newlines; x=42, y=-3.14e-5 (ok?) [see §2]  ",
)


class ServerFleet:
    """Probing and checking the servers of ``transport`` (module docstring) through the routes.

    Args:
        transport: the engine's requests. state_route, span_route: its routes, whose probes run here.
        served_model: the model asked for (``None``: the first one listed).
        native: ``None`` probes for native late chunking, ``False`` skips the probe, ``True`` requires it.

    Attributes:
        info: what the start-up probe found (:meth:`probe_all` sets it), every server's the same.
    """

    info: ServerInfo

    def __init__(
        self,
        transport: ServerTransport,
        state_route: TokenStateRoute,
        span_route: SpanRoute,
        *,
        served_model: str | None,
        native: bool | None,
    ) -> None:
        self.transport, self.state_route, self.span_route = transport, state_route, span_route
        self.served_model, self.native = served_model, native
        #: (tokenizer, prefix, probes) of each check_tokenization call, replayed on a server that answers late
        self.checks: list[tuple[Any, str, Sequence[str]]] = []

    def probe_all(self) -> ServerInfo:
        """Probe every server; the answering ones must agree (:attr:`info`); the silent ones wait for
        a late probe (:meth:`probe_late`).

        Raises:
            ServerUnavailableError: no server answers.
            ServerError: a server answers wrongly, or the answering servers differ.
        """
        infos: dict[str, ServerInfo] = {}
        silent: list[tuple[Server, ServerUnavailableError]] = []
        for srv in self.transport.servers:
            try:
                infos[srv.url] = self._probe(srv)
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
        for srv in self.transport.servers:
            srv.info = infos.get(srv.url)
        for srv, exc in silent:
            srv.verified = False
            srv.down_until = time.monotonic() + self.transport.retry_after_s
            log.warning(
                "%s does not answer (%s); left out of the rotation, probed again at the first request after %.0f s",
                srv.url,
                exc,
                self.transport.retry_after_s,
            )
        self.info = info
        return info

    def probe_late(self, srv: Server) -> None:
        """Background probe of a server that did not answer at start: same probe and checks as at start
        (the transport's :attr:`~ServerTransport.late_probe`)."""
        try:
            self._verify(srv)
        finally:
            self.transport.probe_done(srv)

    def _verify(self, srv: Server) -> None:
        transport = self.transport
        try:
            info = self._probe(srv)
            if info != self.info:
                raise ServerError(_differs(srv.url, info, "the engine's servers", self.info))
            for tokenizer, prefix, probes in list(self.checks):
                self._check_tokenization(srv, tokenizer, prefix, probes)
        except ServerUnavailableError as exc:
            transport.leave_out(srv)
            log.warning("%s still does not answer (%s); probed again in %.0f s", srv.url, exc, transport.retry_after_s)
            return
        except (ServerError, TokenizationMismatchError) as exc:
            transport.exclude(srv, str(exc))
            log.error("%s answers but differs from the other servers; left out for good: %s", srv.url, exc)
            return
        except Exception as exc:  # the engine closed under the probe, or an unexpected answer
            transport.leave_out(srv)
            if not transport.closed:
                log.warning("late probe of %s failed (%s: %s); probed again later", srv.url, type(exc).__name__, exc)
            return
        transport.admit(srv, info)
        log.info("%s answers and matches the other servers: in the rotation", srv.url)

    def _probe(self, srv: Server) -> ServerInfo:
        """What ``srv`` serves (:class:`ServerInfo`), from its answers to the probes.

        Raises:
            ServerUnavailableError: it does not answer.
            ServerError: it answers, but not as a ``token_embed`` pooling server of the asked model,
                or its span route or raw states answer wrongly.
        """
        call, native = self.transport.call, self.native
        try:
            version = str(call("GET", "/version", server=srv).get("version", "unknown"))
            models = call("GET", "/v1/models", server=srv).get("data") or []
        except RejectedRequest as exc:  # 401/403/407 (credentials), 404 (not a vLLM server)...
            raise ServerError(f"{srv.url} answers its probe with {exc}{failure_hint(str(exc))}") from None
        if not models:
            raise ServerError(f"{srv.url}/v1/models lists no model")
        served = self.served_model
        card = next((m for m in models if m.get("id") == served), None) if served else models[0]
        if card is None:
            raise ServerError(f"{srv.url} serves {[m.get('id') for m in models]}, not {served!r}")
        model = str(card["id"])
        max_len = int(card.get("max_model_len") or 0)
        try:
            [probe] = self.state_route.request([[0, 0]], model, BASE64, None, server=srv)
        except RejectedRequest as exc:
            raise ServerError(
                f"{srv.url} ({model}) refuses per-token pooling (HTTP {exc.status}: {exc.message}); start it "
                'with --runner pooling --pooler-config \'{"task": "token_embed"}\''
            ) from None
        except EngineAnswerError as exc:
            raise ServerError(f"{srv.url} ({model}) answers /pooling wrongly: {exc}") from None
        encoding = self.state_route.probe_raw_states(srv, model, probe)
        span_sums = self.span_route.probe(srv, probe)
        has_native = False
        if native is not False:
            try:
                body = call(
                    "POST",
                    "/v1/embeddings",
                    {"model": model, "input": ["probe"], "late_chunking_params": {"chunk_size": 1}},
                    server=srv,
                )
                has_native = bool(body.get("data")) and "late_chunking" in body["data"][0]
            except RejectedRequest:
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
        self.checks.append((tokenizer, prefix, probes))
        for srv in self.transport.servers:
            if srv.verified:
                self._check_tokenization(srv, tokenizer, prefix, probes)

    def _check_tokenization(self, srv: Server, tokenizer: Any, prefix: str, probes: Sequence[str]) -> None:
        model = self.info.model
        for text in probes:
            ours = list(tokenizer(prefix + text, add_special_tokens=True)["input_ids"])
            payload = {"model": model, "prompt": prefix + text}
            theirs = [int(t) for t in self.transport.call("POST", "/tokenize", payload, server=srv)["tokens"]]
            if ours != theirs:
                at = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
                raise TokenizationMismatchError(
                    f"{srv.url} ({model}) tokenizes {text[:40]!r} into {len(theirs)} ids, we into "
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
