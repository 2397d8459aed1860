"""Chunk vectors from the real vLLM engine against an independent float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker, Sentences
from tests.reference import reference_chunk_vectors, reference_states, reference_token_ids

DOCS = [
    "Berlin is the capital and largest city of Germany. Its 3.8 million inhabitants make it the "
    "most populous city of the European Union. The city is also one of the states of Germany.",
    "Late chunking encodes the whole document once. Then it averages the token states of each "
    "chunk, so a sentence that says 'its maintenance team' keeps the company named earlier.",
    "Tabs\tand\r\nCRLF lines, 東京 and ünïcödé, emoji 🎉👩‍👩‍👧 and Mr. Smith's e.g. abbreviations.",
    "x",
]


def _spans(doc) -> list[tuple[int, int]]:
    return [c.token_range for c in doc.chunks]


def test_token_ids_are_one_tokenizer_pass(chunker: LateChunker, minilm_dir) -> None:
    docs = chunker.chunk(DOCS, FixedTokens(8))
    for text, d in zip(DOCS, docs):
        assert d.token_ids == reference_token_ids(minilm_dir, text)


@pytest.mark.parametrize("doc_index", range(len(DOCS)))
def test_fixed_tokens_vectors_match_float64_reference(chunker: LateChunker, minilm_dir, doc_index: int) -> None:
    text = DOCS[doc_index]
    n = len(reference_token_ids(minilm_dir, text))
    # 1; a size larger than the document; sizes leaving a one-token tail (n % c == 1)
    sizes = sorted({1, 3, 7, 16, n + 5, 1000} | {c for c in range(2, n) if n % c == 1})
    worst = 0.0
    for c in sizes:
        [doc] = chunker.chunk([text], FixedTokens(c))
        assert _spans(doc) == [(s, min(s + c, n)) for s in range(0, n, c)]
        ref = reference_chunk_vectors(minilm_dir, doc.token_ids, _spans(doc))
        assert doc.vectors.dtype == np.float32 and doc.vectors.shape == (len(doc.chunks), 384)
        worst = max(worst, float(np.abs(doc.vectors - ref).max()))
    assert worst < 1e-4, worst


def test_sentences_vectors_match_float64_reference(chunker: LateChunker, minilm_dir) -> None:
    docs = chunker.chunk(DOCS[:3], Sentences(max_tokens=24))
    for d in docs:
        ref = reference_chunk_vectors(minilm_dir, d.token_ids, _spans(d))
        np.testing.assert_allclose(d.vectors, ref, atol=1e-4)


def test_results_keep_input_order_in_one_batch(chunker: LateChunker) -> None:
    many = [f"Document number {i} talks about topic {i % 7}." for i in range(40)]
    docs = chunker.chunk(many, FixedTokens(4), doc_ids=[f"d{i}" for i in range(40)])
    assert [d.doc_id for d in docs] == [f"d{i}" for i in range(40)]
    assert [d.index for d in docs] == list(range(40))
    single = chunker.chunk([many[17]], FixedTokens(4))[0]
    np.testing.assert_allclose(docs[17].vectors, single.vectors, atol=1e-5)


def test_head_comes_after_the_mean(chunker: LateChunker, minilm_dir) -> None:
    [doc] = chunker.chunk([DOCS[0]], FixedTokens(12))
    h = reference_states(minilm_dir, doc.token_ids)
    right, wrong = [], []
    for s, e in _spans(doc):
        m = h[s:e].mean(axis=0)
        right.append(m / np.linalg.norm(m))
        unit = h[s:e] / np.linalg.norm(h[s:e], axis=1, keepdims=True)
        wrong.append(unit.mean(axis=0))
    right_a, wrong_a = np.stack(right), np.stack(wrong)
    # the two orders really differ on this document ...
    assert np.abs(right_a - wrong_a).max() > 1e-2
    # ... and the project returns normalize(mean(H))
    np.testing.assert_allclose(doc.vectors, right_a, atol=1e-4)
    assert np.abs(doc.vectors - wrong_a).max() > 1e-2
    np.testing.assert_allclose(np.linalg.norm(doc.vectors, axis=1), 1.0, atol=1e-5)


def test_query_embedding_is_the_models_sequence_embedding(chunker: LateChunker, minilm_dir) -> None:
    q = "capital of Germany"
    [v] = chunker.embed_queries([q])
    ids = reference_token_ids(minilm_dir, q)
    ref = reference_chunk_vectors(minilm_dir, ids, [(0, len(ids))])[0]
    np.testing.assert_allclose(v, ref, atol=1e-4)
