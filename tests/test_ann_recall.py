"""Approximate search must not silently lose results: recall@10 >= 0.95 with the default settings.

The data are the hard case measured in ``bench/ann_recall.py`` (12,000 unit vectors, 384 dims,
300 weak topics): there LanceDB's former default (IVF_PQ, sqrt(rows) partitions, 48 sub-vectors)
found about 0.25-0.3 of the exact top 10. The exact top 10 comes from a flat scan
(``bypass_vector_index``), not from the index under test. The index is built once per module.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from latechunk_dagster.sink.indexing import RECALL_TARGET, refresh_indexes
from latechunk_dagster.sink.queries import vector_query

ROWS, DIM, TOPICS, K = 12_000, 384, 300, 10


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "ann_recall.py"
    spec = importlib.util.spec_from_file_location("bench_ann_recall", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _bench()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], np.ndarray]:
    vectors = bench.topic_vectors(ROWS, DIM, TOPICS)
    table = bench.make_table(str(tmp_path_factory.mktemp("ann")), vectors)
    report = refresh_indexes(table, ann_min_rows=5_000)
    return table, report, vectors


def test_default_search_recall_at_10(indexed: tuple[Any, dict[str, Any], np.ndarray]) -> None:
    table, _, vectors = indexed
    queries = bench.queries_near(vectors, 30)
    truth = bench.exact_top(table, queries, K)
    got = [
        [r["chunk_id"] for r in vector_query(table, q, K).select(["chunk_id", "_distance"]).to_list()] for q in queries
    ]
    assert bench.recall(got, truth) >= RECALL_TARGET == 0.95


def test_report_records_the_index_and_a_measured_recall(indexed: tuple[Any, dict[str, Any], np.ndarray]) -> None:
    table, report, _ = indexed
    assert report["rows"] == ROWS
    assert report["vector_index"].startswith("type=IVF_HNSW_SQ, metric=cosine, partitions=1, m=32")
    assert "refine_factor=" in report["search"] and "ef=" in report["search"]
    assert report["recall_sample"] == 50
    assert report["recall_at_10"] >= 0.95 and report["recall_ok"] is True
    assert [i.index_type for i in table.list_indices() if i.columns == ["vector"]] == ["IvfHnswSq"]


def test_exact_scan_bypasses_the_index(indexed: tuple[Any, dict[str, Any], np.ndarray]) -> None:
    table, _, vectors = indexed
    q = bench.queries_near(vectors, 1, seed=7)[0]
    got = vector_query(table, q, K, exact=True).select(["chunk_id", "_distance"]).to_list()
    # The exact top 10 by hand: cosine distance to every stored vector (all unit length), in numpy.
    want = np.argsort(1.0 - vectors.astype(np.float64) @ q.astype(np.float64), kind="stable")[:K]
    ids = bench.chunk_rows(vectors).column("chunk_id").to_pylist()  # row i of the table has ids[i]
    assert [r["chunk_id"] for r in got] == [ids[i] for i in want]
    assert "ANN" not in vector_query(table, q, K, exact=True).explain_plan()
    assert "ANN" in vector_query(table, q, K).explain_plan()


def test_small_table_drops_the_vector_index(tmp_path: Path) -> None:
    vectors = bench.topic_vectors(600, 32, 10)
    table = bench.make_table(str(tmp_path), vectors)
    from lancedb.index import IvfFlat

    table.create_index("vector", config=IvfFlat(distance_type="cosine", num_partitions=2))
    report = refresh_indexes(table, ann_min_rows=5_000)
    assert report["vector_index"] == "none: flat scan (rows < 5000)" and report["recall_at_10"] == 1.0
    assert not any(i.columns == ["vector"] for i in table.list_indices())
