"""Which blend weight to ship (issue 48): the demo's two query sets scored through the product, one run.

Both sets are chunked into the demo's granularities (``sentences32`` -> ``sentences128``) from one late
encode per document into temporary tables, and scored by the product's evaluation
(:func:`~latechunk_dagster.evaluation.sweep.evaluate_granularities`): late, naive, blends a=0.25/0.5/0.75
and small-to-big of each, with 95% bootstrap intervals (no hybrid: the temporary tables have no full-text
index). Then every candidate default on the finest granularity is placed against the rule of the issue:
not below naive on the lookup set (stdlib queries) and at least 85% of late's gain on the
context-dependent set, ``(score - naive) / (late - naive)`` at ``sentences32``.

    .venv/bin/python bench/blend_eval.py            # both sets (the stdlib corpus: ~190 modules)
    .venv/bin/python bench/blend_eval.py --quick    # the context set at 3 documents per kind; only the queries' modules
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sets: runs in about a minute")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "transformers"])
    args = parser.parse_args()

    from latechunk_dagster import LateChunker
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.app.demo_queries import STDLIB_QUERIES, context_set, demo_granularities, stdlib_queries
    from latechunk_dagster.app.settings import shipped_model_path
    from latechunk_dagster.evaluation import evaluate_granularities
    from latechunk_dagster.sources.files import DocumentStore

    strategies = demo_granularities()
    t0 = time.perf_counter()
    with LateChunker(shipped_model_path(), engine=args.engine) as chunker:
        docs, queries = context_set(per_kind=3 if args.quick else 10)
        context = evaluate_granularities(chunker, {"context": docs}, strategies, queries, k=10)
        print(f"## context-dependent set ({len(docs)} documents, {len(context.queries)} queries)\n")
        print(context.markdown(), context.caption(), context.best(), sep="\n\n")
        with tempfile.TemporaryDirectory() as tmp:
            # --quick: only the modules the queries are about (no distractor modules)
            build_demo_store(Path(tmp), modules=sorted({row[1] for row in STDLIB_QUERIES}) if args.quick else None)
            store = DocumentStore.from_path(tmp)
            shards = {s: store.read_shard(s) for s in store.shards()}
        texts = {d.doc_id: d.text for ds in shards.values() for d in ds}
        lookup = evaluate_granularities(chunker, shards, strategies, stdlib_queries(texts), k=10)
        print(f"\n## stdlib lookup set ({len(texts)} documents, {len(lookup.queries)} queries)\n")
        print(lookup.markdown(), lookup.caption(), lookup.best(), sep="\n\n")
    print(f"\n## candidate defaults (nDCG@10; wall {time.perf_counter() - t0:.0f} s, engine {args.engine})\n")
    print(candidates(context, lookup))


def candidates(context, lookup) -> str:  # noqa: ANN001 - two GranularityEvalReports
    """Each finest-granularity configuration against the issue's rule, as a Markdown table."""
    metric = "ndcg@10"
    g = lookup.granularities[0]
    naive_c, late_c = context.mean(f"naive_{g}")[metric], context.mean(f"late_{g}")[metric]
    rows = [
        "| configuration | setting | stdlib | vs naive (95% CI) | context | late's gain kept | rule |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for m in lookup.methods():
        kind, gran = lookup.split(m)
        if gran != g or kind == "naive":
            continue
        mean, low, high = lookup.delta(m, f"naive_{g}")[metric]
        score_c = context.mean(m)[metric]
        kept = (score_c - naive_c) / (late_c - naive_c)
        ok = mean >= 0.0 and kept >= 0.85
        rows.append(
            f"| {lookup.method_label(m)} | {lookup.setting(m).split(',')[0]} | {lookup.mean(m)[metric]:.1f} | "
            f"{mean:+.1f} [{low:+.1f}, {high:+.1f}] | {score_c:.1f} | {100 * kept:.0f}% | {'meets' if ok else '-'} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
