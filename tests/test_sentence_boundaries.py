"""The default sentence segmenter on the hand-written boundary set, and language validation at construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latechunk_dagster.core.chunking import Paragraphs, Sentences, strategy_from_config
from latechunk_dagster.core.chunking.markdown import MarkdownSections
from latechunk_dagster.core.chunking.segmenters import DEFAULT_SEGMENTER, sentence_starts

CASES = json.loads((Path(__file__).parent / "data" / "sentence_boundaries.json").read_text())["cases"]

#: Cases the default segmenter (sentencex 1.0.32) passes, recorded by bench/segmenters.py: 71 of 77.
#: pySBD 0.3.4 passes 70. The test fails if the default gets worse (or a case is added that it fails).
RECORDED_PASSED = 71
KNOWN_FAILURES = {"abbreviation-10", "abbreviation-11", "bracket-4", "ellipsis-2", "heading-2", "abbreviation-16"}


def expected_starts(case: dict) -> set[int]:
    """Sentence starts after the first, moved past whitespace."""
    text = "".join(case["sentences"])
    out, pos = set(), 0
    for k, s in enumerate(case["sentences"]):
        j = pos
        while j < len(text) and text[j].isspace():
            j += 1
        if k:
            out.add(j)
        pos += len(s)
    return out


def predicted_starts(text: str, starts: list[int]) -> set[int]:
    out = set()
    for s in starts:
        while s < len(text) and text[s].isspace():
            s += 1
        if 0 < s < len(text):
            out.add(s)
    return out


def test_the_set_has_enough_cases_of_every_kind() -> None:
    kinds = {c["category"] for c in CASES}
    assert len(CASES) >= 60
    assert {"abbreviation", "initials", "decimal", "money", "time", "quote", "bracket", "list", "ellipsis"} <= kinds
    assert {"url_email", "heading"} <= kinds
    assert len({c["language"] for c in CASES}) >= 8


def test_default_segmenter_reaches_its_recorded_accuracy() -> None:
    failed = set()
    for case in CASES:
        text = "".join(case["sentences"])
        got = predicted_starts(text, sentence_starts(text, case["language"], segmenter=DEFAULT_SEGMENTER))
        if got != expected_starts(case):
            failed.add(case["id"])
    assert len(CASES) - len(failed) >= RECORDED_PASSED, sorted(failed - KNOWN_FAILURES)
    assert failed <= KNOWN_FAILURES


def test_offsets_are_code_points() -> None:
    text = "Grüße aus 😀 Köln. Zweiter Satz."
    assert sentence_starts(text, "de") == [0, text.index("Zweiter")]


def test_pathological_sentence_is_fast_with_the_default() -> None:
    text = "See the list ...[484 216 622 139 651 592 379 228 242 355] for details. Next sentence."
    # pySBD takes minutes here; the time bound of the test run (pytest's) is the real check.
    assert sentence_starts(text * 200, "en")[0] == 0


@pytest.mark.parametrize("cls", [Sentences, Paragraphs, MarkdownSections])
def test_unsupported_language_is_refused_at_construction(cls: type) -> None:
    with pytest.raises(
        ValueError, match=r"language='pt' is not supported by the sentence segmenter 'pysbd'; supported: am, ar"
    ):
        cls(max_tokens=64, language="pt", segmenter="pysbd")
    with pytest.raises(ValueError, match=r"language='xx' .*'sentencex'; supported: .*\ben\b.*\bpt\b"):
        cls(max_tokens=64, language="xx")
    with pytest.raises(ValueError, match=r"segmenter='spacy' is unknown; supported: pysbd, sentencex"):
        cls(max_tokens=64, segmenter="spacy")
    assert cls(max_tokens=64, language="pt").language == "pt"  # sentencex has Portuguese rules


def test_run_config_with_unsupported_language_fails_before_any_engine() -> None:
    from latechunk_dagster import Sentences
    from latechunk_dagster.integration.assets import ChunkingConfig

    with pytest.raises(ValueError, match=r"language='zz'.*supported: "):
        ChunkingConfig(strategy="sentences", language="zz").build(Sentences(max_tokens=128))
    with pytest.raises(ValueError, match=r"language='pt'.*'pysbd'"):
        ChunkingConfig(language="pt", segmenter="pysbd").build(Sentences(max_tokens=128))
    with pytest.raises(ValueError, match=r"language='pt'.*'pysbd'"):
        strategy_from_config("sentences", {"max_tokens": 64, "language": "pt", "segmenter": "pysbd"})
