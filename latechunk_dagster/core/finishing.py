"""The pooling step: atom sums, every granularity's span means, the head once per batch, results in order.

Host work after the encoder, over the host part (:meth:`ChunkerHost.pool_results
<latechunk_dagster.core.chunker_host.ChunkerHost.pool_results>` calls :func:`pool_results`). Where
the head is applied: :func:`~latechunk_dagster.core.head.apply_head_after_projection`; the mean:
:mod:`latechunk_dagster.core.pooling` and :mod:`latechunk_dagster.core.granularities`. Also the
query side: :func:`query_prompts` (the encoder inputs) and :func:`pool_queries` (mean and head).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from latechunk_dagster.core.batches import EncodedBatch
from latechunk_dagster.core.chunk_ranges import chunks_from_spans
from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.errors import (
    DocumentBatchError,
    DocumentError,
    InvalidQueryError,
    NonFiniteVectorError,
    TokenizationMismatchError,
)
from latechunk_dagster.core.granularities import (
    DocumentSpans,
    granularity_means,
    parent_indices,
)
from latechunk_dagster.core.head import apply_head_after_projection
from latechunk_dagster.core.host_view import HostView
from latechunk_dagster.core.pooling import mean_pool_spans, sums_from_pair_sums, window_span_sums
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.core.tokenization import (
    Tokenization,
    check_query,
    encoder_text,
)


def pool_results(host: HostView, encoded: EncodedBatch, *, errors: Literal["raise", "return"] = "return") -> list[Any]:
    """Host work after the encoder: span means, the head, the non-finite check; results in input order.

    Each state-path document's atoms are summed once (from its window rows, or added from the
    engine's piece sums on the span path); each granularity's span means are its atoms' sums added
    and divided (:func:`~latechunk_dagster.core.granularities.granularity_means`); then the head,
    once over the whole batch. Parents link each granularity to the next.

    Args:
        encoded: from the encode step (:meth:`LateChunker.encode <latechunk_dagster.LateChunker.encode>`).
        errors: ``"return"`` (default here) or ``"raise"``, as in ``LateChunker.chunk``.

    Returns:
        One entry per document, in input order, in the batch's shape: a :class:`ChunkedDocument` for a
        single-strategy batch (``encoded.prepared.granularities.single``), ``{name: ChunkedDocument}``
        for several granularities; the ``DocumentError`` that refused a document in its place.

    Raises:
        DocumentBatchError: some documents failed and ``errors="raise"``.
        TokenizationMismatchError: vLLM's token ids or chunk ranges differ from ours (native path).
    """
    prep = encoded.prepared
    single = prep.granularities.single
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
        results[i] = _document_results(host, i, ids[i], texts[i], tokens, doc, vectors, "native", 1, single)
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
        vectors = apply_head_after_projection(np.concatenate(means), host.head)
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
                windows = len(plan.windows)
                results[i] = _document_results(host, i, ids[i], texts[i], tokens, doc, per, path, windows, single)
            g += len(doc.spans)
    failures = [r for r in results if isinstance(r, DocumentError)]
    if failures and errors == "raise":
        raise DocumentBatchError(results, failures)
    return results


def query_prompts(host: HostView, queries: Sequence[str]) -> list[list[int]]:
    """The encoder inputs of whole queries: each query's token ids, the model's query prefix prepended
    (a leading byte order mark of a query is dropped, as for documents); never windowed.

    Raises:
        InvalidQueryError: a query without a token of its own (empty, whitespace or control characters
            only), or a character the tokenizer refuses.
        ValueError: a query longer than ``host.max_model_len``, or with no token after the prompt.
    """
    prompts = []
    for i, q in enumerate(queries):
        check_query(q, i)  # one line naming the character, not the tokenizer's TypeError
        if not host.tokenizer(encoder_text("", q), add_special_tokens=False)["input_ids"]:
            raise InvalidQueryError(q, "the tokenizer makes no token of it", i)
        enc = host.tokenizer(encoder_text(host.query_prefix, q), add_special_tokens=True, truncation=False)
        if len(enc["input_ids"]) > host.max_model_len:
            raise ValueError(f"query of {len(enc['input_ids'])} tokens exceeds {host.max_model_len}")
        if len(enc["input_ids"]) <= host.query_prompt_tokens:
            raise ValueError(f"query {q!r} has no token after the prompt {host.query_prefix!r}")
        prompts.append(list(enc["input_ids"]))
    return prompts


def pool_queries(host: HostView, rows: Sequence[np.ndarray]) -> np.ndarray:
    """Query vectors from their token states: the mean of every token, special tokens included, except
    the first ``host.query_prompt_tokens`` (Pooling ``include_prompt=false``: ``[CLS]`` and the prompt,
    as sentence-transformers does), then the head.

    Args:
        rows: per query, float32 ``[n_tokens, dim]`` token states of :func:`query_prompts`' inputs.

    Returns:
        float32 ``[n_queries, embedding_dim]``.
    """
    skip = host.query_prompt_tokens
    out = [apply_head_after_projection(mean_pool_spans(r, [Span(skip, len(r))]), host.head)[0] for r in rows]
    return np.stack(out)


def _document_results(
    host: HostView,
    i: int,
    doc_id: str,
    text: str,
    tokens: Tokenization,
    doc: DocumentSpans,
    vectors: Mapping[str, np.ndarray],
    path: str,
    windows: int,
    single: bool,
) -> ChunkedDocument | dict[str, ChunkedDocument]:
    """One document's :class:`ChunkedDocument` (``single``), or one per granularity, each with its
    parents in the next one."""
    names = list(doc.spans)
    out = {}
    for n, name in enumerate(names):
        spans = doc.spans[name]
        parents = tuple(parent_indices(spans, doc.spans[names[n + 1]])) if n + 1 < len(names) else None
        chunks = chunks_from_spans(text, tokens, spans)
        result = ChunkedDocument(
            i, doc_id, chunks, vectors[name], tokens.token_ids, path, windows, host.opt_ins, name, parents
        )
        if single:
            return result
        out[name] = result
    return out
