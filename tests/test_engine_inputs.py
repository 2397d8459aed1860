"""Bad input gets a typed error naming the document; odd but valid input gets correct chunks."""

from __future__ import annotations

import numpy as np
import pytest

from latechunk_dagster import (
    DocumentBatchError,
    DocumentError,
    DocumentTooLongError,
    EmptyDocumentError,
    FixedTokens,
    InvalidUnicodeError,
    LateChunker,
)
from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.errors import StrategyFailedError
from tests.reference import reference_chunk_vectors


def test_bad_documents_fail_alone_with_typed_errors(chunker: LateChunker) -> None:
    texts = ["A good document.", "", "   \n\t ", "bad \ud800 surrogate", "Another good one."]
    ids = ["good-1", "empty", "blank", "surrogate", "good-2"]
    with pytest.raises(DocumentBatchError) as info:
        chunker.chunk(texts, FixedTokens(4), doc_ids=ids)
    results = info.value.results
    assert [type(r).__name__ for r in results] == [
        "ChunkedDocument",
        "EmptyDocumentError",
        "EmptyDocumentError",
        "InvalidUnicodeError",
        "ChunkedDocument",
    ]
    assert [f.doc_id for f in info.value.failures] == ["empty", "blank", "surrogate"]
    assert "'surrogate' (index 3)" in str(results[3]) and "a lone surrogate U+D800 at character 4" in str(results[3])
    assert all(isinstance(f, DocumentError) for f in info.value.failures)
    assert results[4].doc_id == "good-2" and results[4].vectors.shape[1] == 384

    returned = chunker.chunk(texts, FixedTokens(4), doc_ids=ids, errors="return")
    assert isinstance(returned[1], EmptyDocumentError) and isinstance(returned[3], InvalidUnicodeError)
    np.testing.assert_allclose(returned[0].vectors, results[0].vectors, atol=1e-6)


def test_too_long_without_windows_is_refused_not_truncated(chunker: LateChunker) -> None:
    chunker.allow_windows = False
    try:
        out = chunker.chunk(["word " * 300, "short"], FixedTokens(8), errors="return")
    finally:
        chunker.allow_windows = True
    assert isinstance(out[0], DocumentTooLongError)
    assert "302 tokens > max_model_len 256" in str(out[0])
    assert out[1].chunks[0].text == "short"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("nul byte", "before\x00after and more"),
        ("control characters", "bell\x07 tab\t vt\x0b formfeed\x0c escape\x1b[0m done"),
        ("unknown characters", "snow \u2603 and \U0001d518 and \U0001f9ff unknown"),
    ],
)
def test_odd_but_valid_text(chunker: LateChunker, minilm_dir, name: str, text: str) -> None:
    [doc] = chunker.chunk([text], FixedTokens(2))
    ref = reference_chunk_vectors(minilm_dir, doc.token_ids, [c.token_range for c in doc.chunks])
    np.testing.assert_allclose(doc.vectors, ref, atol=1e-4)
    for c in doc.chunks:
        if c.char_range:
            assert c.text == text[c.char_range[0] : c.char_range[1]]
    # the tokenizer drops control characters (BERT clean_text) but offsets still point into the original text
    sourced = [c.char_range for c in doc.chunks if c.char_range]
    assert sourced[0][0] == 0 and sourced[-1][1] == len(text)


def test_nul_byte_is_deleted_by_the_normalizer_and_the_word_joins(chunker: LateChunker) -> None:
    # BERT's normalizer deletes NUL, so "ab\x00cd" is the word "abcd" = "abc" + "##d";
    # the first token's range covers the NUL, so no character of the source is lost.
    t = chunker.tokenize("ab\x00cd")
    assert chunker.tokenizer.convert_ids_to_tokens(t.token_ids) == ["[CLS]", "abc", "##d", "[SEP]"]
    assert t.offsets == [None, (0, 4), (4, 5), None]


def test_unknown_character_maps_to_unk_with_its_own_range(chunker: LateChunker) -> None:
    t = chunker.tokenize("snow \U0001f9ff here")
    unk = chunker.tokenizer.unk_token_id
    i = t.token_ids.index(unk)
    assert t.offsets[i] == (5, 6)


def test_hundred_thousand_character_word(chunker: LateChunker, minilm_dir) -> None:
    text = "start " + "x" * 100_000 + " end"
    [doc] = chunker.chunk([text], FixedTokens(2))
    # WordPiece maps a word over 100 characters to one [UNK] covering the whole word
    assert len(doc.token_ids) == 5
    # [CLS] start | [UNK] end | [SEP]
    assert [c.char_range for c in doc.chunks] == [(0, 5), (6, 100_010), None]
    assert doc.chunks[1].text == "x" * 100_000 + " end"
    ref = reference_chunk_vectors(minilm_dir, doc.token_ids, [c.token_range for c in doc.chunks])
    np.testing.assert_allclose(doc.vectors, ref, atol=1e-4)


def test_second_engine_beside_an_in_process_one_is_refused(chunker: LateChunker, minilm_dir) -> None:
    assert chunker.in_process
    with pytest.raises(RuntimeError, match="close it first"):
        LateChunker(minilm_dir, dtype="float32", enforce_eager=True)
    # and the live engine still works
    assert chunker.chunk(["still alive"], FixedTokens(4))[0].chunks[0].text == "still alive"


class _Fragile(FixedTokens):
    """A strategy that fails on one document, as a buggy third-party segmenter might."""

    def spans(self, text, tokens) -> list[Span]:
        if "boom" in text:
            raise IndexError("segmenter bug")
        return super().spans(text, tokens)


def test_a_strategy_failure_is_one_documents_failure(chunker: LateChunker) -> None:
    out = chunker.chunk(["fine text", "boom goes this one", "also fine"], _Fragile(4), errors="return")
    assert isinstance(out[1], StrategyFailedError) and out[1].reason == "strategy_failed"
    assert "IndexError: segmenter bug" in str(out[1]) and "index 1" in str(out[1])
    assert out[0].chunks[0].text == "fine text" and out[2].chunks[0].text == "also fine"


def test_api_misuse_is_refused_up_front(chunker: LateChunker) -> None:
    with pytest.raises(TypeError, match="not one str"):
        chunker.chunk("one document as a bare string", FixedTokens(4))
    with pytest.raises(TypeError, match="ChunkingStrategy"):
        chunker.chunk(["text"], "sentences")
    with pytest.raises(ValueError, match="'raise' or 'return'"):
        chunker.chunk(["text"], FixedTokens(4), errors="ignore")
    with pytest.raises(ValueError, match="2 texts but 1 doc_ids"):
        chunker.chunk(["a", "b"], FixedTokens(4), doc_ids=["x"])
    assert chunker.chunk([], FixedTokens(4)) == []


def test_text_that_is_not_utf8_is_named_as_such() -> None:
    """A Latin-1 file read by a store (bytes that are not UTF-8 are escaped as U+DC80-U+DCFF) is
    refused naming the byte; a lone surrogate from elsewhere is named as one."""
    from latechunk_dagster.core.tokenization import check_text
    from latechunk_dagster.sources.text_files import decode

    latin1 = decode("Café au lait".encode("latin-1"))
    with pytest.raises(InvalidUnicodeError, match=r"not valid UTF-8: byte 0xe9 at character 3 \(a file in Latin-1"):
        check_text(latin1, 0, "menu.txt")
    with pytest.raises(InvalidUnicodeError, match=r"a lone surrogate U\+D800 at character 3"):
        check_text("bad\ud800", 0, "x")
