"""The span-sum route of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`
(a server started with the package's plugins, ``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans``,
:mod:`latechunk_dagster.vllm_plugin.endpoint`): ``POST /latechunk/span_sums`` with each window's ids
and the row ranges of its pieces, answered in binary, float32 ``(hi, lo, count)`` per piece
(:mod:`latechunk_dagster.vllm_plugin.protocol`), checked against the pieces asked for
(:func:`~latechunk_dagster.core.engines.base.pair_rows`). A server without the route: the sums of
the token states (:meth:`Engine.span_sums <latechunk_dagster.core.engines.base.Engine.span_sums>`),
whose bytes cross the network instead: the engine chooses. A part the engine holds
(:class:`SpanRoute`), sending through its transport."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx
import numpy as np

from latechunk_dagster.core.engines.base import check_pieces, pair_rows
from latechunk_dagster.core.engines.vllm_server.transport import RejectedRequest, Server, ServerError, ServerTransport
from latechunk_dagster.core.errors import EngineAnswerError
from latechunk_dagster.vllm_plugin.protocol import DIM_HEADER, FORMAT_VERSION, PLUGINS, ROUTE, decode_answer

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split

#: Ranges of the start-up probe's span request on its two-token prompt: each token alone.
PROBE_PIECES = np.array([[0, 1], [1, 2]], dtype=np.int64)


class SpanRoute:
    """Span sums from the server's span route (module docstring), sent through ``transport``."""

    def __init__(self, transport: ServerTransport) -> None:
        self.transport = transport

    def request(
        self, prompts: list[list[int]], pieces: Sequence[np.ndarray], dim: int, server: Server | None = None
    ) -> list[np.ndarray]:
        """Span sums of ``prompts``' pieces from the span route, float32 ``[n_pieces, 2 * dim]`` each
        (a prompt without pieces is not sent).

        Raises:
            EngineAnswerError: an answer of another size, width or count than asked for (:func:`pair_rows`),
                or one that is not bound to its window (its digest,
                :func:`~latechunk_dagster.vllm_plugin.protocol.answer_digest`).
        """
        sent = [k for k, p in enumerate(pieces) if len(p)]
        windows = [(prompts[k], pieces[k][:, :2].ravel().tolist()) for k in sent]

        def decode(resp: httpx.Response) -> list[np.ndarray]:
            got = resp.headers.get(DIM_HEADER)
            if got != str(dim):
                raise EngineAnswerError(f"{DIM_HEADER} {got!r}, not the probed width {dim}")
            try:
                answers = decode_answer(resp.content, windows, dim)  # each checked against its digest
            except ValueError as exc:
                raise EngineAnswerError(str(exc)) from None
            return [pair_rows(a, pieces[k], "the server") for k, a in zip(sent, answers)]

        out = [np.zeros((0, 2 * dim), dtype=np.float32) for _ in prompts]
        if sent:
            payload = {"windows": [{"ids": ids, "spans": spans} for ids, spans in windows]}
            answers = self.transport.call(
                "POST", ROUTE, payload, server=server, decode=decode, wrong_status=frozenset({404, 405})
            )
            for k, a in zip(sent, answers):
                out[k] = a
        return out

    def probe(self, srv: Server, probe: np.ndarray) -> bool:
        """True when the server answers the span route at our format version, and its sums of the
        probe's two tokens (each alone) are their states (checked like every answer: count, width,
        counts, then the values within float32 rounding).

        Raises:
            ServerError: the route answers, but wrongly (e.g. the route without the pooler plugin:
                token rows instead of sums), naming the server and how to start it.
        """
        try:
            found = self.transport.call("GET", ROUTE, server=srv)
        except RejectedRequest as exc:
            if exc.status in (404, 405):  # no such route: a server without the plugins
                return False
            raise ServerError(f"{srv.url}{ROUTE} answers HTTP {exc.status}: {exc.message}") from None
        version = found.get("version") if isinstance(found, dict) else None
        if version != FORMAT_VERSION:
            log.warning("%s%s speaks span format %r, we %d: token states", srv.url, ROUTE, version, FORMAT_VERSION)
            return False
        dim = int(probe.shape[1])
        try:
            [pairs] = self.request([[0, 0]], [PROBE_PIECES], dim, server=srv)
        except (RejectedRequest, EngineAnswerError) as exc:
            why = f"HTTP {exc.status}: {exc.message}" if isinstance(exc, RejectedRequest) else str(exc)
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

    def span_sums(self, prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray], dim: int) -> list[np.ndarray]:
        """:meth:`Engine.span_sums <latechunk_dagster.core.engines.base.Engine.span_sums>` from the span
        route of servers of width ``dim``: ``(2 * dim + 1) * 4`` bytes per piece cross the network.

        Raises:
            ValueError: pieces that are not row ranges of their prompt (:func:`check_pieces`).
            ServerRejectedError: the server answered 4xx for some prompts (indices in ``rejected``).
            EngineAnswerError: the last server left answered wrongly (another size, width or count).
            ServerUnavailableError: retries exhausted.
        """
        check_pieces(prompts, pieces)
        ps = [list(map(int, p)) for p in prompts]

        def send(idx: list[int]) -> list[np.ndarray]:
            return self.request([ps[k] for k in idx], [pieces[k] for k in idx], dim)

        return self.transport.run(ps, [len(p) for p in ps], send) if ps else []
