"""Commit retries and wall time with 1, 2, 4 and 8 concurrent writer processes on one table.

Each writer process commits its own partition through the product's commit path
(:func:`latechunk_dagster.sink.writes.commit_documents`: one streamed ``merge_insert`` with
retries) at the same wall-clock moment, twice: first into an empty partition (inserts), then
replacing all of its rows (updates of fragments other writers touch). Rows are synthetic (random
384-d unit vectors): this measures the commit, not the engine. Afterwards the table is checked:
row count and chunk_id set equal what was written, each partition holds its writer's run only.

    python bench/concurrent_writers.py --quick          # 1,2,4,8 writers x 2,000 rows each
    python bench/concurrent_writers.py --rows 20000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from latechunk_dagster import sink
from latechunk_dagster.sink.schema import chunk_id, chunk_schema
from latechunk_dagster.sink.writes import commit_documents

DIM = 384


def rows(partition: str, run: str, n: int) -> pa.Table:
    rng = np.random.default_rng(abs(hash(partition)) % 2**32)
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    docs = [f"{partition}-d{i // 10}" for i in range(n)]
    idx = [i % 10 for i in range(n)]
    s = chunk_schema(DIM)
    cols = {
        "chunk_id": [chunk_id(partition, d, i) for d, i in zip(docs, idx)],
        "doc_id": docs,
        "partition": [partition] * n,
        "chunk_index": idx,
        "token_start": [0] * n,
        "token_end": [1] * n,
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
        "materialized_at": [datetime.now(UTC)] * n,
        "run_id": [run] * n,
    }
    cols["id"] = cols["chunk_id"]
    for f in s:
        if f.name not in cols:
            cols[f.name] = (
                pa.nulls(n, f.type) if f.nullable else pa.array([0 if pa.types.is_integer(f.type) else "x"] * n, f.type)
            )
    return pa.table({f.name: cols[f.name] for f in s}, schema=s)


def writer(uri: str, partition: str, run: str, n: int, replace: bool, start_at: float, out: mp.Queue) -> None:
    table = sink.connect(uri).open_table("chunks")
    data = rows(partition, run, n)
    docs = set(data.column("doc_id").to_pylist())
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.perf_counter()
    w = commit_documents(
        table,
        partition,
        lambda: pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=1024)),
        replaced=docs if replace else (),
        kept=(),
    )
    out.put((w.attempts, w.lance_attempts, time.perf_counter() - t0))


def round_of(uri: str, writers: int, n: int, run: str, replace: bool) -> tuple[float, list]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    at = time.time() + 3
    ps = [ctx.Process(target=writer, args=(uri, f"p{k}", f"{run}{k}", n, replace, at, q)) for k in range(writers)]
    for p in ps:
        p.start()
    res = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    return max(r[2] for r in res), res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=None, help="rows per writer")
    args = ap.parse_args()
    n = args.rows or (2000 if args.quick else 20000)
    print(f"rows per writer: {n}; times: slowest writer's commit, all writers start together")
    print(f"{'writers':>7} {'phase':>8} {'wall s':>7} {'our attempts':>13} {'lance attempts':>15} {'rows ok':>8}")
    for writers in (1, 2, 4, 8):
        with tempfile.TemporaryDirectory() as d:
            db = sink.connect(d)
            sink.open_or_create(db, "chunks", chunk_schema(DIM))
            for phase, replace in (("insert", False), ("replace", True)):
                wall, res = round_of(d, writers, n, phase, replace)
                t = db.open_table("chunks").to_arrow()
                ok = t.num_rows == writers * n and len(set(t.column("chunk_id").to_pylist())) == t.num_rows
                ok = ok and set(t.column("run_id").to_pylist()) == {f"{phase}{k}" for k in range(writers)}
                ours = sum(r[0] for r in res) - writers
                lance = sum(r[1] for r in res) - writers
                print(f"{writers:>7} {phase:>8} {wall:>7.2f} {ours:>13} {lance:>15} {'yes' if ok else 'NO':>8}")


if __name__ == "__main__":
    main()
