"""Promotion and rollback of a generation while a loop of searches runs (issue 36), on LanceDB.

Two generations of one table definition, each of ``ROWS`` synthetic 384-d rows (unit vectors;
a ``generation`` column says which one a row is in), are written with
:mod:`latechunk_dagster.sink.generations`; a thread resolves the current generation and runs a
top-10 vector search in a loop while the main thread promotes and rolls back ``SWITCHES`` times.
Prints: searches, mixed-generation results (must be 0), refused searches (must be 0), the median
time of a promotion (the partition gate included: rows carry ``PARTITIONS`` partitions) and of a
rollback, and the storage the old generation holds.

Then, side by side in the same run, one log event committed as before issue 47 (``add``: no
condition, numbered by a count read before) and as now (a compare-and-swap: an insert-only
``merge_insert`` on ``seq``, :func:`~latechunk_dagster.sink.generation_log.try_event`), alternating,
median of ``REPS`` each, and their ratio.

    .venv/bin/python bench/generations.py [ROWS] [SWITCHES]
    .venv/bin/python bench/generations.py --quick      # seconds: 200 rows, 3 switches, 5 commits each
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from latechunk_dagster import sink
from latechunk_dagster.sink import generations as gens

DIM = 384
PARTITIONS = 20
REPS = 21


def rows(n: int, generation: int, seed: int) -> pa.Table:
    vectors = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)  # shape [n, DIM]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return pa.table(
        {
            "generation": np.full(n, generation, np.int32),
            "partition": [f"p{i % PARTITIONS}" for i in range(n)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
        }
    )


def main(n: int = 20_000, switches: int = 20) -> None:
    root = Path(tempfile.mkdtemp(prefix="latechunk-generations-"))
    db = sink.connect(str(root))
    gens.enable_generations(db, "kb", "rejected")
    for key, g in (("old", 1), ("new", 2)):
        name, _, number = gens.writing_tables(db, "kb", "rejected", key)
        assert number == g
        db.create_table(name, rows(n, g, seed=g))
    stop, searches, mixed, refused = threading.Event(), [0], [0], [0]
    query = rows(1, 0, seed=9).column("vector")[0].values.to_numpy()

    def loop() -> None:
        while not stop.is_set():
            try:
                table = db.open_table(gens.current_table(db, "kb"))
                got = table.search(query).limit(10).select(["generation", "_distance"]).to_arrow().column("generation")
                mixed[0] += len(set(got.to_pylist())) != 1
            except Exception:  # noqa: BLE001 - counted: a refused search
                refused[0] += 1
            searches[0] += 1

    thread = threading.Thread(target=loop)
    thread.start()
    promote_s, rollback_s = [], []
    for _ in range(switches):
        t0 = time.perf_counter()
        gens.promote(db, "kb", 2)
        promote_s.append(time.perf_counter() - t0)
        time.sleep(0.05)
        t0 = time.perf_counter()
        gens.rollback(db, "kb")
        rollback_s.append(time.perf_counter() - t0)
        time.sleep(0.05)
    stop.set()
    thread.join()
    old_bytes = sum(f.stat().st_size for f in (root / "kb.lance").rglob("*") if f.is_file())
    print(f"{n} rows a generation, {switches} promotions and rollbacks, {searches[0]} searches")
    print(f"mixed-generation results {mixed[0]}, refused searches {refused[0]}")
    print(
        f"promotion median {statistics.median(promote_s) * 1e3:.1f} ms, rollback median "
        f"{statistics.median(rollback_s) * 1e3:.1f} ms; the old generation holds {old_bytes / 2**20:.1f} MiB"
    )


def commit_costs(reps: int = REPS) -> None:
    """Median ms of one log event committed by ``add`` (before) and by compare-and-swap (now),
    alternating on one log; the event (a ``drop`` of a generation never opened) changes no state."""
    from latechunk_dagster.sink import generation_log as glog

    db = sink.connect(tempfile.mkdtemp(prefix="latechunk-generation-log-"))
    gens.enable_generations(db, "kb", "rejected")
    gens.writing_tables(db, "kb", "rejected", "k")
    log = db.open_table(gens.log_table_name("kb"))
    plain, cas = [], []
    for _ in range(reps):
        state = gens.read_state(db, "kb")
        row = pa.Table.from_pylist([glog.log_row("drop", 99, state.next_seq)], glog.LOG_SCHEMA)  # type: ignore[union-attr]
        t0 = time.perf_counter()
        log.add(row)
        plain.append(time.perf_counter() - t0)
        state = gens.read_state(db, "kb")
        t0 = time.perf_counter()
        assert glog.try_event(db, "kb", state, glog.log_row("drop", 99, 0))  # type: ignore[arg-type]
        cas.append(time.perf_counter() - t0)
    a, b = statistics.median(plain) * 1e3, statistics.median(cas) * 1e3
    print(f"log commit median of {reps}: add {a:.1f} ms, compare-and-swap {b:.1f} ms (ratio {b / a:.2f}x)")


if __name__ == "__main__":
    if "--quick" in sys.argv:  # a smoke run in seconds
        main(200, 3)
        commit_costs(5)
    else:
        main(*(int(a) for a in sys.argv[1:3]))
        commit_costs()
