"""Search time and recall against the graphs a search probes (``SEARCH_NPROBES``), side by side in one run.

A chunk table of ``scale`` x the demo's 32-token table (13,910 rows; the clustered unit vectors of
``bench/ann_recall.py``, 384 dims) is indexed as the index asset does (``refresh_indexes``: one HNSW
graph per ``ROWS_PER_PARTITION`` rows), then the same 100 queries near stored vectors are searched
with :func:`~latechunk_dagster.sink.queries.vector_query` probing LanceDB's default of 20 graphs and
this package's ``SEARCH_NPROBES``, and by an exact scan. Per setting: recall@10 against the exact
scan and milliseconds a query (median, one query at a time, after one warm-up pass).

The build takes the cores for a long time (1.4M rows: ~20 minutes on 2 cores); the searches are
timed only once the machine is quiet (``--quiet-load``: the 1-minute load average, default 1.0).

Run: ``.venv/bin/python bench/search_probes.py --scale 100`` (``--quick``: a smoke run, ``--scale 0.1``, the vector
index built from 1,000 rows instead of ``ANN_MIN_ROWS``, timed at any load).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
DEMO_ROWS = 13_910  # chunks_sentences32 after `make demo` (README)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed_top(table: Any, queries: np.ndarray, k: int, exact: bool = False) -> tuple[list[list[str]], float]:
    """Top-``k`` chunk ids per query through :func:`vector_query`, and the median milliseconds a query."""
    from latechunk_dagster.sink.queries import vector_query

    out, ms = [], []
    for q in queries:
        t0 = time.perf_counter()
        rows = vector_query(table, q, k, exact=exact).select(["chunk_id", "_distance"]).to_list()
        ms.append((time.perf_counter() - t0) * 1e3)
        out.append([r["chunk_id"] for r in rows])
    return out, statistics.median(ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=10.0, help="rows as a multiple of the demo table")
    parser.add_argument("--quiet-load", type=float, default=1.0, help="time searches once the load is under this")
    parser.add_argument("--quick", action="store_true", help="a smoke run: --scale 0.1, no wait for a quiet machine")
    args = parser.parse_args()
    if args.quick:
        args.scale, args.quiet_load = 0.1, float("inf")
    min_rows = {"ann_min_rows": 1000} if args.quick else {}  # quick: a vector index on its 1,391 rows

    from latechunk_dagster.sink import queries as settings
    from latechunk_dagster.sink.indexing import refresh_indexes

    ann, refresh = _load("ann_recall"), _load("index_refresh")
    rows = int(DEMO_ROWS * args.scale)
    vectors = ann.topic_vectors(rows, 384, 300)
    root = Path(tempfile.mkdtemp(prefix="search_probes_"))
    try:
        import lancedb

        table = lancedb.connect(str(root)).create_table("chunks", schema=ann.chunk_rows(vectors[:1]).schema)
        for lo in range(0, rows, 200_000):  # the table in pieces: bounded memory for the row dicts
            table.add(refresh.rows_of(ann, vectors[lo : min(rows, lo + 200_000)], f"c{lo}-"))
        t0 = time.perf_counter()
        built = refresh_indexes(table, **min_rows)
        print(f"table: {rows} rows, built in {time.perf_counter() - t0:.1f} s ({built['vector_index']})")
        while os.getloadavg()[0] > args.quiet_load:
            time.sleep(10)
        print(f"searches timed at load {os.getloadavg()[0]:.2f}")
        queries = ann.queries_near(vectors, 100)
        ours = settings.SEARCH_NPROBES
        timed_top(table, queries[:10], 10)  # warm-up: the index's files into the page cache
        truth, exact_ms = timed_top(table, queries, 10, exact=True)
        print("search                       | recall@10 | ms/query")
        for probes in (20, ours):
            settings.SEARCH_NPROBES = probes
            got, ms = timed_top(table, queries, 10)
            label = f"nprobes {probes}" + (" (LanceDB default)" if probes == 20 else " (SEARCH_NPROBES)")
            print(f"{label:28} | {ann.recall(got, truth):9.3f} | {ms:8.1f}")
        settings.SEARCH_NPROBES = ours
        print(f"{'exact scan':28} | {1.0:9.3f} | {exact_ms:8.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
