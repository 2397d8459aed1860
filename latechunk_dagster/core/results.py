"""Plain data classes returned by the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document.

    Attributes:
        index: position of the chunk in its document (0-based).
        token_range: half-open ``(start, end)`` into the document's ``token_ids``.
        char_range: half-open ``(start, end)`` in code points into the document text,
            ``None`` for a chunk of special / prefix tokens only.
        text: ``document[char_start:char_end]``, ``None`` when ``char_range`` is ``None``.
        headings: heading path of the chunk's start (the boundary strategies), outermost first; empty
            before a document's first heading and for the other strategies.
        word_cut: the chunk ends inside a word (one word longer than the budget, issue 46); not part
            of equality.
    """

    index: int
    token_range: tuple[int, int]
    char_range: tuple[int, int] | None
    text: str | None
    headings: tuple[str, ...] = field(default=())
    word_cut: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class ChunkedDocument:
    """The late-chunked form of one document.

    Attributes:
        index: position in the ``chunk()`` call; ``doc_id``: the caller's id.
        chunks: the chunks, in order, tiling ``[0, len(token_ids))``.
        vectors: ``np.ndarray`` float32, shape ``[len(chunks), embedding_dim]``.
        token_ids: the one tokenization that was pooled (special and prefix tokens included).
        path: the engine path that produced it: ``"native"`` (vLLM reduced the spans in the worker),
            ``"spans"`` (the engine summed each span's rows, the host divided and applied the head) or
            ``"token_states"`` (every token state came to the host: the reference path).
        windows: number of encoder inputs (1 unless the document is longer than the model).
        opt_ins: model refusals the caller overrode (``"causal"``, ``"pooling=cls"``).
        granularity: the granularity's name (``""`` for a single-strategy call;
            :meth:`LateChunker.chunk_granularities <latechunk_dagster.LateChunker.chunk_granularities>`).
        parents: per chunk, the index of its parent chunk in the next granularity
            (:func:`~latechunk_dagster.core.granularities.parent_indices`); ``None`` for the last
            granularity and for a single-strategy call.
    """

    index: int
    doc_id: str
    chunks: list[Chunk]
    vectors: np.ndarray
    token_ids: list[int]
    path: str
    windows: int = 1
    opt_ins: tuple[str, ...] = ()
    granularity: str = ""
    parents: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ChunkerSettings:
    """What a chunk vector depends on besides its text and the strategy, as the chunker holds it
    (:attr:`latechunk_dagster.LateChunker.settings`); the pipeline's fingerprint and the rows'
    lineage read it instead of the chunker.

    Attributes:
        model_name, model_sha256: the model's display name and the sha256 of its files.
        head: the head as text (``"dense(64->32,Identity)+cut(16)+l2"``).
        opt_ins: the refusals overridden (``"trust_remote_code"``, ``"pooling=cls"``...).
        dtype: the engine's model dtype as the engine resolved it (``"float16"`` for a GPU's
            ``"auto"``), not as it was asked for.
        prefix: the document prompt tokenized with each document.
        window_length, window_overlap: tokens per window and document tokens shared by consecutive
            windows: the overlap the windows are planned with
            (:attr:`latechunk_dagster.LateChunker.resolved_window_overlap`, the default resolved).
        allow_windows: long documents are windowed (``False``: refused).
        embedding_dim: width of a chunk vector.
        engine_version: the engine's version (vLLM's ``__version__``; transformers' for the light
            engine), ``"closed"`` after ``close()``.
        engine: the engine's name (:attr:`Engine.name <latechunk_dagster.core.engines.Engine.name>`:
            ``"vllm"``, ``"vllm-server"``, ``"transformers"``), ``"closed"`` after ``close()``.
        blend: the late vector's weight in each chunk vector (:mod:`latechunk_dagster.core.blending`;
            ``1.0``: late chunking).
    """

    model_name: str
    model_sha256: str
    head: str
    opt_ins: tuple[str, ...]
    dtype: str
    prefix: str
    window_length: int
    window_overlap: int
    allow_windows: bool
    embedding_dim: int
    engine_version: str
    engine: str = "vllm"
    blend: float = 1.0

    @property
    def engine_record(self) -> str:
        """What the rows' ``vllm_version`` lineage column holds: the version alone for an engine that
        runs vLLM (:data:`VLLM_ENGINES`, as rows were written before other engines existed), else
        ``"<engine> <version>"`` (``"transformers 5.19.0"``), so a row names the engine that made it."""
        return self.engine_version if self.engine in VLLM_ENGINES else f"{self.engine} {self.engine_version}"


#: Engines whose token states come from vLLM's model code (in process, or a vLLM server). Their rows
#: carry no engine name in their lineage record (:attr:`ChunkerSettings.engine_record`, the
#: ``vector_config`` of :mod:`latechunk_dagster.pipeline.config`): those rows were written before
#: the engine was recorded, and they stay valid.
VLLM_ENGINES = frozenset({"vllm", "vllm-server"})
