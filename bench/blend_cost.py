"""What a blend costs (issue 48): encoder tokens, bytes across the engine boundary and wall time of
``blend=0.5`` against late chunking (``blend=1``) and against chunks alone (naive), in process, one run.

The same documents (standard-library docstrings, the demo corpus) go through ``LateChunker.chunk_granularities``
with the demo's granularities (``sentences32`` -> ``sentences128``), host side included (tokenize,
spans, windows, pooling, head, the blend), alternating the configurations ``--repeats`` times so a
busy machine slows them alike; the naive row is each granularity's chunk texts encoded alone
(``blend=0``'s second pass without the first). Tokens are the engine inputs' lengths (windows and
chunk texts, special tokens included); bytes are what the engine returns on the span path (one float32
sum pair of ``2 * dim`` per summed piece) next to what the token-state path would return (a float32
row per token).

    .venv/bin/python bench/blend_cost.py             # 24 modules, 2 repeats
    .venv/bin/python bench/blend_cost.py --quick     # 8 modules, 1 repeat: seconds once the model is up
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--modules", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--engine", default="vllm", choices=["vllm", "transformers"])
    args = parser.parse_args()
    modules, repeats = (8, 1) if args.quick else (args.modules, args.repeats)

    from latechunk_dagster import LateChunker
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.app.demo_queries import demo_granularities
    from latechunk_dagster.app.settings import shipped_model_path
    from latechunk_dagster.evaluation.retrieval import naive_vectors
    from latechunk_dagster.sources.files import DocumentStore

    with tempfile.TemporaryDirectory() as tmp:
        build_demo_store(Path(tmp), max_modules=modules)
        store = DocumentStore.from_path(tmp)
        texts = [d.text for s in store.shards() for d in store.read_shard(s)]
    strategies = demo_granularities()
    with LateChunker(shipped_model_path(), engine=args.engine) as chunker:
        host = chunker.host
        dim = chunker.embedding_dim
        chunker.blend = 0.5
        prepared = chunker.prepare(texts, strategies)
        doc_tokens = sum(map(len, prepared.windows))
        doc_pieces = sum(len(p) for p in prepared.window_pieces or [])
        alone = prepared.blend.batch
        chunk_tokens = sum(map(len, alone.windows))
        chunk_pieces = sum(len(p) for p in alone.window_pieces or [])
        chunk_texts = [alone.texts[j[0]] for j in alone.state_jobs]

        def late() -> None:
            chunker.host = host
            chunker.chunk_granularities(texts, strategies)

        def blend() -> None:
            chunker.blend = 0.5
            chunker.chunk_granularities(texts, strategies)

        def naive() -> None:
            chunker.host = host
            naive_vectors(chunker, chunk_texts)

        runs = {"late (blend=1)": late, "blend=0.5": blend, "naive (chunks alone)": naive}
        walls: dict[str, list[float]] = {name: [] for name in runs}
        late()  # warm-up
        for _ in range(repeats):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                walls[name].append(time.perf_counter() - t0)
        chunker.host = host
        path = chunker.path
    names = list(runs)  # late, blend, naive
    tokens = dict(zip(names, (doc_tokens, doc_tokens + chunk_tokens, chunk_tokens)))
    pieces = dict(zip(names, (doc_pieces, doc_pieces + chunk_pieces, chunk_pieces)))
    late_wall = statistics.median(walls["late (blend=1)"])
    print(f"{len(texts)} documents, {len(chunk_texts)} distinct chunk texts, engine {args.engine} ({path} path), "
          f"median of {repeats} alternated runs\n")  # fmt: skip
    print("| configuration | encoder tokens | vs late | engine answer (spans) | as token states | wall s | vs late |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in runs:
        wall = statistics.median(walls[name])
        print(
            f"| {name} | {tokens[name]:,} | {tokens[name] / doc_tokens:.2f}x | "
            f"{pieces[name] * 2 * dim * 4 / 1e6:.1f} MB | {tokens[name] * dim * 4 / 1e6:.1f} MB | {wall:.1f} | "
            f"{wall / late_wall:.2f}x |"
        )


if __name__ == "__main__":
    main()
