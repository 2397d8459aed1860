"""Token ranges, char ranges and chunk texts, checked by hand (contract section 2)."""

from __future__ import annotations

from latechunk_dagster import FixedTokens, LateChunker
from latechunk_dagster.core.chunking.base import Span, check_tiling


def test_hand_checked_ranges(chunker: LateChunker) -> None:
    text = "Berlin is big. It is old."
    # [CLS] berlin is big . it is old . [SEP]
    [doc] = chunker.chunk([text], FixedTokens(3))
    assert [c.token_range for c in doc.chunks] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert [c.char_range for c in doc.chunks] == [(0, 9), (10, 17), (18, 25), None]
    assert [c.text for c in doc.chunks] == ["Berlin is", "big. It", "is old.", None]
    assert doc.token_ids[0] == chunker.tokenizer.cls_token_id
    assert doc.token_ids[-1] == chunker.tokenizer.sep_token_id


def test_special_tokens_only_chunk_has_no_char_range(chunker: LateChunker) -> None:
    [doc] = chunker.chunk(["Hello world"], FixedTokens(1))
    assert [c.token_range for c in doc.chunks] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert doc.chunks[0].char_range is None and doc.chunks[0].text is None
    assert doc.chunks[-1].char_range is None
    assert [c.text for c in doc.chunks[1:3]] == ["Hello", "world"]


def test_multibyte_characters_at_chunk_edges(chunker: LateChunker) -> None:
    text = "東京 🎉 café naïve e\u0301tude 👩\u200d👩\u200d👧 end"
    for size in range(1, 12):
        [doc] = chunker.chunk([text], FixedTokens(size))
        check_tiling([Span(*c.token_range) for c in doc.chunks], len(doc.token_ids))
        assert all(c.token_range[1] > c.token_range[0] for c in doc.chunks)
        for c in doc.chunks:
            if c.char_range is not None:
                assert c.text == text[c.char_range[0] : c.char_range[1]]
                assert c.text == c.text.strip() and c.text
        covered = [c.char_range for c in doc.chunks if c.char_range]
        assert covered[0][0] == 0 and covered[-1][1] == len(text)
        assert all(a[1] <= b[0] for a, b in zip(covered, covered[1:]))
    # code points, not UTF-8 bytes: '東' is one character
    [doc] = chunker.chunk([text], FixedTokens(2))
    assert doc.chunks[0].text == "東"
    assert doc.chunks[1].text == "京 🎉"  # '🎉' is [UNK] with its own one-code-point range


def test_prefix_tokens_have_no_source_range(minilm_dir) -> None:
    from transformers import AutoTokenizer

    from latechunk_dagster.core.tokenization import tokenize_document

    tok = AutoTokenizer.from_pretrained(str(minilm_dir))
    t = tokenize_document(tok, "Paris is nice.", prefix="passage: ")
    # [CLS] passage : paris is nice . [SEP]
    assert t.n_prefix == 2
    assert t.offsets == [None, None, None, (0, 5), (6, 8), (9, 13), (13, 14), None]
    assert t.token_ids == list(tok("passage: Paris is nice.")["input_ids"])
