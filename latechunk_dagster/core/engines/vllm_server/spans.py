"""The span-sum route of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`
(a server started with the package's plugins, ``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans``,
:mod:`latechunk_dagster.vllm_plugin.endpoint`): ``POST /latechunk/span_sums`` with each window's ids
and the row ranges of its pieces, answered in binary, float32 ``(hi, lo, count)`` per piece
(:mod:`latechunk_dagster.vllm_plugin.protocol`), checked against the pieces asked for
(:func:`~latechunk_dagster.core.engines.base.pair_rows`). A server without the route: the sums of
the token states (:meth:`Engine.span_sums <latechunk_dagster.core.engines.base.Engine.span_sums>`),
whose bytes cross the network instead."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx
import numpy as np

from latechunk_dagster.core.engines.base import check_pieces, pair_rows
from latechunk_dagster.core.engines.vllm_server.states import TokenStateRoute
from latechunk_dagster.core.engines.vllm_server.transport import ServerError, _Rejected, _Server
from latechunk_dagster.core.errors import EngineAnswerError
from latechunk_dagster.vllm_plugin.protocol import DIM_HEADER, FORMAT_VERSION, PLUGINS, ROUTE, decode_answer

log = logging.getLogger(__package__)  # the engine's one logger, named as before the split

#: Ranges of the start-up probe's span request on its two-token prompt: each token alone.
_PROBE_PIECES = np.array([[0, 1], [1, 2]], dtype=np.int64)


class SpanRoute(TokenStateRoute):
    """Span sums from the server's span route where it has one (module docstring)."""

    supports_span_sums: bool  #: the probe found the route (the engine sets it)

    def _span_request(
        self, prompts: list[list[int]], pieces: Sequence[np.ndarray], dim: int, server: _Server | None = None
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
            answers = self._call(
                "POST", ROUTE, payload, server=server, decode=decode, wrong_status=frozenset({404, 405})
            )
            for k, a in zip(sent, answers):
                out[k] = a
        return out

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
