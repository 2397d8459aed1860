"""Documents longer than the model: overlapping windows, no truncation (contract section 5)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker, Sentences
from tests.families import windowed_states
from tests.reference import reference_head, reference_states

SENTENCE = "The pump of plant {i} was repaired by its maintenance team in spring. "


@contextmanager
def windows(chunker: LateChunker, length: int, overlap: int) -> Iterator[None]:
    old = chunker.window_length, chunker.window_overlap
    chunker.window_length, chunker.window_overlap = length, overlap
    try:
        yield
    finally:
        chunker.window_length, chunker.window_overlap = old


def text_of(n_sentences: int) -> str:
    return "".join(SENTENCE.format(i=i) for i in range(n_sentences)).strip()


def windowed_reference(model_dir, ids: list[int], length: int, overlap: int) -> np.ndarray:
    """Independent reference: [CLS] body [SEP] cut into windows, each run through transformers
    (the window rule of ``tests/families.windowed_states``)."""
    return windowed_states(lambda x: reference_states(model_dir, x), ids, 1, 1, length, overlap)


def check_against_reference(doc, model_dir, length: int, overlap: int) -> None:
    h = windowed_reference(model_dir, doc.token_ids, length, overlap)
    means = np.stack([h[s:e].mean(axis=0) for s, e in (c.token_range for c in doc.chunks)])
    np.testing.assert_allclose(doc.vectors, reference_head(model_dir, means), atol=1e-4)


def test_windowed_states_equal_an_independent_windowed_reference(chunker: LateChunker, minilm_dir) -> None:
    text = text_of(12)  # fits in 256 tokens, forced into windows of 48
    [single] = chunker.chunk([text], FixedTokens(1))
    with windows(chunker, 48, 12):
        [win] = chunker.chunk([text], FixedTokens(1))
        [win_s] = chunker.chunk([text], Sentences(max_tokens=40))
    assert win.windows > 1 and single.windows == 1
    assert [c.token_range for c in win.chunks] == [c.token_range for c in single.chunks]
    assert win.token_ids == single.token_ids
    check_against_reference(win, minilm_dir, 48, 12)
    check_against_reference(win_s, minilm_dir, 48, 12)
    # and windowing really changed the states (the reference is not just the single pass)
    assert np.abs(win.vectors - single.vectors).max() > 1e-3


@pytest.mark.parametrize("extra", [0, 1, "3w+1"])
def test_exact_boundaries_of_the_window_length(chunker: LateChunker, minilm_dir, extra) -> None:
    length, overlap = 64, 16
    width, stride = length - 2, length - 2 - overlap
    target = length + (width + 2 * stride + 1 - width if extra == "3w+1" else extra)
    words = ["pump"] * (target - 2)  # "pump" is one token
    text = " ".join(words)
    with windows(chunker, length, overlap):
        [doc] = chunker.chunk([text], FixedTokens(7))
    assert len(doc.token_ids) == target
    assert doc.windows == {0: 1, 1: 2, "3w+1": 4}[extra]
    check_against_reference(doc, minilm_dir, length, overlap)


def test_ten_times_the_model_length_is_never_truncated(chunker: LateChunker) -> None:
    text = text_of(200)
    [doc] = chunker.chunk([text], Sentences(max_tokens=60))
    n = len(doc.token_ids)
    assert n > 10 * chunker.max_model_len
    assert doc.windows >= 10
    pos = 0
    for c in doc.chunks:
        assert c.token_range[0] == pos
        pos = c.token_range[1]
    assert pos == n
    ranges = [c.char_range for c in doc.chunks]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(text)
    assert "".join(text[a:b] for a, b in ranges).replace(" ", "") == text.replace(" ", "")
    tok = chunker.tokenizer
    assert doc.token_ids.count(tok.cls_token_id) == 1 and doc.token_ids.count(tok.sep_token_id) == 1
    assert doc.token_ids[0] == tok.cls_token_id and doc.token_ids[-1] == tok.sep_token_id
    np.testing.assert_allclose(np.linalg.norm(doc.vectors, axis=1), 1.0, atol=1e-5)
