"""Granularities side by side (issue 29, item 5): late, naive, hybrid per granularity, small-to-big; real engine.

The right answers come from outside the code under test: small-to-big rankings are rebuilt here in
float64 from ``chunk_granularities``' own ``parents`` (not the tables' ``parent_chunk_id``) and
judged by a hand-written overlap test; the winners of the labeled sets below are known by
construction (see each test).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from latechunk_dagster import FixedTokens, LateChunker, Sentences, sink
from latechunk_dagster.evaluation import (
    GranularityEvalReport,
    LabeledQuery,
    Passage,
    evaluate_granularity_rows,
    evaluate_table,
    granularity_tables,
    read_chunk_rows,
    write_queries,
)
from latechunk_dagster.evaluation.granularity import small_to_big
from latechunk_dagster.evaluation.plot import plot_report
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sink.rows import chunk_batch, lineage
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sources.files import Document

# Three documents on unrelated topics. Each opens with a sentence the first queries copy; the
# relevant passage is a LATER sentence of the same document that shares no word with the query.
DOCS = {
    "pump": "The hydraulic pump for fire engines pushes water through long hoses. "
    "Its seal is replaced every spring by the maintenance crew. The housing is painted bright red. "
    "A warranty of two years covers every part.",
    "bread": "Sourdough bread is baked from flour, water and a wild yeast starter. "
    "The dough rests overnight in a cool cellar. A hot stone oven gives the crust its colour. "
    "Loaves are sold at the Saturday market.",
    "violin": "The violin is a small string instrument played with a bow. "
    "Its body is carved from spruce and maple. Four strings are tuned in fifths. "
    "Old instruments from Cremona fetch high prices at auction.",
}
# granularities finest first: sentences, then the whole document (each document fits one chunk)
GRANULARITIES = {"sent": Sentences(max_tokens=24), "doc": FixedTokens(chunk_size=512)}


def passage(doc_id: str, sentence: str) -> Passage:
    start = DOCS[doc_id].index(sentence)
    return Passage(doc_id, (start, start + len(sentence)))


# Each query copies a document's opening sentence, so the opening sentence ranks first among the
# sentences; the passage is another sentence of that document. By construction small-to-big
# (sentence -> whole document) finds it at rank 1, the sentence granularity does not.
QUERIES = [
    LabeledQuery("hydraulic pump for fire engines pushing water through hoses", (passage("pump", "A warranty"),)),
    LabeledQuery("sourdough bread baked from flour and a wild yeast starter", (passage("bread", "Loaves are"),)),
    LabeledQuery("small string instrument played with a bow", (passage("violin", "Four strings"),)),
]


def granularity_rows(chunker: LateChunker, strategies: dict[str, Any], partition: str = "p") -> dict[str, pa.Table]:
    """The chunk rows of each granularity, as the sink writes them (``sink.rows.chunk_batch``)."""
    docs = [Document.from_text(d, t) for d, t in DOCS.items()]
    results = chunker.chunk_granularities([d.text for d in docs], strategies, doc_ids=[d.doc_id for d in docs])
    names = list(strategies)
    now = datetime.now(UTC)
    out = {}
    for i, g in enumerate(names):
        pairs = [(doc, res[g]) for doc, res in zip(docs, results)]
        meta = lineage(chunker.settings, strategies[g], "test-run", now, granularity=g)
        parent = names[i + 1] if i + 1 < len(names) else None
        out[g] = pa.Table.from_batches([chunk_batch(pairs, partition, meta, chunker.embedding_dim, parent)])
    return out


def overlaps(hit: tuple[str, tuple[int, int] | None], p: Passage) -> bool:
    """The relevance rule, written out again: same document, half-open ranges overlap."""
    return hit[0] == p.doc_id and hit[1] is not None and hit[1][0] < p.char_range[1] and p.char_range[0] < hit[1][1]


def test_small_to_big_merges_duplicate_parents_into_k_distinct() -> None:
    # four fine rows on a line of angles; rows 0 and 1 share parent 7, rows 2 and 3 parent 8, 9
    fine = np.array([[1.0, 0.0], [0.9, 0.1], [0.5, 0.5], [0.0, 1.0]])
    parents = [(7, ("a", (0, 10))), (7, ("a", (0, 10))), (8, ("a", (10, 20))), (9, ("b", (0, 5)))]
    [ranked] = small_to_big(np.array([[1.0, 0.0]]), fine, parents, k=2)
    assert ranked == [("a", (0, 10)), ("a", (10, 20))]  # row 1's parent merged into row 0's
    [ranked] = small_to_big(np.array([[0.0, 1.0]]), fine, parents, k=5)
    assert ranked == [("b", (0, 5)), ("a", (10, 20)), ("a", (0, 10))]  # only 3 distinct parents


def test_small_to_big_wins_by_construction_and_matches_a_float64_reference(chunker: LateChunker) -> None:
    rows = granularity_rows(chunker, GRANULARITIES)
    report = evaluate_granularity_rows(chunker, rows, QUERIES, k=3, bootstrap_samples=200)
    assert isinstance(report, GranularityEvalReport)
    assert report.granularities == ["sent", "doc"]
    blends = [f"blend{p}" for p in (25, 50, 75)]  # issue 48: the blends' rows beside late and naive
    assert report.methods() == [
        *[f"{m}_{g}" for g in ("sent", "doc") for m in ("late", *blends, "naive")],
        "small_to_big_sent",
        *[f"small_to_big_{b}_sent" for b in blends],
    ]
    # by construction: the copied opening sentence ranks first, not the passage; its parent is the
    # passage's document
    assert report.mean("late_sent")["recall@1"] == 0.0
    assert report.mean("small_to_big_sent")["recall@1"] == 100.0
    assert report.mean("late_doc")["recall@1"] == 100.0  # one chunk per document, three topics
    # small-to-big never ranks a passage later than the fine ranking does (its parent is at or above)
    s2b, fine = report.scores["small_to_big_sent"], report.scores["late_sent"]
    assert (s2b >= fine).all()

    # the float64 reference: fine vectors ranked by cosine, mapped to parents through the core's
    # ``parents`` indices, duplicates dropped, judged by the overlap test above
    docs = list(DOCS)
    results = chunker.chunk_granularities(list(DOCS.values()), GRANULARITIES, doc_ids=docs)
    fine_rows = [(d, c, r["sent"].parents[c.index], r["doc"]) for d, r in zip(docs, results) for c in r["sent"].chunks]
    vectors = np.concatenate([r["sent"].vectors for r in results]).astype(np.float64)
    qvecs = chunker.embed_queries([q.query for q in QUERIES]).astype(np.float64)
    cos = (qvecs / np.linalg.norm(qvecs, axis=1, keepdims=True)) @ (
        vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    ).T
    for i, q in enumerate(QUERIES):
        parents: list[tuple[str, tuple[int, int]]] = []
        for j in np.argsort(-cos[i], kind="stable"):
            d, _, p, coarse = fine_rows[j]
            hit = (d, coarse.chunks[p].char_range)
            if hit not in parents:
                parents.append(hit)
        first = next(r for r, hit in enumerate(parents[:3]) if overlaps(hit, q.passages[0]))
        assert s2b[i, report.metrics.index("mrr@3")] == pytest.approx(1.0 / (first + 1))

    # the table: one block per granularity, then small-to-big and its difference from late doc
    lines = report.markdown().splitlines()
    assert lines[0] == "| | nDCG@3 | R@1 | R@3 | MRR@3 |"
    names = [line.split("|")[1].strip() for line in lines[2:]]
    assert names == [
        "late sent",
        "naive sent",
        "late sent - naive sent (95% CI)",
        "late doc",
        "naive doc",
        "late doc - naive doc (95% CI)",
        "small-to-big sent -> doc",
        "small-to-big sent -> doc - late doc (95% CI)",
        *[f"blend a={w} {g}" for g in ("sent", "doc") for w in (0.25, 0.5, 0.75)],
        *[f"small-to-big blend a={w} sent -> doc" for w in (0.25, 0.5, 0.75)],
    ]
    floats = report.floats()
    assert floats["small_to_big_sent_recall_at_1"] == 100.0 and floats["late_sent_recall_at_1"] == 0.0
    # the single-table keys (the retrieval_eval check reads them) are the finest granularity's
    assert floats["late_recall_at_1"] == floats["late_sent_recall_at_1"]
    assert floats["delta_ndcg_at_3"] == floats["delta_sent_ndcg_at_3"]
    assert floats["small_to_big_delta_sent_recall_at_1_ci_low"] == 0.0  # 100 - 100 on every query
    # the winner on R@1 among the granularities' late rankings and small-to-big: late doc and
    # small-to-big both find every passage (the earlier in the table wins a tie), late sent none;
    # on these queries that is no clear win, and the verdict says so
    assert report.contenders() == ["late_sent", "late_doc", "small_to_big_sent"]
    assert report.winner("recall@1") == ("late_doc", "small_to_big_sent")
    assert report.verdict("recall@1") == (
        "best late chunking on R@1: late doc (100.0), +0.0 [+0.0, +0.0] points over small-to-big sent -> doc "
        "(100.0); the interval holds 0: not a clear win on these queries (naive and hybrid rows: references, "
        "not contenders)"
    )


def test_identical_granularities_make_small_to_big_equal_the_coarse_ranking(chunker: LateChunker) -> None:
    # a fine granularity cut exactly like the coarse one: each chunk is its own parent's twin, so
    # small-to-big ranks the parents in the coarse granularity's own order
    same = {"a": Sentences(max_tokens=24), "b": Sentences(max_tokens=24)}
    report = evaluate_granularity_rows(chunker, granularity_rows(chunker, same), QUERIES, k=3, bootstrap_samples=50)
    np.testing.assert_array_equal(report.scores["small_to_big_a"], report.scores["late_b"])
    np.testing.assert_array_equal(report.scores["late_a"], report.scores["late_b"])


def test_missing_parent_is_a_clear_error(chunker: LateChunker) -> None:
    rows = granularity_rows(chunker, GRANULARITIES)
    rows["doc"] = rows["doc"].filter(pc.not_equal(rows["doc"].column("doc_id"), "bread"))
    rows["sent"] = rows["sent"]
    with pytest.raises(ValueError, match=r"chunk '[0-9a-f]+' of granularity 'sent' has parent .* not among its rows"):
        evaluate_granularity_rows(chunker, rows, QUERIES, k=3)
    with pytest.raises(ValueError, match="at least two"):
        evaluate_granularity_rows(chunker, {"sent": rows["sent"]}, QUERIES)


@pytest.fixture(scope="module")
def store(tmp_path_factory, chunker: LateChunker) -> Path:
    """A LanceDB directory with the granularity tables ``chunks_sent`` / ``chunks_doc`` (full-text
    index on both) beside an unrelated table named like one of them."""
    root = tmp_path_factory.mktemp("granularity-eval")
    db = sink.connect(str(root / "lancedb"))
    for g, rows in granularity_rows(chunker, GRANULARITIES).items():
        table = sink.open_or_create(db, granularity_table("chunks", g), sink.chunk_schema(chunker.embedding_dim))
        table.add(rows)
        refresh_indexes(table)
    db.create_table("chunks_backup", pa.table({"x": [1]}))
    write_queries(root / "queries.jsonl", QUERIES)
    return root


def test_tables_are_found_finest_first_and_evaluated_with_hybrid(store: Path, chunker: LateChunker) -> None:
    db = sink.connect(str(store / "lancedb"))
    tables = granularity_tables(db, "chunks")
    assert list(tables) == ["sent", "doc"]  # by their parent links, not by name
    report = evaluate_table(chunker, tables, QUERIES, k=3, bootstrap_samples=100)
    assert isinstance(report, GranularityEvalReport)
    assert "hybrid_sent" in report.methods() and "hybrid_doc" in report.methods()
    rows = {g: read_chunk_rows(t) for g, t in tables.items()}
    assert report.chunks == {g: r.num_rows for g, r in rows.items()}
    assert "| hybrid sent - late sent (95% CI) |" in report.markdown()
    png = plot_report(report, store / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # one granularity table alone is the single-table report, unchanged
    single = evaluate_table(chunker, {"doc": tables["doc"]}, QUERIES, k=3, bootstrap_samples=100)
    assert single.methods() == ["late", "naive", "hybrid", "blend25", "blend50", "blend75"]
    assert granularity_tables(db, "nothing") == {}


def test_cli_eval_prints_every_granularity_and_the_winner(store: Path) -> None:
    env = {**os.environ, "LATECHUNK_HOME": str(store), "HF_HUB_OFFLINE": "1"}
    env.pop("DAGSTER_HOME", None)
    out = subprocess.run(
        [sys.executable, "-m", "latechunk_dagster.app.cli", "eval", str(store / "queries.jsonl"), "-k", "3"]
        + ["--plot", str(store / "cli.png")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "| | nDCG@3 | R@1 | R@3 | MRR@3 |"
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ")]
    assert "late sent" in rows and "late doc" in rows and "small-to-big sent -> doc" in rows
    assert "hybrid doc" in rows
    assert lines[-3].startswith("3 queries; chunks per granularity (sent ")
    assert lines[-2].startswith("best late chunking on nDCG@3: ")
    assert lines[-1].startswith("best configuration on nDCG@3: ") and "select it with: blend=" in lines[-1]
    assert (store / "cli.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_retrieval_eval_asset_reports_the_granularities_and_its_check_reads_the_finest(
    store: Path, chunker: LateChunker
) -> None:
    import dagster as dg

    from latechunk_dagster.integration.evaluation import late_vs_naive_result, retrieval_eval_asset
    from latechunk_dagster.integration.resources import LanceDBResource
    from tests.conftest import session_engine_resource

    keys = [dg.AssetKey("chunk_vectors_sent"), dg.AssetKey("chunk_vectors_doc")]
    asset, _ = retrieval_eval_asset(
        chunk_asset_key=keys, queries_path=store / "queries.jsonl", store_resource_key=None, margin=100.0
    )
    assert set(asset.asset_deps[asset.key]) == set(keys)
    result = dg.materialize(
        [asset],
        resources={"engine": session_engine_resource(chunker), "lancedb": LanceDBResource(uri=str(store / "lancedb"))},
        run_config={"ops": {asset.op.name: {"config": {"k": 3, "bootstrap_samples": 100}}}},
        raise_on_error=False,
    )
    assert result.success
    [event] = result.get_asset_materialization_events()
    md = {k: v.value for k, v in event.step_materialization_data.materialization.metadata.items()}
    assert "| small-to-big sent -> doc |" in md["table"] and "best late chunking on nDCG@3: " in md["table"]
    assert md["small_to_big_sent_recall_at_1"] == 100.0 and md["late_sent_recall_at_1"] == 0.0
    assert md["late_ndcg_at_3"] == md["late_sent_ndcg_at_3"]  # what the check reads: the finest granularity
    assert Path(md["plot_path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    verdict = late_vs_naive_result(event.step_materialization_data.materialization.metadata)
    assert md["checked_granularity"] == "sent"
    assert verdict.passed
    # the check reads the table's default: small-to-big on the finest granularity (a late table: blend=1)
    assert md["default_method"] == "small-to-big sent -> doc" and md["default_setting"].startswith("blend=1, ")
    assert verdict.description.startswith(
        f"small-to-big sent -> doc (the table's default) nDCG@3 {md['small_to_big_sent_ndcg_at_3']:.1f} vs naive (sent)"
    )


def test_the_former_report_name_still_imports_with_a_deprecation_warning() -> None:
    """``GranularityReport`` (the evaluation report's name until the pipeline's commit counts were
    told apart from it) is the same class, with a DeprecationWarning."""
    import latechunk_dagster.evaluation as evaluation

    with pytest.warns(DeprecationWarning, match="GranularityEvalReport"):
        assert evaluation.GranularityReport is GranularityEvalReport
