"""Peak memory of the table checks over 12 and over 48 partitions of the demo store (issue 27, item 17).

The demo store (:func:`latechunk_dagster.app.demo_corpus.build_demo_store`: 12 shards of
standard-library docstrings) is copied three times under other shard names (``a~1``, ``a~2``...),
so the store has 48 partitions, each a copy of one of the demo's 12. One LanceDB chunk table holds
rows for all 48, and each measurement checks either the demo's own 12 partitions or all 48:

  dagster   the ``<table>_table_checks`` multi-check of ``late_chunk_assets()`` in a real Dagster
            run (``execute_in_process`` of a job selecting only that check, ``partitions`` in its
            run config); each partition's last materialization (row count, vector width) is
            reported to the instance first, so ``row_count_matches`` has something to compare
  airflow   :func:`latechunk_dagster.airflow.tasks.check_shards` (what ``LateChunkChecksOperator`` runs)

Each measurement runs in its own process: build what it needs (imports, Definitions, instance,
one row read from the table so that LanceDB's runtime has started), reset the kernel's peak-RSS
mark (``/proc/self/clear_refs``), run the checks, read ``VmHWM``.
Growth = peak - base; the ratio 48/12 of the growth is the figure: about 1 when the checks hold
one partition at a time, about 4 when they hold the whole run. Every check must pass (asserted):
the rows are right, so every partition is read the whole way.

The chunk rows are **synthetic**, not the engine's: generating vectors for 48 partitions with the
real model takes long on 2 CPU cores, and the checks do not care how a vector was computed. Each
document is cut into pieces of ``--chunk-chars`` characters; a piece counts as ``len // 4`` tokens
(at least 1), so token ranges tile the document; vectors are random unit vectors of width 384
(all-MiniLM-L6-v2's) with an ``l2`` head, so the unit-norm check runs. The rows are built by the
package's own row builder (:func:`latechunk_dagster.sink.rows.chunk_batch`) and written by its
writer (:func:`latechunk_dagster.sink.replace_partition`), so their schema is the real one.

Run: ``.venv/bin/python bench/check_memory.py [--chunk-chars 256] [--repeat 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
DIM = 384
COPIES = 3  # the demo's 12 shards + 3 copies each = 48 partitions
TABLE, REJECTED = "chunks", "rejected_documents"


def peak_kb() -> int:
    """The process's peak RSS (``VmHWM``) in KiB since the last reset."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def build(tmp: Path, chunk_chars: int) -> dict[str, int]:
    """The 48-shard store in ``tmp/docs`` and its rows in ``tmp/db``; returns rows per partition."""
    import numpy as np
    import pyarrow as pa

    from latechunk_dagster import sink
    from latechunk_dagster.app.demo_corpus import DEMO_SHARDS, build_demo_store
    from latechunk_dagster.core.chunking import FixedTokens
    from latechunk_dagster.core.results import Chunk, ChunkedDocument, ChunkerSettings
    from latechunk_dagster.sink.rows import chunk_batch, lineage
    from latechunk_dagster.sources.files import Document, DocumentStore

    docs_dir = build_demo_store(tmp / "docs")
    for shard in DEMO_SHARDS:
        for k in range(1, COPIES + 1):
            shutil.copyfile(docs_dir / f"{shard}.jsonl", docs_dir / f"{shard}~{k}.jsonl")
    store = DocumentStore.from_path(docs_dir)
    settings = ChunkerSettings(
        model_name="synthetic",
        model_sha256="0" * 64,
        head="mean+l2",
        opt_ins=(),
        dtype="float32",
        prefix="",
        window_length=512,
        window_overlap=64,
        allow_windows=True,
        embedding_dim=DIM,
        engine_version="synthetic",
    )
    meta = lineage(settings, FixedTokens(64), "bench", datetime.now(UTC))
    db = sink.connect(str(tmp / "db"))
    table = sink.open_or_create(db, TABLE, sink.chunk_schema(DIM))
    sink.open_or_create(db, REJECTED, sink.REJECTED_SCHEMA)
    rng = np.random.default_rng(0)
    counts: dict[str, int] = {}
    for shard, items in store.iter_shards(store.shards()):
        pairs = []
        for doc in items:
            assert isinstance(doc, Document), doc  # the demo store has no bad rows
            chunks, tokens = [], 0
            for i, start in enumerate(range(0, len(doc.text), chunk_chars)):
                piece = doc.text[start : start + chunk_chars]
                n = max(1, len(piece) // 4)
                chunks.append(Chunk(i, (tokens, tokens + n), (start, start + len(piece)), piece))
                tokens += n
            vectors = rng.standard_normal((len(chunks), DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            pairs.append((doc, ChunkedDocument(len(pairs), doc.doc_id, chunks, vectors, [0] * tokens, "token_states")))
        batch = chunk_batch(pairs, shard, meta, DIM)
        sink.replace_partition(table, "chunk_id", shard, pa.Table.from_batches([batch]))
        counts[shard] = batch.num_rows
    return counts


def child(mode: str, tmp: Path, n: int) -> None:
    """One measurement: the checks of ``mode`` over the first ``n`` partitions (the demo's own
    12 first); prints one JSON line."""
    counts: dict[str, int] = json.loads((tmp / "counts.json").read_text())
    from latechunk_dagster.app.demo_corpus import DEMO_SHARDS

    partitions = (DEMO_SHARDS + sorted(set(counts) - set(DEMO_SHARDS)))[:n]
    if mode == "dagster":
        import dagster as dg

        from latechunk_dagster import late_chunk_assets
        from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource

        tables = late_chunk_assets(index=False)
        checks = tables.asset_checks[0]
        defs = dg.Definitions(
            asset_checks=[checks],
            jobs=[dg.define_asset_job("checks_only", selection=dg.AssetSelection.checks(checks))],
            resources={
                "lancedb": LanceDBResource(uri=str(tmp / "db")),
                "store": DocumentStoreResource(path=str(tmp / "docs")),
            },
        )
        job = defs.resolve_job_def("checks_only")
        op = f"{tables.wiring.chunk_key.to_python_identifier()}_table_checks"
        instance = dg.DagsterInstance.ephemeral()
        for p in partitions:
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    tables.wiring.chunk_key,
                    partition=p,
                    metadata={"partition_rows": counts[p], "embedding_dim": DIM},
                )
            )

        def run() -> dict[str, bool]:
            result = job.execute_in_process(
                instance=instance,
                run_config={"ops": {op: {"config": {"partitions": partitions}}}},
                raise_on_error=False,
            )
            return {c.check_name: c.passed for c in result.get_asset_check_evaluations()}

    else:
        from latechunk_dagster.airflow.tasks import check_shards
        from latechunk_dagster.sink.database import LanceDBSettings

        results = [{"partition": p, "partition_rows": counts[p], "embedding_dim": DIM} for p in partitions]

        def run() -> dict[str, bool]:
            outcomes = check_shards(
                LanceDBSettings(uri=str(tmp / "db")),
                str(tmp / "docs"),
                table_name=TABLE,
                rejected_table_name=REJECTED,
                results=results,
            )
            return {name: passed for name, (passed, _) in outcomes.items()}

    from latechunk_dagster import sink

    # LanceDB's runtime (threads, caches) starts on the first read: not the checks' memory
    sink.connect(str(tmp / "db")).open_table(TABLE).search().limit(1).to_arrow()
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark (Linux)
    base = peak_kb()
    t0 = time.perf_counter()
    passed = run()
    seconds = time.perf_counter() - t0
    peak = peak_kb()
    assert len(passed) == 5 and all(passed.values()), passed
    rows = sum(counts[p] for p in partitions)
    print(json.dumps({"base_mb": base / 1024, "peak_mb": peak / 1024, "s": seconds, "rows": rows}))


def measure(mode: str, tmp: Path, n: int) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, str(tmp), str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{mode} {n}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk-chars", type=int, default=256, help="characters per synthetic chunk")
    ap.add_argument("--repeat", type=int, default=1, help="measurements per row (the smallest growth is kept)")
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--quick", action="store_true", help="Dagster's checks over 12 partitions only: a smoke run")
    args = ap.parse_args()
    modes, sizes = (("dagster",), (12,)) if args.quick else (("dagster", "airflow"), (12, 48))
    if args.child:
        mode, tmp, n = args.child
        child(mode, Path(tmp), int(n))
        return
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="check-memory-") as name:
        tmp = Path(name)
        t0 = time.perf_counter()
        counts = build(tmp, args.chunk_chars)
        (tmp / "counts.json").write_text(json.dumps(counts))
        mb = sum(f.stat().st_size for f in (tmp / "db").rglob("*") if f.is_file())
        print(
            f"{len(counts)} partitions, {sum(counts.values())} chunk rows (largest partition {max(counts.values())}), "
            f"table {mb / 2**20:.1f} MB on disk, built in {time.perf_counter() - t0:.1f} s\n"
        )
        print(
            f"{'checks':8} | {'partitions':>10} | {'rows':>6} | {'base MB':>8} | {'peak MB':>8} | "
            f"{'growth MB':>9} | {'s':>6}"
        )
        print("-" * 74)
        growth: dict[tuple[str, int], float] = {}
        for mode in modes:
            for n in sizes:
                runs = [measure(mode, tmp, n) for _ in range(args.repeat)]
                r = min(runs, key=lambda r: r["peak_mb"] - r["base_mb"])
                growth[mode, n] = r["peak_mb"] - r["base_mb"]
                print(
                    f"{mode:8} | {n:>10} | {r['rows']:>6} | {r['base_mb']:>8.1f} | {r['peak_mb']:>8.1f} | "
                    f"{growth[mode, n]:>9.1f} | {r['s']:>6.2f}"
                )
        print()
        for mode in modes if len(sizes) > 1 else ():
            print(f"{mode}: growth 48 / 12 partitions = {growth[mode, 48] / max(growth[mode, 12], 0.1):.2f}x")


if __name__ == "__main__":
    main()
