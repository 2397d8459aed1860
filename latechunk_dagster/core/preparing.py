"""The prepare step: check, tokenize (one batch call), every granularity's spans (time bound), window plans.

Host work before the encoder, over the host part (:meth:`ChunkerHost.prepare
<latechunk_dagster.core.chunker_host.ChunkerHost.prepare>` calls :func:`prepare_batch`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from latechunk_dagster.core.batches import DocumentJob, PreparedBatch
from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span, check_tiling
from latechunk_dagster.core.chunking.given import GivenChunkList, GivenChunks
from latechunk_dagster.core.errors import (
    DocumentError,
    DocumentTooLongError,
    SpanError,
    StrategyFailedError,
    StrategyTimeoutError,
)
from latechunk_dagster.core.granularities import (
    DocumentSpans,
    Granularities,
    document_spans,
)
from latechunk_dagster.core.host_view import HostView
from latechunk_dagster.core.pooling import window_pieces
from latechunk_dagster.core.timebound import TimeLimitExceeded, WorkerCallError, call_with_time_limit
from latechunk_dagster.core.tokenization import (
    Tokenization,
    check_text,
    tokenize_documents,
)
from latechunk_dagster.core.windows import WindowPlan, plan_windows

log = logging.getLogger("latechunk_dagster.core.chunker")


def prepare_batch(
    host: HostView,
    texts: Sequence[str],
    strategy: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy],
    *,
    doc_ids: Sequence[str] | None = None,
    chunks: Sequence[GivenChunkList | None] | None = None,
    engine_path: Literal["native", "spans", "token_states"] | None = None,
) -> PreparedBatch:
    """Host work before the encoder: check each text, tokenize the batch in one call, spans, window plans.

    ``strategy``: the call's :class:`Granularities` (one strategy or ``{name: strategy}`` are
    checked into one here). Per-document failures (bad text, offsets, a strategy error or time-out,
    given chunks that do not fit, a document too long) are kept in the batch and come back from
    :func:`~latechunk_dagster.core.finishing.pool_results` in input order. Touches no engine (only
    its traits, ``host.engine``), so it runs in another thread while an engine call runs, or in a
    host worker process; the strategy's time bound uses SIGALRM only in the main thread
    (:mod:`..timebound`).

    Raises:
        TypeError, ValueError: as :meth:`LateChunker.chunk <latechunk_dagster.LateChunker.chunk>`.
        ModelNotSupportedError, HeadNotSupportedError: ``engine_path`` cannot serve this
            model or strategy.
    """
    granularities = check_call(texts, strategy)
    strategies = granularities.as_dict()
    texts = list(texts)
    ids = [str(i) for i in range(len(texts))] if doc_ids is None else [str(d) for d in doc_ids]
    if len(ids) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(ids)} doc_ids")
    given = _given_chunks(chunks, len(texts), strategies)
    results: list[Any] = [None] * len(texts)
    jobs: list[DocumentJob] = []
    good: list[int] = []
    for i, (text, did) in enumerate(zip(texts, ids)):
        try:
            check_text(text, i, did)
        except DocumentError as exc:
            results[i] = exc
            continue
        good.append(i)
    toks = tokenize_documents(
        host.tokenizer,
        [texts[i] for i in good],
        prefix=host.prefix,
        indices=good,
        doc_ids=[ids[i] for i in good],
    )
    for i, tokens in zip(good, toks):
        try:
            if isinstance(tokens, DocumentError):
                raise tokens
            spans = _document_spans(host, strategies, texts[i], tokens, i, ids[i], given[i])
            plan = _plan(host, tokens, i, ids[i])
        except DocumentError as exc:
            results[i] = exc
            continue
        jobs.append((i, tokens, spans, plan))
    path = host.engine_path(engine_path, granularities)
    native = path == "native" and granularities.native_strategy is not None
    # Native reduction only for single-window documents: a windowed document's states
    # come from several windows, so its spans are pooled here (contract section 5).
    native_jobs = [j for j in jobs if native and len(j[3].windows) == 1]
    state_jobs = [j for j in jobs if not (native and len(j[3].windows) == 1)]
    if not host.head.linear_projection:
        for i, tokens, _spans, plan in state_jobs:
            results[i] = DocumentTooLongError(
                i,
                ids[i],
                f"{len(tokens)} tokens need {len(plan.windows)} windows, and the non-linear head "
                f"{host.head.describe()} cannot be applied to windowed token states",
            )
        state_jobs = []
    pieces = None
    if path != "token_states" and host.engine.supports_span_sums:
        pieces = {i: window_pieces(plan, doc.atoms) for i, _t, doc, plan in state_jobs}
    return PreparedBatch(texts, ids, granularities, results, native_jobs, state_jobs, pieces)


def check_call(
    texts: Sequence[str], strategy: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy]
) -> Granularities:
    """The checked granularities of a call on ``texts``.

    Raises:
        TypeError: ``texts`` is one ``str``; ``strategy`` as :meth:`Granularities.of`.
        ValueError: as :meth:`Granularities.of`.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of documents, not one str: wrap it as [text]")
    return Granularities.of(strategy)


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
    host: HostView,
    strategies: dict[str, ChunkingStrategy],
    text: str,
    tokens: Tokenization,
    i: int,
    did: str,
    given: Any,
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
            spans[name] = _spans(host, strategy, text, tokens, i, did)
        except DocumentError as exc:
            if len(strategies) == 1:
                raise
            raise type(exc)(i, did, f"granularity {name!r}: {exc.detail}") from None
    return document_spans(spans, host.document_prompt_tokens)


def _spans(host: HostView, strategy: ChunkingStrategy, text: str, tokens: Tokenization, i: int, did: str) -> list[Span]:
    """The strategy's spans of one document, within ``host.strategy_timeout_s`` (see :mod:`..timebound`).

    Raises (each naming the document ``i``/``did``, so the batch's other documents go on):
        SpanError: the strategy refused the text, or its spans do not tile the document's tokens
            (a gap, an overlap, an empty span, a span past the last token), or the first span
            holds only prompt tokens that the model's Pooling leaves out of the mean.
        StrategyTimeoutError, StrategyFailedError: the strategy ran past its time bound, or raised.
    """
    bound = host.strategy_timeout_s
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
    if host.document_prompt_tokens >= spans[0].end:
        raise SpanError(
            i,
            did,
            f"chunk 0 {(spans[0].start, spans[0].end)} holds only the prompt's tokens, which the model's "
            f"Pooling (include_prompt=false) leaves out of the mean ({host.document_prompt_tokens} tokens)",
        )
    return spans


def _plan(host: HostView, tokens: Tokenization, i: int, did: str) -> WindowPlan:
    """The document's windows, planned with ``host.resolved_window_overlap``.

    Raises:
        DocumentTooLongError: the document is longer than a window and windowing is off, or its
            windows cannot be planned with the window settings (naming the document and why).
    """
    if len(tokens) > host.window_length and not host.allow_windows:
        raise DocumentTooLongError(
            i, did, f"{len(tokens)} tokens > max_model_len {host.window_length} and windowing is off"
        )
    try:
        return plan_windows(tokens, host.window_length, host.resolved_window_overlap)
    except ValueError as exc:
        raise DocumentTooLongError(i, did, f"{len(tokens)} tokens cannot be windowed: {exc}") from None
