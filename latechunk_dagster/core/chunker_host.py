"""The chunker's host part: everything the host does before and after the engine, as one frozen value.

:class:`ChunkerHost` holds the model card, the tokenizer, the head, the prefixes and their prompt
tokens, the lengths, the window settings, the time bound, the engine path and the engine's traits.
It offers the two host steps of :class:`~latechunk_dagster.core.chunker.LateChunker`::

    prepare       check -> tokenize (one batch call) -> spans (time bound) -> atoms -> windows
                  core/preparing.py
    pool_results  atom sums -> span means (the MEAN: core/pooling.py, core/granularities.py)
                  -> the HEAD once per batch (core/head.py) -> non-finite check -> results
                  core/finishing.py

and the query side (:meth:`query_prompts`, :meth:`pool_queries`) and the lineage a query is compared
with (:attr:`query_identity`). It holds no engine, so it pickles: a host worker process
(:mod:`latechunk_dagster.pipeline.hostworker`) gets this value, not a copy of the chunker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from latechunk_dagster.core.batches import EncodedBatch, EncoderInputs, PreparedBatch
from latechunk_dagster.core.blending import blend_inputs, blend_pass, blend_results, check_blend
from latechunk_dagster.core.chunker_options import (
    check_window_settings,
    embedding_width,
    engine_lengths,
    engine_path_rule,
)
from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.core.chunking.given import GivenChunkList
from latechunk_dagster.core.engine_traits import EngineTraits
from latechunk_dagster.core.errors import DocumentBatchError, DocumentError, ModelNotSupportedError
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.head import Head, prompt_length
from latechunk_dagster.core.model_card import ModelCard, check_late_chunking_allowed, read_model_card
from latechunk_dagster.core.model_files import load_error
from latechunk_dagster.core.results import ChunkedDocument, ChunkerSettings
from latechunk_dagster.core.tokenization import Tokenization, check_text, encoder_text, tokenize_document
from latechunk_dagster.core.windows import default_overlap

PathName = Literal["native", "spans", "token_states"]


@dataclass(frozen=True)
class QueryIdentity:
    """What a table's lineage is compared with before its vectors are searched with a query's
    (:func:`~latechunk_dagster.sink.search.lineage_difference`): plain data, so another process can
    send it (:mod:`latechunk_dagster.app.query_process`).

    Attributes:
        model_sha256: the model's fingerprint (``ModelCard.fingerprint``); model_name: its display name.
        head: the head as the table's ``head`` column names it (``Head.describe()``).
        embedding_dim: width of a vector.
    """

    model_sha256: str
    model_name: str
    head: str
    embedding_dim: int


@dataclass(frozen=True, eq=False)
class ChunkerHost:
    """The host part of a chunker (module docstring): frozen and picklable; no engine.

    Change a setting with :func:`dataclasses.replace` (the check runs again: :meth:`check_windows`).

    Attributes:
        card: the model card (:func:`~latechunk_dagster.core.model_card.read_model_card`).
        tokenizer: the model's fast tokenizer (with offsets).
        head: the embedding head applied after the mean (``card.head``).
        prefix, query_prefix: the document and query prompts.
        document_prompt_tokens, query_prompt_tokens: leading tokens left out of the means
            (Pooling ``include_prompt=false``), else 0.
        max_model_len: longest encoder input, tokens; window_length: tokens per window (<= it).
        window_overlap: the caller's option (``None``: the default); the number used is
            :attr:`resolved_window_overlap`.
        allow_windows: ``False`` refuses long documents (``DocumentTooLongError``).
        strategy_timeout_s: per-document time bound of a strategy, seconds (``None``: unbounded).
        opt_ins: the model refusals the caller overrode.
        path: the engine path of a call that names none
            (:func:`~latechunk_dagster.core.chunker_options.engine_path_rule`).
        engine: the engine's :class:`EngineTraits` (name and what it supports).
        blend: the late vector's weight ``a`` in each chunk vector (:mod:`latechunk_dagster.core.blending`):
            ``1.0`` (default) late chunking, ``0.0`` each chunk encoded alone.
    """

    card: ModelCard
    tokenizer: Any
    head: Head
    prefix: str
    query_prefix: str
    document_prompt_tokens: int
    query_prompt_tokens: int
    max_model_len: int
    window_length: int
    window_overlap: int | None
    allow_windows: bool
    strategy_timeout_s: float | None
    opt_ins: tuple[str, ...]
    path: str
    engine: EngineTraits
    blend: float = 1.0

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str],
        *,
        engine: EngineTraits,
        max_model_len: int | None = None,
        prefix: str | None = None,
        query_prefix: str | None = None,
        dimensions: int | None = None,
        allow_causal: bool = False,
        allow_non_mean_pooling: bool = False,
        trust_remote_code: bool = False,
        engine_path: str = "auto",
        window_overlap: int | None = None,
        window_length: int | None = None,
        allow_windows: bool = True,
        strategy_timeout_s: float | None = None,
        blend: float = 1.0,
    ) -> ChunkerHost:
        """The host part of ``model``, checked: the model (contract section 4), the tokenizer, the
        lengths, the window settings and the engine path against ``engine``'s traits. The options of
        :class:`~latechunk_dagster.LateChunker` that are the host's.

        Args:
            model: model directory on disk (sentence-transformers layout or plain Hugging Face).
            engine: the engine's traits (:meth:`EngineTraits.of`: before it starts, to fail before it does).
            max_model_len: longest encoder input in tokens; default: the sentence-transformers
                ``max_seq_length``, capped at the model's own limit (:class:`~latechunk_dagster.core.
                model_card.PositionLimits`: position table, RoBERTa padding offset, NomicBert's
                ``max_trained_positions`` under dynamic NTK scaling). Longer documents are encoded in
                overlapping windows (contract section 5), never truncated. A value above the model's limit
                is refused (``ModelNotSupportedError`` naming it), before the engine starts.
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
                host: the reference path). The one rule:
                :func:`~latechunk_dagster.core.chunker_options.engine_path_rule`.
            window_overlap: document tokens shared by consecutive windows of a long document, an int
                >= 0 below the document tokens a window holds; default (``None``)
                :func:`latechunk_dagster.core.windows.default_overlap` of the window length (an eighth:
                32 for 256-token windows). Resolved in one place, :attr:`resolved_window_overlap`: the
                windows are planned with that number and :attr:`settings` records it, so an explicit
                overlap equal to the default gives the same settings and vectors as leaving it unset.
            window_length: tokens per window (default and maximum: ``max_model_len``).
            allow_windows: ``False`` turns long documents into ``DocumentTooLongError``.
            strategy_timeout_s: per-document time bound of the chunking strategy, in seconds
                (``LateChunker``'s default :data:`~latechunk_dagster.core.chunker.DEFAULT_STRATEGY_TIMEOUT_S`;
                ``None`` = unbounded). A document whose
                spans take longer is stopped and rejected alone (:class:`StrategyTimeoutError`,
                reason ``strategy_timeout``); mechanism in :mod:`latechunk_dagster.core.timebound`.
            blend: the late vector's weight ``a`` in ``[0, 1]``: each chunk vector is
                ``unit(a * late_unit + (1 - a) * naive_unit)`` (:mod:`latechunk_dagster.core.blending`);
                default ``1.0``, late chunking bit for bit (no chunks-alone pass).

        Raises:
            ModelNotSupportedError: a refused model, a slow tokenizer, a length above the model's limit,
                a path the engine cannot serve.
            HeadNotSupportedError: a non-linear head on a path that cannot apply it after the mean.
            ValueError: window settings no long document could be planned with; a ``blend`` outside [0, 1].
        """
        from latechunk_dagster.core.hf_imports import AutoTokenizer  # transformers'; hf_imports: what it defers

        card = read_model_card(model, dimensions=dimensions)
        opt_ins = check_late_chunking_allowed(
            card,
            allow_causal=allow_causal,
            allow_non_mean_pooling=allow_non_mean_pooling,
            trust_remote_code=trust_remote_code,
        )
        prefix = card.document_prefix if prefix is None else prefix
        query_prefix = card.query_prefix if query_prefix is None else query_prefix
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(card.path), trust_remote_code=trust_remote_code)
        except Exception as exc:  # a tokenizer file that does not load: named where it is not JSON, one line
            raise load_error(card.path, "the tokenizer", exc) from exc
        if not getattr(tokenizer, "is_fast", False):
            raise ModelNotSupportedError(f"{card.path}: a fast tokenizer (with offsets) is required")
        engine_len, window = engine_lengths(card, max_model_len, window_length)
        # Pooling include_prompt=false: these first input positions stay out of the means.
        document_prompt = 0 if card.include_prompt else prompt_length(tokenizer, prefix)
        host = cls(
            card=card,
            tokenizer=tokenizer,
            head=card.head,
            prefix=prefix,
            query_prefix=query_prefix,
            document_prompt_tokens=document_prompt,
            query_prompt_tokens=0 if card.include_prompt else prompt_length(tokenizer, query_prefix),
            max_model_len=engine_len,
            window_length=window,
            window_overlap=window_overlap,
            allow_windows=allow_windows,
            strategy_timeout_s=strategy_timeout_s,
            opt_ins=tuple(opt_ins),
            path=engine_path,
            engine=engine,
            blend=check_blend(blend),
        )
        host.check_windows()
        return replace(host, path=host.engine_path(engine_path))

    # -- settings ---------------------------------------------------------------------------
    @property
    def resolved_window_overlap(self) -> int:
        """Document tokens consecutive windows share, as the windows are planned and the settings
        record it: :attr:`window_overlap`, or :func:`~latechunk_dagster.core.windows.default_overlap`
        of :attr:`window_length` when that is ``None`` (so a capped window length changes the default
        with it). The one place the overlap is resolved."""
        return default_overlap(self.window_length) if self.window_overlap is None else self.window_overlap

    def check_windows(self) -> None:
        """Refuse window settings no long document could be planned with
        (:func:`~latechunk_dagster.core.chunker_options.check_window_settings`).

        Raises:
            ValueError: naming the setting.
        """
        check_window_settings(
            self.card,
            self.tokenizer,
            self.prefix,
            self.window_length,
            self.window_overlap,
            self.resolved_window_overlap,
            self.allow_windows,
        )

    @property
    def embedding_dim(self) -> int:
        """Width of a chunk vector: the Matryoshka cut, else the last projection, else hidden size."""
        return embedding_width(self.card, self.head)

    @property
    def query_identity(self) -> QueryIdentity:
        """The lineage a table's rows are compared with before a query searches them."""
        return QueryIdentity(self.card.fingerprint, self.card.name, self.head.describe(), self.embedding_dim)

    def engine_path(self, requested: str | None = None, granularities: Granularities | None = None) -> str:
        """The engine path serving a call that asks for ``requested`` (``None``: :attr:`path`).

        Raises:
            ModelNotSupportedError, HeadNotSupportedError: as
                :func:`~latechunk_dagster.core.chunker_options.engine_path_rule`.
        """
        return engine_path_rule(
            self.card,
            self.head,
            self.prefix,
            self.document_prompt_tokens,
            requested or self.path,
            self.engine,
            granularities,
        )

    # -- the host steps -----------------------------------------------------------------------
    def tokenize(self, text: str, *, index: int = 0, doc_id: str | None = None) -> Tokenization:
        """The one tokenization pass of a document (with this chunker's prefix)."""
        did = str(index) if doc_id is None else doc_id
        return tokenize_document(
            self.tokenizer, check_text(text, index, did), prefix=self.prefix, index=index, doc_id=did
        )

    def prepare(
        self,
        texts: Sequence[str],
        strategy: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy],
        *,
        doc_ids: Sequence[str] | None = None,
        chunks: Sequence[GivenChunkList | None] | None = None,
        engine_path: PathName | None = None,
    ) -> PreparedBatch:
        """Host work before the encoder (:func:`~latechunk_dagster.core.preparing.prepare_batch`)."""
        from latechunk_dagster.core.preparing import prepare_batch

        prepared = prepare_batch(self, texts, strategy, doc_ids=doc_ids, chunks=chunks, engine_path=engine_path)
        prepared.blend = blend_pass(self, prepared)  # the chunks-alone pass (None: late chunking alone)
        return prepared

    def encoder_inputs(self, prepared: PreparedBatch) -> EncoderInputs:
        """The engine inputs of a prepared batch: its windows, and the native path's texts (prefix
        prepended, BOM left out: :func:`encoder_text`) with the strategy's chunk size."""
        native_docs = [i for i, *_ in prepared.native_jobs]
        native = prepared.granularities.native_strategy
        inputs = EncoderInputs(
            windows=prepared.windows,
            window_docs=[j[0] for j in prepared.state_jobs for _ in j[3].windows],
            native_texts=[encoder_text(self.prefix, prepared.texts[i]) for i in native_docs],
            native_docs=native_docs,
            chunk_size=native.chunk_size if native_docs and native is not None else 0,
            ids=list(prepared.ids),
            pieces=prepared.window_pieces,
        )
        return blend_inputs(inputs, prepared)  # a blending chunker's chunk texts, in the same engine call

    def pool_results(
        self, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return"
    ) -> list[ChunkedDocument | dict[str, ChunkedDocument] | DocumentError]:
        """Host work after the encoder: span means, the head, the non-finite check; results in input
        order, in the batch's shape (:func:`~latechunk_dagster.core.finishing.pool_results`); a blending
        chunker's vectors mixed with their chunks' alone (:func:`~latechunk_dagster.core.blending.blend_results`)."""
        from latechunk_dagster.core.finishing import pool_results

        results = blend_results(self, encoded, pool_results(self, encoded, errors="return"))
        failures = [r for r in results if isinstance(r, DocumentError)]
        if failures and errors == "raise":
            raise DocumentBatchError(results, failures)
        return results

    def query_prompts(self, queries: Sequence[str]) -> list[list[int]]:
        """The encoder inputs of whole queries (:func:`~latechunk_dagster.core.finishing.query_prompts`)."""
        from latechunk_dagster.core.finishing import query_prompts

        return query_prompts(self, queries)

    def pool_queries(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """Query vectors from their token states (:func:`~latechunk_dagster.core.finishing.pool_queries`)."""
        from latechunk_dagster.core.finishing import pool_queries

        return pool_queries(self, rows)

    def pooled_spans(self, spans: Sequence[Span]) -> list[Span]:
        """The token ranges whose states are averaged: ``spans``, with the first one starting after
        the document prompt when the model's Pooling has ``include_prompt=false`` (the chunk still
        owns those tokens; only its mean leaves them out)."""
        k = self.document_prompt_tokens
        if not k or not spans:
            return list(spans)
        return [Span(max(spans[0].start, k), spans[0].end, spans[0].headings), *spans[1:]]


_T = TypeVar("_T")


def settings_of(host: ChunkerHost, engine: Any) -> ChunkerSettings:
    """The :class:`~latechunk_dagster.core.results.ChunkerSettings` of a host part and its engine (an
    :class:`~latechunk_dagster.core.engines.Engine`, ``None`` once closed): ``window_overlap`` is the
    resolved one the windows are planned with, ``dtype`` the one the engine resolved (``"auto"`` for an
    engine that cannot tell), the engine's version and name (``"closed"`` after close)."""
    return ChunkerSettings(
        model_name=host.card.name,
        model_sha256=host.card.fingerprint,
        head=host.head.describe(),
        opt_ins=tuple(host.opt_ins),
        dtype=str(getattr(engine, "dtype", "auto")),
        prefix=host.prefix,
        window_length=host.window_length,
        window_overlap=host.resolved_window_overlap,
        allow_windows=host.allow_windows,
        embedding_dim=host.embedding_dim,
        engine_version=engine.version if engine is not None else "closed",
        engine=engine.name if engine is not None else "closed",
        blend=host.blend,
    )


class HostSetting(Generic[_T]):
    """A setting of a chunker's host part, read and set on the chunker: a descriptor on a class with a
    ``host`` attribute (:class:`~latechunk_dagster.LateChunker`); setting it replaces the host part
    (:func:`dataclasses.replace`; no check runs, as for the attributes it stands for)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj.host, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.host = replace(obj.host, **{self.name: value})
