"""The encode step: the one engine call of a prepared batch (token states, span sums or native chunks).

An object the chunker holds beside its host part (:class:`~latechunk_dagster.core.chunker.LateChunker`);
only this step uses the engine. A server engine's step is wrapped by
:class:`~latechunk_dagster.core.server_refusals.ServerRefusals`, which turns the documents a server
rejects into per-document errors (the chunker picks it for a server engine).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from latechunk_dagster.core.batches import EncoderInputs
from latechunk_dagster.core.engines.base import Engine, NativeChunks
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.head import Head

#: What an engine call of a batch answers: (per window float32 ``[len(window), dim]`` token states,
#: or its piece sums on the span path; the engine's chunk means per native text; ``{batch index:
#: error}`` of the documents the engine refused).
EngineAnswer = tuple[list[np.ndarray], list[NativeChunks], dict[int, DocumentError]]


class EncodeStepLike(Protocol):
    """What the chunker asks of its encode step."""

    engine: Engine

    def encode_inputs(self, inputs: EncoderInputs, head: Head) -> EngineAnswer: ...

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]: ...


class EncodeStep:
    """The engine call of a batch on ``engine``.

    Args:
        engine: the :class:`~latechunk_dagster.core.engines.Engine` that encodes.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def encode_inputs(self, inputs: EncoderInputs, head: Head) -> EngineAnswer:
        """One engine call over a batch's inputs (the host worker pool's engine thread calls it too).

        Args:
            inputs: from :meth:`ChunkerHost.encoder_inputs
                <latechunk_dagster.core.chunker_host.ChunkerHost.encoder_inputs>`.
            head: the chunker's head (the native path's Matryoshka cut and normalization).

        Returns:
            :data:`EngineAnswer`: the rows (span sums when ``inputs.pieces`` is set), the native chunk
            means, and no refused document (an engine refuses none; :class:`ServerRefusals
            <latechunk_dagster.core.server_refusals.ServerRefusals>` does).
        """
        if inputs.pieces is None:
            rows = self.token_states(inputs.windows)
        else:
            rows = self.engine.span_sums(inputs.windows, inputs.pieces) if inputs.windows else []
        native: list[NativeChunks] = []
        if inputs.native_texts:
            native = self.engine.native_chunks(
                inputs.native_texts, inputs.chunk_size, dimensions=head.dimensions, normalize=head.normalize
            )
        return rows, native, {}

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Per-token rows (projection applied, normalization off) for each prompt, float32 ``[len, dim]``."""
        return self.engine.token_states(prompts) if prompts else []
