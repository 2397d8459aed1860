"""What passes between the chunker's steps: a prepared batch, its engine inputs, an encoded batch.

Plain data (a host worker process pickles :class:`EncoderInputs`); made by
:mod:`latechunk_dagster.core.preparing` and :mod:`latechunk_dagster.core.encode_step`, read by
:mod:`latechunk_dagster.core.finishing`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latechunk_dagster.core.chunking.base import ChunkingStrategy
from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.errors import (
    DocumentError,
)
from latechunk_dagster.core.granularities import DocumentSpans, Granularities
from latechunk_dagster.core.tokenization import (
    Tokenization,
)
from latechunk_dagster.core.windows import WindowPlan

#: One document ready for the encoder: (input index, its tokenization, its spans of every
#: granularity and their atoms, its window plan).
DocumentJob = tuple[int, Tokenization, DocumentSpans, WindowPlan]


@dataclass
class PreparedBatch:
    """A batch after :meth:`LateChunker.prepare`: everything the host does before the encoder.

    Attributes:
        texts, ids: the documents and their ids, in input order.
        granularities: the call's checked :class:`~latechunk_dagster.core.granularities.Granularities`
            (one, named ``""``, for a single strategy).
        results: one entry per document: the ``DocumentError`` that refused it, else ``None``.
        native_jobs: documents the engine chunks itself (native path, one window each).
        state_jobs: documents whose windows the engine encodes (their windows in order): it returns
            their span sums (span path, :attr:`pieces` set) or their token states.
        pieces: span path: :func:`~latechunk_dagster.core.pooling.window_pieces` of each state job's
            document's atoms, by batch index; ``None`` on the token-state path.
        blend: the chunks-alone pass of a blending chunker
            (:class:`~latechunk_dagster.core.blending.BlendPass`), ``None`` for late chunking alone.
    """

    texts: list[str]
    ids: list[str]
    granularities: Granularities
    results: list[Any]
    native_jobs: list[DocumentJob]
    state_jobs: list[DocumentJob]
    pieces: dict[int, list[np.ndarray]] | None = None
    blend: Any = None

    @property
    def strategies(self) -> dict[str, ChunkingStrategy]:
        """The granularities as ``{name: strategy}``, finest first."""
        return self.granularities.as_dict()

    @property
    def strategy(self) -> ChunkingStrategy:
        """The strategy of a single-granularity batch (``TypeError`` for several)."""
        return self.granularities.strategy

    @property
    def windows(self) -> list[list[int]]:
        """The encoder inputs of the state-job documents, in order (token ids)."""
        return [w for j in self.state_jobs for w in j[3].windows]

    @property
    def window_pieces(self) -> list[np.ndarray] | None:
        """The span path's pieces of each window of :attr:`windows` (``None``: token-state path)."""
        if self.pieces is None:
            return None
        return [p for j in self.state_jobs for p in self.pieces[j[0]]]

    def refuse(self, refused: Mapping[int, DocumentError]) -> None:
        """Take documents the engine refused out of the batch: each one's error in :attr:`results`,
        its jobs removed (so :attr:`windows` and the native jobs match what the engine returned)."""
        if not refused:
            return
        for i, err in refused.items():
            self.results[i] = err
        self.native_jobs = [j for j in self.native_jobs if j[0] not in refused]
        self.state_jobs = [j for j in self.state_jobs if j[0] not in refused]
        if self.blend is not None:
            self.blend.refuse(refused)


@dataclass
class EncoderInputs:
    """What one engine call of a prepared batch sends, and which document each input belongs to.

    Made by :meth:`LateChunker.encoder_inputs` (the one place that turns a prepared batch into
    engine inputs); plain data, so a host worker process can send it to the engine's process.

    Attributes:
        windows: token ids of every encoder input of the token-state documents, in order.
        window_docs: the batch index of the document of each window (same length as ``windows``).
        native_texts: encoder texts (prefix prepended, no BOM) of the native-path documents.
        native_docs: the batch index of each native text.
        chunk_size: the ``FixedTokens`` chunk size of the native path (0 without native texts).
        ids: the batch's document ids, by batch index (for errors that name the document).
        pieces: span path: int ``[n_pieces, 3]`` per window (row range, span index), the sums the
            engine returns; ``None``: the engine returns the windows' token states.
    """

    windows: list[list[int]]
    window_docs: list[int]
    native_texts: list[str]
    native_docs: list[int]
    chunk_size: int
    ids: list[str]
    pieces: list[np.ndarray] | None = None

    def without(self, docs: Collection[int]) -> EncoderInputs:
        """These inputs less every window and native text of the documents ``docs``."""
        keep_w = [k for k, i in enumerate(self.window_docs) if i not in docs]
        keep_n = [k for k, i in enumerate(self.native_docs) if i not in docs]
        return EncoderInputs(
            [self.windows[k] for k in keep_w],
            [self.window_docs[k] for k in keep_w],
            [self.native_texts[k] for k in keep_n],
            [self.native_docs[k] for k in keep_n],
            self.chunk_size if keep_n else 0,
            self.ids,
            None if self.pieces is None else [self.pieces[k] for k in keep_w],
        )


@dataclass
class EncodedBatch:
    """A batch after :meth:`LateChunker.encode`.

    Attributes:
        prepared: the batch as prepared.
        rows: per window of ``prepared.state_jobs``, in order: float32 ``[len(window), dim]`` token
            states, or on the span path float32 ``[n_pieces, 2 * dim]`` piece sums
            (:func:`~latechunk_dagster.core.pooling.sum_pairs`).
        native: the engine's chunk means per ``prepared.native_jobs`` document.
    """

    prepared: PreparedBatch
    rows: list[np.ndarray]
    native: list[NativeChunks] = field(default_factory=list)
