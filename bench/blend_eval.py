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
    .venv/bin/python bench/blend_eval.py --own      # a set of our own: OWN_QUERIES over this checkout's docs/*.md
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
    parser.add_argument("--own", action="store_true", help="only the set of our own over docs/*.md")
    args = parser.parse_args()
    if args.own:
        own(args.engine)
        return

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


#: Ten lookup questions a user of this package asks, over its own guides (real Markdown manuals, read
#: through the product's text-tree store), each with the passage that answers it (quoted from the guide).
OWN_QUERIES: tuple[tuple[str, str, str], ...] = (
    ("why did LangChain's store replace all the rows of my table", "querying.md",
     'LangChain\'s `LanceDB` defaults to `mode="overwrite"`'),
    ("which OCR engine reads scanned PDF pages", "documents.md", "Tesseract, the `tesseract` command of Debian's"),
    ("run one engine task per GPU in Airflow", "airflow.md", "`pool=ENGINE_POOL` on the operator"),
    ("how many commits does promoting or rolling back a generation take", "contract.md",
     "Promotion and rollback are each **one commit of one row**"),
    ("are prompt tokens part of the chunk mean", "contract.md", "Pooling sets `include_prompt: false`"),
    ("prepare and finish documents in separate processes", "pipeline.md",
     "`LATECHUNK_HOST_WORKERS=N` in the run's environment"),
    ("a document id with an apostrophe breaks my filter", "querying.md", "each value quoted by `sql_string`"),
    ("what happens to a document longer than the model", "contract.md",
     "A document longer than the model's context is encoded in overlapping windows"),
    ("Nomic model states become NaN when served shorter", "contract.md", "dynamic NTK rotary scaling"),
    ("how many rejected documents may a shard task have before it fails", "airflow.md", "`max_rejected_share`"),
)  # fmt: skip


def own(engine: str) -> None:
    """The set of our own (:data:`OWN_QUERIES`) over a copy of this checkout's docs/*.md, printed like the others."""
    import shutil

    from latechunk_dagster import LateChunker
    from latechunk_dagster.app.demo_queries import demo_granularities, locate
    from latechunk_dagster.app.settings import shipped_model_path
    from latechunk_dagster.evaluation import LabeledQuery, evaluate_granularities
    from latechunk_dagster.sources.files import DocumentStore

    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md")):
            shutil.copy(path, tmp)
        store = DocumentStore.from_path(tmp)
        shards = {s: store.read_shard(s) for s in store.shards()}
    texts = {d.doc_id: d.text for ds in shards.values() for d in ds}
    queries = []
    for query, doc_id, quote in OWN_QUERIES:
        try:
            queries.append(LabeledQuery(query, (locate(texts[doc_id], doc_id, quote),)))
        except (KeyError, ValueError) as exc:  # a guide edited since: the query is left out, and said
            print(f"left out: {query!r} ({exc})")
    with LateChunker(shipped_model_path(), engine=engine) as chunker:
        report = evaluate_granularities(chunker, shards, demo_granularities(), queries, k=10)
    print(f"## our own set: {len(texts)} guides (docs/*.md), {len(report.queries)} queries\n")
    print(report.markdown(), report.caption(), report.best(), sep="\n\n")


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
