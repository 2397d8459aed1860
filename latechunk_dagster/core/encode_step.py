"""The encode step: the one engine call of a prepared batch (token states, span sums or native chunks).

A part of :class:`~latechunk_dagster.core.chunker.LateChunker`; only this step uses the engine.
"""

from __future__ import annotations

import numpy as np

from latechunk_dagster.core.batches import EncodedBatch, EncoderInputs, PreparedBatch
from latechunk_dagster.core.chunker_state import ChunkerState
from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.errors import (
    DocumentError,
)
from latechunk_dagster.core.tokenization import (
    encoder_text,
)


class Encoding(ChunkerState):
    """The encode step of :class:`~latechunk_dagster.core.chunker.LateChunker`."""

    def encode(self, prepared: PreparedBatch) -> EncodedBatch:
        """The one engine call of a prepared batch: token states of every window (and native chunk means).

        Only this step uses the engine; call it from one thread at a time.
        """
        rows, native, refused = self.encode_inputs(self.encoder_inputs(prepared))
        prepared.refuse(refused)
        return EncodedBatch(prepared, rows, native)

    def encoder_inputs(self, prepared: PreparedBatch) -> EncoderInputs:
        """The engine inputs of a prepared batch: its windows, and the native path's texts (prefix
        prepended, BOM left out: :func:`encoder_text`) with the strategy's chunk size."""
        native_docs = [i for i, *_ in prepared.native_jobs]
        return EncoderInputs(
            windows=prepared.windows,
            window_docs=[j[0] for j in prepared.state_jobs for _ in j[3].windows],
            native_texts=[encoder_text(self.prefix, prepared.texts[i]) for i in native_docs],
            native_docs=native_docs,
            chunk_size=prepared.strategy.chunk_size if native_docs else 0,  # type: ignore[attr-defined]  # native: one FixedTokens
            ids=list(prepared.ids),
            pieces=prepared.window_pieces,
        )

    def encode_inputs(
        self, inputs: EncoderInputs
    ) -> tuple[list[np.ndarray], list[NativeChunks], dict[int, DocumentError]]:
        """The engine call of :meth:`encode` on its inputs alone (the host worker pool calls it too).

        Args:
            inputs: from :meth:`encoder_inputs`.

        Returns:
            (per window float32 ``[len(window), dim]`` token states, or its piece sums on the span
            path (``inputs.pieces`` set), the engine's chunk means per native text,
            ``{batch index: error}`` of documents the engine refused). The in-process engine refuses
            none; :class:`~latechunk_dagster.core.remote.RemoteLateChunker` refuses the documents a
            server answers 4xx for, and the rows and means are then those of the other documents
            (``inputs.without(refused)``), for :meth:`PreparedBatch.refuse` to match.
        """
        if inputs.pieces is None:
            rows = self._token_rows(inputs.windows)
        else:
            rows = self._engine().span_sums(inputs.windows, inputs.pieces) if inputs.windows else []
        native: list[NativeChunks] = []
        if inputs.native_texts:
            native = self._engine().native_chunks(
                inputs.native_texts, inputs.chunk_size, dimensions=self.head.dimensions, normalize=self.head.normalize
            )
        return rows, native, {}

    def _token_rows(self, prompts: list[list[int]]) -> list[np.ndarray]:
        """Per-token rows (projection applied, normalization off) for each prompt, float32."""
        return self._engine().token_states(prompts) if prompts else []
