"""Index refresh: incremental (delta segments, ``refresh_indexes``) against a full rebuild, side by side.

A chunk table of ``scale`` x the demo's 32-token table (13,910 rows; the clustered unit vectors of
``bench/ann_recall.py``, 384 dims) is indexed once; then a new run adds ``--grow`` (default 10%) more
rows, and the same table (copied) is refreshed both ways in one run:

* ``incremental``: :func:`~latechunk_dagster.sink.indexing.refresh_indexes` as the index asset
  runs it now (the new rows go into a delta segment of the vector index; FTS and scalar indexes
  take them in; compaction);
* ``full rebuild``: ``refresh_indexes(..., rebuild=True)``, what every refresh did before
  (every index built again from all rows).

For each: refresh seconds, recall@10 of 100 queries near stored vectors (a fifth near the new rows)
against an exact scan, and rows the indexes leave uncovered. Run:
``.venv/bin/python bench/index_refresh.py --scale 10`` (``--no-full`` skips the rebuild where it
would take too long, e.g. ``--scale 100`` on 2 cores; ``--quick``: a smoke run, ``--scale 0.1``, the vector index
built from 1,000 rows instead of ``ANN_MIN_ROWS``).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa

DEMO_ROWS = 13_910  # chunks_sentences32 after `make demo` (README)


def _ann() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_ann_recall", Path(__file__).with_name("ann_recall.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rows_of(ann: ModuleType, vectors: np.ndarray, prefix: str) -> pa.Table:
    """Chunk rows of ``vectors`` whose chunk ids start with ``prefix`` (unique across pieces)."""
    table = ann.chunk_rows(vectors)
    ids = pa.array([f"{prefix}{i}" for i in range(len(vectors))])
    for name in ("chunk_id", "id"):
        table = table.set_column(table.schema.get_field_index(name), name, ids)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=10.0, help="rows as a multiple of the demo table")
    parser.add_argument("--grow", type=float, default=0.1, help="rows a new run adds, as a share of the table")
    parser.add_argument("--no-full", action="store_true", help="skip the full rebuild")
    parser.add_argument("--quick", action="store_true", help="a smoke run: --scale 0.1")
    args = parser.parse_args()
    if args.quick:
        args.scale = 0.1
    min_rows = {"ann_min_rows": 1000} if args.quick else {}  # quick: a vector index on its 1,391 rows

    import lancedb

    from latechunk_dagster.sink.indexing import refresh_indexes

    ann = _ann()
    rows = int(DEMO_ROWS * args.scale)
    add = int(rows * args.grow)
    vectors = ann.topic_vectors(rows + add, 384, 300)
    root = Path(tempfile.mkdtemp(prefix="index_refresh_"))
    try:
        db = lancedb.connect(str(root))
        table = db.create_table("base", schema=ann.chunk_rows(vectors[:1]).schema)
        for lo in range(0, rows, 200_000):  # the table in pieces: bounded memory for the row dicts
            table.add(rows_of(ann, vectors[lo : min(rows, lo + 200_000)], f"c{lo}-"))
        t0 = time.perf_counter()
        first = refresh_indexes(table, **min_rows)
        print(f"table: {rows} rows, first build {time.perf_counter() - t0:.1f} s ({first['vector_index']})")
        table.add(rows_of(ann, vectors[rows:], "new-"))
        rng = np.random.default_rng(3)
        queries = np.concatenate(
            [ann.queries_near(vectors[:rows], 80), ann.queries_near(vectors[rows:], 20, seed=rng.integers(1 << 30))]
        )
        modes = [("incremental", False)] + ([] if args.no_full else [("full rebuild", True)])
        print(f"a run adds {add} rows ({args.grow:.0%}); refresh side by side:")
        print("mode          | refresh s | recall@10 | vector     | unindexed rows after")
        times = {}
        for label, rebuild in modes:
            name = label.split()[0]
            shutil.copytree(root / "base.lance", root / f"{name}.lance")
            copy = db.open_table(name)
            t0 = time.perf_counter()
            report = refresh_indexes(copy, rebuild=rebuild, **min_rows)
            times[label] = time.perf_counter() - t0
            truth = ann.exact_top(copy, queries, 10)
            got, _ = ann.ann_top(copy, queries, 10, default=True)
            recall = ann.recall(got, truth)
            print(
                f"{label:13} | {times[label]:9.1f} | {recall:9.3f} | {report['vector_refresh']:10} | "
                f"{sum(report['unindexed_rows'].values())}"
            )
        if len(times) == 2:
            print(f"incremental / full rebuild: {times['incremental'] / times['full rebuild']:.3f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
