"""A composed chunker: a host part and an encode step holding the engine (:class:`ComposedChunker`), the
engine's lifecycle (started, closed, a context manager) and the three steps between them (:meth:`~ComposedChunker.
prepare`, :meth:`~ComposedChunker.encode`, :meth:`~ComposedChunker.pool_results`).
:class:`~latechunk_dagster.core.chunker.LateChunker` is this class with a named engine's start, ``chunk`` and
``embed_queries``; the steps' order is in that module's docstring."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, Self

from latechunk_dagster.core.batches import EncodedBatch, EncoderInputs, PreparedBatch
from latechunk_dagster.core.chunker_host import ChunkerHost
from latechunk_dagster.core.chunking.base import ChunkingStrategy
from latechunk_dagster.core.chunking.given import GivenChunkList
from latechunk_dagster.core.encode_step import EncodeStep, EncodeStepLike, EngineAnswer
from latechunk_dagster.core.engine_traits import EngineTraits
from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.errors import DocumentBatchError, DocumentError
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.results import ChunkedDocument

__all__ = ["ComposedChunker", "PathName"]

PathName = Literal["native", "spans", "token_states"]


def _encode_step_for(engine: Engine) -> EncodeStepLike:
    """The encode step of ``engine``: :class:`EncodeStep`, wrapped in :class:`ServerRefusals
    <latechunk_dagster.core.server_refusals.ServerRefusals>` for a vLLM server engine (imported only
    then: the server engine's modules import httpx)."""
    step = EncodeStep(engine)
    if engine.name == "vllm-server":
        from latechunk_dagster.core.server_refusals import ServerRefusals

        return ServerRefusals(step)
    return step


class ComposedChunker:
    """A host part and an engine (:meth:`compose`), with the engine's lifecycle and the three steps; the
    chunker is :class:`~latechunk_dagster.core.chunker.LateChunker`, which documents its construction."""

    @classmethod
    def compose(cls, host: ChunkerHost, engine: Engine) -> Self:
        """The chunker of a host part and an engine (already started, or deferred), which it owns
        from then on (:meth:`close` closes it). The host's engine traits are the engine's."""
        chunker = cls.__new__(cls)
        chunker._compose(host, engine)
        return chunker

    def _compose(self, host: ChunkerHost, engine: Engine) -> None:
        #: the host part (frozen: settings change by replacing it)
        self.host: ChunkerHost = replace(host, engine=EngineTraits.of(engine))
        self._step: EncodeStepLike | None = _encode_step_for(engine)

    # -- engine lifecycle -------------------------------------------------------------
    @property
    def engine(self) -> Engine | None:
        """The engine (``None`` after :meth:`close`)."""
        return self._step.engine if self._step is not None else None

    @engine.setter
    def engine(self, engine: Engine | None) -> None:
        # None: the chunker lets go of its engine without closing it (the caller closes it)
        if engine is None:
            self._step = None
        else:
            self._compose(self.host, engine)

    @property
    def engine_started(self) -> bool:
        """True once the engine runs (always for an engine started at construction; a deferred one,
        ``engine_start="first_encode"``, starts on the first engine call); False after :meth:`close`."""
        return self.engine is not None and bool(getattr(self.engine, "started", True))

    def _live_step(self) -> EncodeStepLike:
        if self._step is None:
            raise RuntimeError("LateChunker is closed")
        return self._step

    @property
    def engine_version(self) -> str:
        """Version of the engine (vLLM's ``__version__``; transformers' for the light engine; a server's),
        recorded in lineage; ``"closed"`` after :meth:`close`."""
        return self.engine.version if self.engine is not None else "closed"

    @property
    def vllm_version(self) -> str:
        """Deprecated name of :attr:`engine_version` (it is transformers' version on the light engine)."""
        warnings.warn("LateChunker.vllm_version is deprecated: use engine_version", DeprecationWarning, stacklevel=2)
        return self.engine_version

    @property
    def startup_seconds(self) -> float:
        """Seconds the engine took to start (0.0 before a deferred engine starts, and after close)."""
        return self.engine.startup_seconds if self.engine is not None else 0.0

    @property
    def in_process(self) -> bool:
        """True when the engine's core runs in this process."""
        return bool(getattr(self.engine, "in_process", False))

    @property
    def dtype(self) -> str:
        """The model dtype of the engine's states, as the engine resolved it (``"float32"``,
        ``"float16"``...; the in-process engine's, not the ``"auto"`` it was asked for); ``"auto"``
        for an engine that cannot tell (a vLLM server does not report its dtype)."""
        return str(getattr(self.engine, "dtype", "auto"))

    def close(self) -> None:
        """Shut the engine down, child processes included. Safe to call twice."""
        step, self._step = self._step, None
        if step is not None:
            step.engine.close()

    def __enter__(self) -> Self:
        return self

    # -- the three steps --------------------------------------------------------------
    def prepare(
        self,
        texts: Sequence[str],
        strategy: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy],
        *,
        doc_ids: Sequence[str] | None = None,
        chunks: Sequence[GivenChunkList | None] | None = None,
        engine_path: PathName | None = None,
    ) -> PreparedBatch:
        """Host work before the encoder: :meth:`ChunkerHost.prepare
        <latechunk_dagster.core.chunker_host.ChunkerHost.prepare>` (check each text, tokenize the batch in
        one call, spans, window plans; per-document failures kept in the batch). Touches no engine, so it
        may run in another thread while :meth:`encode` runs.

        Raises:
            RuntimeError: the chunker is closed.
            TypeError, ValueError: as :meth:`chunk`.
            ModelNotSupportedError, HeadNotSupportedError: ``engine_path`` cannot serve this model or strategy.
        """
        self._live_step()
        return self.host.prepare(texts, strategy, doc_ids=doc_ids, chunks=chunks, engine_path=engine_path)

    def encode(self, prepared: PreparedBatch) -> EncodedBatch:
        """The one engine call of a prepared batch: token states of every window (or their span sums),
        and native chunk means. Only this step uses the engine; call it from one thread at a time."""
        rows, native, refused = self.encode_inputs(self.host.encoder_inputs(prepared))
        prepared.refuse(refused)
        return EncodedBatch(prepared, rows, native)

    def encoder_inputs(self, prepared: PreparedBatch) -> EncoderInputs:
        """The engine inputs of a prepared batch (:meth:`ChunkerHost.encoder_inputs
        <latechunk_dagster.core.chunker_host.ChunkerHost.encoder_inputs>`)."""
        return self.host.encoder_inputs(prepared)

    def encode_inputs(self, inputs: EncoderInputs) -> EngineAnswer:
        """The engine call of :meth:`encode` on its inputs alone (the host worker pool's engine thread
        calls it): :meth:`EncodeStep.encode_inputs <latechunk_dagster.core.encode_step.EncodeStep.encode_inputs>`,
        with a vLLM server's rejected documents refused alone (:mod:`latechunk_dagster.core.server_refusals`).

        Returns:
            (per window float32 rows, the native chunk means, ``{batch index: error}`` of refused documents).
        """
        return self._live_step().encode_inputs(inputs, self.host.head)

    def pool_results(self, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return") -> list[Any]:
        """Host work after the encoder: span means, the head, the non-finite check
        (:func:`~latechunk_dagster.core.finishing.pool_results`).

        Returns:
            One entry per document in input order: a :class:`ChunkedDocument` for a single-strategy batch,
            ``{name: ChunkedDocument}`` for several granularities, or the ``DocumentError`` in its place.

        Raises:
            DocumentBatchError: some documents failed and ``errors="raise"``.
            TokenizationMismatchError: vLLM's token ids or chunk ranges differ from ours (native path).
        """
        return self.host.pool_results(encoded, errors=errors)

    def finish(
        self, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return"
    ) -> list[ChunkedDocument | DocumentError]:
        """Deprecated name of :meth:`pool_results` for a single-strategy batch.

        Raises:
            TypeError: the batch has several granularities (:meth:`pool_results`).
        """
        warnings.warn("LateChunker.finish is deprecated: use pool_results", DeprecationWarning, stacklevel=2)
        _ = encoded.prepared.strategy  # TypeError for several granularities
        return self.pool_results(encoded, errors=errors)

    def finish_granularities(
        self, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return"
    ) -> list[dict[str, ChunkedDocument] | DocumentError]:
        """Deprecated: :meth:`pool_results` with every document's results as ``{name: ChunkedDocument}``
        (a single strategy's under its name ``""``)."""
        warnings.warn(
            "LateChunker.finish_granularities is deprecated: use pool_results", DeprecationWarning, stacklevel=2
        )
        results = self.pool_results(encoded, errors="return")
        if encoded.prepared.granularities.single:
            results = [r if isinstance(r, DocumentError) else {r.granularity: r} for r in results]
        failures = [r for r in results if isinstance(r, DocumentError)]
        if failures and errors == "raise":
            raise DocumentBatchError(results, failures)
        return results
