"""Evaluation without an engine: metrics against hand-computed values, the relevance rule, the
bootstrap, the query file and its errors, the table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster.app.demo_queries import context_set, section_range, stdlib_queries
from latechunk_dagster.evaluation import (
    EvalReport,
    Passage,
    QueryFileError,
    bootstrap_mean_ci,
    judge,
    matches,
    metric_names,
    query_metrics,
    read_queries,
    top_k,
    write_queries,
)

# -- the worked example ---------------------------------------------------------------------
# Two relevant passages: P1 = characters [10, 20) of document "a", P2 = all of document "b".
# The ranking (rank: doc, char range -> what the rule says):
#   1: c [0, 5)     other document                           gain 0
#   2: a [15, 30)   overlaps P1 at [15, 20): P1 found         gain 1
#   3: a [0, 12)    overlaps P1 again: a duplicate            gain 0
#   4: a [20, 25)   touches P1's end only (half-open): miss  gain 0
#   5: d [0, 9)     other document                           gain 0
#   6: b [100, 200) document-level P2: found                 gain 1
# DCG@10  = 1/log2(2+1) + 1/log2(6+1) = 0.630930 + 0.356207 = 0.987137
# IDCG@10 = two passages, one per rank: 1/log2(2) + 1/log2(3) = 1 + 0.630930 = 1.630930
# nDCG@10 = 0.987137 / 1.630930 = 0.605260
# R@1 = 0/2, R@5 = 1/2 (only P1 by rank 5), R@10 = 2/2; MRR@10 = 1/2 (first relevant at rank 2)
# At k = 5: DCG@5 = 0.630930, nDCG@5 = 0.630930 / 1.630930 = 0.386853.
PASSAGES = [Passage("a", (10, 20)), Passage("b", None)]
RANKING = [("c", (0, 5)), ("a", (15, 30)), ("a", (0, 12)), ("a", (20, 25)), ("d", (0, 9)), ("b", (100, 200))]


def test_worked_example_at_10() -> None:
    gains, found = judge(RANKING, PASSAGES)
    assert gains.tolist() == [0, 1, 0, 0, 0, 1] and found == [1, 5]
    m = query_metrics(gains, found, 10)
    assert m["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(7)) / (1 + 1 / math.log2(3)))
    assert m["ndcg@10"] == pytest.approx(0.605260, abs=1e-6)
    assert (m["recall@1"], m["recall@5"], m["recall@10"], m["mrr@10"]) == (0.0, 0.5, 1.0, 0.5)


def test_worked_example_at_5_cuts_the_ranking() -> None:
    gains, found = judge(RANKING, PASSAGES)
    m = query_metrics(gains, found, 5)
    assert list(m) == ["ndcg@5", "recall@1", "recall@5", "mrr@5"]
    assert m["ndcg@5"] == pytest.approx(0.386853, abs=1e-6)
    assert (m["recall@5"], m["mrr@5"]) == (0.5, 0.5)


def test_perfect_and_empty_rankings() -> None:
    gains, found = judge([("a", (12, 14)), ("b", None)], PASSAGES)
    assert query_metrics(gains, found, 10) == {
        "ndcg@10": 1.0,
        "recall@1": 0.5,
        "recall@5": 1.0,
        "recall@10": 1.0,
        "mrr@10": 1.0,
    }
    gains, found = judge([("z", (0, 1))] * 3, PASSAGES)
    assert set(query_metrics(gains, found, 10).values()) == {0.0}


def test_one_relevant_passage_at_rank_3() -> None:
    gains, found = judge([("x", (0, 1)), ("y", (0, 1)), ("a", (0, 99))], [Passage("a", (50, 60))])
    m = query_metrics(gains, found, 10)
    assert m["ndcg@10"] == pytest.approx(1 / math.log2(4)) and m["mrr@10"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("hit", "passage", "expected"),
    [
        (("a", (0, 10)), Passage("a", (5, 8)), True),  # chunk contains the passage
        (("a", (5, 8)), Passage("a", (0, 10)), True),  # passage contains the chunk
        (("a", (0, 10)), Passage("a", (9, 20)), True),  # one character in common
        (("a", (0, 10)), Passage("a", (10, 20)), False),  # touching: half-open ranges
        (("a", (20, 30)), Passage("a", (10, 20)), False),
        (("b", (0, 10)), Passage("a", (0, 10)), False),  # another document
        (("a", None), Passage("a", (0, 10)), False),  # a chunk without text
        (("a", (500, 600)), Passage("a", None), True),  # document-level
        (("a", None), Passage("a", None), True),
    ],
)
def test_relevance_rule(hit, passage, expected) -> None:
    assert matches(hit, passage) is expected


def test_one_chunk_covering_two_passages_finds_both_with_gain_one() -> None:
    gains, found = judge([("a", (0, 100))], [Passage("a", (0, 5)), Passage("a", (50, 60))])
    assert gains.tolist() == [1.0] and found == [0, 0]
    m = query_metrics(gains, found, 10)
    assert m["recall@1"] == 1.0 and m["ndcg@10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_metric_names() -> None:
    assert metric_names(10) == ["ndcg@10", "recall@1", "recall@5", "recall@10", "mrr@10"]
    assert metric_names(3) == ["ndcg@3", "recall@1", "recall@3", "mrr@3"]
    with pytest.raises(ValueError, match="k must be"):
        metric_names(0)


def test_bootstrap_is_seeded_and_covers_the_mean() -> None:
    assert bootstrap_mean_ci(np.full(20, 3.0)) == (3.0, 3.0, 3.0)
    values = np.array([0.0, 1.0] * 50)
    mean, low, high = bootstrap_mean_ci(values, seed=0)
    assert mean == 0.5 and (low, high) == bootstrap_mean_ci(values, seed=0)[1:]
    # normal approximation: 0.5 +- 1.96 * sqrt(0.25 / 100) = [0.402, 0.598]
    assert 0.38 < low < 0.43 and 0.57 < high < 0.62
    noisy = np.random.default_rng(5).normal(size=100)
    assert bootstrap_mean_ci(noisy, seed=1) != bootstrap_mean_ci(noisy, seed=0)  # the seed is used


def test_top_k_is_cosine_and_stable() -> None:
    candidates = np.array([[10.0, 0.0], [0.0, 1.0], [0.0, 5.0], [1.0, 1.0]])
    order = top_k(np.array([[0.0, 2.0]]), candidates, 3)
    assert order.tolist() == [[1, 2, 3]]  # the length of a vector does not count; ties keep row order


# -- query files ---------------------------------------------------------------------------


def write_lines(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_query_file_groups_lines_of_one_query(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "q.jsonl",
        [
            {"query": "q1", "doc_id": "a", "char_start": 0, "char_end": 5},
            "",
            {"query": "q2", "doc_id": 7},
            {"query": "q1", "doc_id": "b", "char_start": 3, "char_end": 4},
        ],
    )
    queries = read_queries(path)
    assert [q.query for q in queries] == ["q1", "q2"]
    assert queries[0].passages == (Passage("a", (0, 5), 1), Passage("b", (3, 4), 4))
    assert queries[1].passages == (Passage("7", None, 3),)
    again = read_queries(write_queries(tmp_path / "again.jsonl", queries))
    assert [(q.query, [(p.doc_id, p.char_range) for p in q.passages]) for q in again] == [
        (q.query, [(p.doc_id, p.char_range) for p in q.passages]) for q in queries
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: invalid JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ({"doc_id": "a"}, "line 2: 'query' must be a non-empty string"),
        ({"query": "  ", "doc_id": "a"}, "line 2: 'query' must be a non-empty string"),
        ({"query": "q"}, "line 2: 'doc_id' must be"),
        ({"query": "q", "doc_id": True}, "line 2: 'doc_id' must be"),
        ({"query": "q", "doc_id": "a", "char_start": 3}, "line 2: give both 'char_start' and 'char_end'"),
        ({"query": "q", "doc_id": "a", "char_start": 5, "char_end": 5}, r"line 2: need 0 <= char_start < char_end"),
        ({"query": "q", "doc_id": "a", "char_start": -1, "char_end": 5}, r"line 2: need 0 <= char_start"),
        ({"query": "q", "doc_id": "a", "char_start": 1.5, "char_end": 5}, "line 2: 'char_start' must be an integer"),
        ({"query": "q", "doc_id": "a", "char-start": 1}, r"line 2: unknown key\(s\) \['char-start'\]"),
        ({"query": "q0", "doc_id": "a"}, "line 2: repeats line 1"),
    ],
)
def test_query_file_errors_name_the_line(tmp_path: Path, line: object, message: str) -> None:
    path = write_lines(tmp_path / "q.jsonl", [{"query": "q0", "doc_id": "a"}, line])
    with pytest.raises(QueryFileError, match=message) as info:
        read_queries(path)
    assert str(path) in str(info.value)


def test_query_file_missing_or_empty(tmp_path: Path) -> None:
    with pytest.raises(QueryFileError, match="not found"):
        read_queries(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(QueryFileError, match="no queries"):
        read_queries(tmp_path / "empty.jsonl")


# -- the table -------------------------------------------------------------------------------


def test_report_table_rows_columns_and_floats() -> None:
    late = np.array([[1.0, 1.0, 1.0, 1.0, 1.0], [0.5, 0.0, 1.0, 1.0, 0.5]])
    naive = np.array([[0.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 1.0, 1.0, 0.5]])
    report = EvalReport(10, metric_names(10), ["q1", "q2"], late, naive, chunks=7, strategies=["s"])
    lines = report.markdown().splitlines()
    assert lines[0] == "| | nDCG@10 | R@1 | R@5 | R@10 | MRR@10 |"
    assert lines[2] == "| late | 75.0 | 50.0 | 100.0 | 100.0 | 75.0 |"
    assert lines[3] == "| naive | 25.0 | 0.0 | 50.0 | 50.0 | 25.0 |"
    assert lines[4].startswith("| late - naive (95% CI) | +50.0 [")
    floats = report.floats()
    assert floats["late_ndcg_at_10"] == 75.0 and floats["naive_recall_at_5"] == 50.0
    assert floats["delta_mrr_at_10"] == 50.0
    assert floats["delta_ndcg_at_10_ci_low"] <= 50.0 <= floats["delta_ndcg_at_10_ci_high"]


# -- the demo query sets (no engine: only where the passages are) -----------------------------


def test_context_set_passages_are_later_sentences_without_the_name() -> None:
    docs, queries = context_set(per_kind=3, seed=1)
    assert (docs, queries) == context_set(per_kind=3, seed=1)
    texts = {d.doc_id: d.text for d in docs}
    assert len(docs) == 12 and len(queries) == 36
    for q in queries:
        [p] = q.passages
        sentence = texts[p.doc_id][p.char_range[0] : p.char_range[1]]
        name = p.doc_id.split("-", 1)[1].capitalize()  # doc_id "<kind>-<name>"
        assert p.char_range[0] > 0 and sentence.endswith(".")
        assert name in q.query and name not in sentence and texts[p.doc_id].count(name) == 1


def test_stdlib_sections_are_located_or_fail_loudly() -> None:
    text = "Module doc.\n\nFunction m.f():\nDoes f.\n\nMore about f.\n\nClass m.C:\nA class."
    assert text[slice(*section_range(text, "m", None))] == "Module doc."
    assert text[slice(*section_range(text, "m", "Function m.f():"))] == "Function m.f():\nDoes f.\n\nMore about f."
    assert text[slice(*section_range(text, "m", "Class m.C:"))] == "Class m.C:\nA class."
    with pytest.raises(ValueError, match=r"'Function m.g\(\):' not found in document 'm'"):
        section_range(text, "m", "Function m.g():")
    with pytest.raises(ValueError, match="module 'gzip' is not in the demo corpus"):
        stdlib_queries({"m": text})


def test_query_file_with_a_byte_order_mark(tmp_path: Path) -> None:
    """The package's BOM rule holds for query files too: a file saved as UTF-8 with BOM reads."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"query": "q1", "doc_id": "a"}\n{"query": "q2", "doc_id": "b"}\n')
    assert [(q.query, q.passages[0].doc_id) for q in read_queries(path)] == [("q1", "a"), ("q2", "b")]
