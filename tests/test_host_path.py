"""The faster host path gives the same results, and the per-document strategy time bound really stops a runaway."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latechunk_dagster import LateChunker, Sentences
from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.errors import DocumentError, NoContentTokensError, StrategyTimeoutError
from latechunk_dagster.core.pooling import mean_pool_spans, span_means
from latechunk_dagster.core.timebound import TimeLimitExceeded, call_with_time_limit, shutdown_worker
from latechunk_dagster.core.tokenization import tokenize_document, tokenize_documents
from latechunk_dagster.core.windows import plan_windows

#: pySBD 0.3.4 backtracks exponentially on this (measured on 2 cores: 41 s with 9 numbers, minutes with 10).
PATHOLOGICAL = "The references follow ...[484 216 622 139 651 592 379 228 242 355] and more text here."

TEXTS = [
    "Berlin is the capital of Germany. It has 3.8M people.",
    "Grüße aus 😀 Köln!\n\nZweiter Absatz, mit Umlauten: äöü ß.",
    "  leading spaces and a tab\tinside  ",
    "東京は日本の首都です。人口は多い。",
    "x" * 3000 + " a very long word and then more words " * 40,
]


@pytest.fixture(scope="module")
def tok(minilm_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm_dir))


@pytest.mark.parametrize("prefix", ["", "passage: "])
def test_batch_tokenization_equals_one_document_at_a_time(tok: Any, prefix: str) -> None:
    batch = tokenize_documents(tok, TEXTS, prefix=prefix, indices=range(len(TEXTS)), doc_ids=list("abcde"))
    for k, text in enumerate(TEXTS):
        one = tokenize_document(tok, text, prefix=prefix, index=k, doc_id="abcde"[k])
        assert batch[k] == one
        assert all(o is None or text[o[0] : o[1]].strip() for o in one.offsets)  # code points into the text
    assert sum(batch[1].special) == 2 and batch[1].n_prefix == (2 if prefix else 0)  # "passage", ":"


@pytest.fixture(scope="module", params=["wordpiece", "unigram", "byte-bpe"])
def family_tok(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Any:
    """A tokenizer of each kind the families use (MiniLM's WordPiece, XLM-R's Unigram, ModernBERT's byte BPE)."""
    from families import byte_bpe_tokenizer, unigram_tokenizer
    from transformers import AutoTokenizer

    if request.param == "wordpiece":
        return AutoTokenizer.from_pretrained(str(minilm_dir))
    out = tmp_path_factory.mktemp(request.param)
    (unigram_tokenizer if request.param == "unigram" else byte_bpe_tokenizer)(out)
    return AutoTokenizer.from_pretrained(str(out))


@pytest.mark.parametrize("prefix", ["", "passage: "])
def test_direct_tokenizer_call_equals_the_transformers_call(
    family_tok: Any, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Rust tokenizer called directly (the host path) gives transformers' ids, offsets and special
    marks; a backend left with truncation on is not called directly, and nothing is cut."""
    from families import MULTILINGUAL

    from latechunk_dagster.core import tokenization, tokenizer_call

    texts = TEXTS + MULTILINGUAL
    kw = {"prefix": prefix, "indices": range(len(texts)), "doc_ids": [str(k) for k in range(len(texts))]}
    family_tok(["warm up"], truncation=False, padding=False)  # what a transformers call leaves on the backend
    assert tokenizer_call.rust_backend(family_tok) is not None  # the direct call is taken
    direct = tokenize_documents(family_tok, texts, **kw)
    enc = family_tok([tokenization.encoder_text(prefix, t) for t in texts], **tokenizer_call.ENCODE_KWARGS)
    for k, got in enumerate(direct):
        assert not isinstance(got, DocumentError)
        assert got.token_ids == enc["input_ids"][k]
        assert got.special == [bool(m) for m in enc["special_tokens_mask"][k]]
    with monkeypatch.context() as m:  # the same documents through transformers' own batch call
        m.setattr(tokenizer_call, "rust_backend", lambda tokenizer: None)  # where the batch call looks it up
        assert tokenize_documents(family_tok, texts, **kw) == direct
    family_tok.backend_tokenizer.enable_truncation(8)  # a state transformers' call would undo first
    assert tokenizer_call.rust_backend(family_tok) is None
    assert tokenize_documents(family_tok, texts, **kw) == direct
    assert tokenizer_call.rust_backend(family_tok) is not None


def test_batch_tokenization_refuses_one_document_alone(tok: Any) -> None:
    # a text of zero-width spaces only: the tokenizer's normalizer drops them, nothing is left to pool
    out = tokenize_documents(tok, ["\u200b\u200b", "fine text"], indices=[0, 1], doc_ids=["a", "b"])
    assert isinstance(out[0], NoContentTokensError) and out[0].doc_id == "a"
    assert not isinstance(out[1], DocumentError)


def test_a_token_straddling_the_prefix_is_a_text_token(tok: Any) -> None:
    # a prefix whose last token merges with the text's first characters: "pre" + "fix this" -> "prefix"
    [one] = tokenize_documents(tok, ["fix this"], prefix="pre", indices=[0], doc_ids=["a"])
    assert tok.convert_ids_to_tokens(one.token_ids) == ["[CLS]", "prefix", "this", "[SEP]"]
    assert one.offsets == [None, (0, 3), (4, 8), None] and one.n_prefix == 0
    assert tokenize_document(tok, "\ufefffix this", prefix="pre").offsets[1] == (1, 4)  # after a BOM


def test_window_gather_equals_the_per_token_pick(tok: Any) -> None:
    tokens = tokenize_document(tok, " ".join(f"word{i}" for i in range(300)))
    plan = plan_windows(tokens, 64, 8)
    assert plan.source is not None and len(plan.windows) > 4
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal((len(w), 8)).astype(np.float32) for w in plan.windows]
    expected = np.stack([rows[w][p] for w, p in plan.source])
    np.testing.assert_array_equal(plan.gather(rows), expected)
    single = plan_windows(tokenize_document(tok, "short text"), 64, 8)
    assert single.source is None and single.gather([rows[0]]) is rows[0]


def test_span_means_equal_a_float64_mean(tok: Any) -> None:
    rng = np.random.default_rng(1)
    states = (rng.standard_normal((1000, 16)) + 8.0).astype(np.float32)
    spans = [Span(0, 3), Span(3, 700), Span(700, 710), Span(710, 1000)]
    exact = np.stack([states[s.start : s.end].astype(np.float64).mean(axis=0) for s in spans])
    got = mean_pool_spans(states, spans)
    assert got.dtype == np.float32 and got.shape == (4, 16)
    assert np.abs(got - exact).max() < 1e-6


def test_windowed_span_means_equal_the_means_of_the_gathered_states(tok: Any) -> None:
    # spans that cross window seams, lie inside one window, cover the header or the footer
    tokens = tokenize_document(tok, " ".join(f"word{i}" for i in range(300)), prefix="passage: ")
    plan = plan_windows(tokens, 64, 8)
    n = len(tokens)
    assert plan.source is not None and len(plan.windows) > 4
    segments = plan.segments()
    assert segments[0, 0] == 0 and segments[-1, 1] == n and (segments[1:, 0] == segments[:-1, 1]).all()
    rng = np.random.default_rng(2)
    rows = [(rng.standard_normal((len(w), 8)) * 50 + 3).astype(np.float32) for w in plan.windows]
    cuts = [0, 1, 2, 5, 40, 57, 58, 120, 200, 333, n - 1, n]
    spans = [Span(a, b) for a, b in zip(cuts, cuts[1:])]
    gathered = np.stack([rows[w][p] for w, p in plan.source]).astype(np.float64)  # the per-token pick, in float64
    exact = np.stack([gathered[s.start : s.end].mean(axis=0) for s in spans])
    got = span_means(rows, plan, spans)
    assert got.dtype == np.float64 and np.abs(got - exact).max() < 1e-9


def test_time_limit_stops_pysbd_in_the_main_thread() -> None:
    strategy = Sentences(max_tokens=64, segmenter="pysbd")
    from latechunk_dagster.core.chunking.segmenters import sentence_starts

    t0 = time.perf_counter()
    with pytest.raises(TimeLimitExceeded):
        call_with_time_limit(sentence_starts, (PATHOLOGICAL, "en", 0, strategy.segmenter), 0.5)
    assert time.perf_counter() - t0 < 2.0
    assert call_with_time_limit(sentence_starts, ("One. Two.", "en", 0, "pysbd"), 0.5) == [0, 5]


@pytest.mark.parametrize("sigterm", ["default", "ignored"])
def test_time_limit_stops_pysbd_in_another_thread(sigterm: str) -> None:
    """Off the main thread SIGALRM cannot be used: the call runs in a worker process that is killed.

    ``ignored``: a process started in the background by a shell ignores SIGINT, and Dagster maps
    SIGTERM to SIGINT's handler, so SIGTERM is ignored here and in every process spawned from here
    (a CI run hung on this); the worker still stops at its bound (it takes SIGTERM's default itself).
    """
    import signal

    from latechunk_dagster.core.chunking.segmenters import sentence_starts

    shutdown_worker()
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN if sigterm == "ignored" else signal.SIG_DFL)
    got: dict[str, Any] = {}

    def work() -> None:
        t0 = time.perf_counter()
        try:
            call_with_time_limit(sentence_starts, (PATHOLOGICAL, "en", 0, "pysbd"), 1.0)
        except TimeLimitExceeded:
            got["stopped_after"] = time.perf_counter() - t0
        got["ok"] = call_with_time_limit(sentence_starts, ("One. Two.", "en", 0, "pysbd"), 60.0)

    try:
        th = threading.Thread(target=work, daemon=True)
        th.start()
        th.join(180)
    finally:
        signal.signal(signal.SIGTERM, previous)
    # a stuck terminate() holds the worker lock: fail without waiting on it
    assert not th.is_alive(), "the runaway worker was not stopped"
    shutdown_worker()
    assert got["ok"] == [0, 5]
    assert "stopped_after" in got, got
    # the worker's start-up (spawn + imports) is not counted, the bound is
    assert got["stopped_after"] < 5.0


def test_pathological_document_is_rejected_alone(chunker: LateChunker) -> None:
    texts = ["A good document. It has two sentences.", PATHOLOGICAL, "Another good one."]
    old = chunker.strategy_timeout_s
    chunker.strategy_timeout_s = 1.0
    try:
        t0 = time.perf_counter()
        out = chunker.chunk(texts, Sentences(max_tokens=64, segmenter="pysbd"), errors="return")
        wall = time.perf_counter() - t0
    finally:
        chunker.strategy_timeout_s = old
    assert isinstance(out[1], StrategyTimeoutError)
    assert out[1].reason == "strategy_timeout" and out[1].doc_id == "1"
    assert "time bound of 1.0 s" in str(out[1])
    assert not isinstance(out[0], DocumentError) and not isinstance(out[2], DocumentError)
    assert wall < 20
    # the default segmenter chunks the same document at once
    [doc] = chunker.chunk([PATHOLOGICAL], Sentences(max_tokens=64))
    assert doc.chunks[0].char_range[0] == 0
