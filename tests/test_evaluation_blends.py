"""The evaluation scores blends (issue 48): a=0.25/0.5/0.75 next to late, naive and small-to-big, from a
table's stored vectors, whether the table stored late vectors or blended ones; it names the best.

Right answers from outside the code under test: the blended vectors the chunker writes (checked against
a float64 reference in tests/test_blend.py), rankings recomputed here with plain numpy.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from latechunk_dagster import LateChunker
from latechunk_dagster.core.blending import blend_vectors
from latechunk_dagster.evaluation import evaluate_granularity_rows
from latechunk_dagster.evaluation.blends import late_from_stored, table_blend
from latechunk_dagster.evaluation.retrieval import evaluate_rows
from tests.test_granularity_eval import GRANULARITIES, QUERIES, granularity_rows


@pytest.fixture()
def blended(chunker: LateChunker) -> Iterator[LateChunker]:
    host = chunker.host
    yield chunker
    chunker.host = host


@pytest.mark.parametrize("weight", [0.25, 0.5, 0.75])
def test_late_is_solved_from_blended_rows(weight: float) -> None:
    rng = np.random.default_rng(0)
    late = rng.normal(size=(50, 16))
    naive = late + rng.normal(scale=0.8, size=(50, 16))  # cosines ~0.6, as a chunk's two vectors
    stored = blend_vectors(late, naive, weight)
    got = late_from_stored(stored, naive, weight)
    np.testing.assert_allclose(got, late / np.linalg.norm(late, axis=1, keepdims=True), atol=3e-6)


def test_blend_rows_are_the_same_from_a_late_or_a_blended_table(blended: LateChunker) -> None:
    late_rows = granularity_rows(blended, GRANULARITIES)
    blended.blend = 0.5
    blend_rows = granularity_rows(blended, GRANULARITIES)
    assert table_blend(late_rows["sent"]) == 1.0 and table_blend(blend_rows["sent"]) == 0.5
    a = evaluate_granularity_rows(blended, late_rows, QUERIES, k=3, bootstrap_samples=200)
    b = evaluate_granularity_rows(blended, blend_rows, QUERIES, k=3, bootstrap_samples=200)
    kinds = ["late", "blend25", "blend50", "blend75", "naive"]
    assert a.methods() == [f"{m}_{g}" for g in ("sent", "doc") for m in kinds] + [
        f"small_to_big_{m}sent" for m in ("", "blend25_", "blend50_", "blend75_")
    ]
    for m in a.methods():
        np.testing.assert_array_equal(a.scores[m], b.scores[m])  # late solved from the blend ranks alike
    # the blend50 ranking of the late table is the ranking by the vectors the chunker wrote at 0.5
    stored = np.asarray(blend_rows["sent"].column("vector").to_pylist())
    queries = blended.embed_queries([q.query for q in QUERIES])
    top = np.argsort(-(queries @ stored.T), axis=1, kind="stable")[:, 0]
    docs = blend_rows["sent"].column("doc_id").to_pylist()
    firsts = np.array([d == q.passages[0].doc_id for d, q in zip([docs[j] for j in top], QUERIES)], dtype=float)
    recall1 = a.metrics.index("recall@1")
    assert a.default_method() == "small_to_big_sent" and b.default_method() == "small_to_big_blend50_sent"
    # recall@1 counts a hit on the passage, not the document: it is at most the document hit rate
    assert (a.scores["blend50_sent"][:, recall1] <= firsts).all()
    assert "| blend a=0.5 sent |" in a.markdown() and "| small-to-big blend a=0.5 sent -> doc |" in a.markdown()
    assert b.floats()["default_ndcg_at_3"] == b.mean("small_to_big_blend50_sent")["ndcg@3"]


def test_best_names_the_configuration_and_its_setting(blended: LateChunker) -> None:
    rows = granularity_rows(blended, GRANULARITIES)
    report = evaluate_granularity_rows(blended, rows, QUERIES, k=3, bootstrap_samples=200)
    line = report.best()
    # by construction (tests/test_granularity_eval.py) small-to-big finds every passage at rank 1: it is
    # best, with no interval above 0 on three queries unless it wins every one
    methods = [m for m in report.methods() if not m.startswith("naive_")]
    best = max(methods, key=lambda m: (report.mean(m)["ndcg@3"], -methods.index(m)))
    assert line.startswith(f"best configuration on nDCG@3: {report.method_label(best)} (")
    assert "select it with: blend=" in line
    naive = max(["naive_sent", "naive_doc"], key=lambda m: report.mean(m)["ndcg@3"])  # the best naive row
    assert f"over {report.method_label(naive)}" in line
    low = report.delta(best, naive)["ndcg@3"][1]
    assert ("No configuration beats" in line) == (low <= 0.0)
    single = evaluate_rows(blended, rows["sent"], QUERIES, k=3, bootstrap_samples=200)
    assert single.methods() == ["late", "naive", "blend25", "blend50", "blend75"]
    assert single.best().startswith("best configuration on nDCG@3: ")


def test_naive_vectors_skip_the_blend_pass(blended: LateChunker) -> None:
    """A whole text's late vector is its naive one: a blending chunker embeds texts alone in one pass,
    to the same bits as a late one."""
    from latechunk_dagster.evaluation import naive_vectors

    texts = ["The seal is replaced every spring.", "Loaves are sold at the Saturday market."]
    late = naive_vectors(blended, texts)
    blended.blend = 0.5
    prepared = blended.prepare(texts, GRANULARITIES["sent"])
    assert prepared.blend is not None  # the chunker blends documents...
    np.testing.assert_array_equal(naive_vectors(blended, texts), late)  # ...but not texts embedded alone
