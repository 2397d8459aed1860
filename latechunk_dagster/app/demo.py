"""``make demo``: the main job on the embedded default, then a search.

Builds the demo store (unless ``LATECHUNK_DOCUMENT_STORE`` is set), syncs partitions,
materializes every shard in **one** run (a single-run backfill: one engine load) with the
asset checks, refreshes the indexes, and prints the numbers and search results. Runs land
in the persistent ``DAGSTER_HOME`` (``$LATECHUNK_HOME/dagster``), so ``make dev`` shows them.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

#: Dagster's console logger at WARNING: the run's events are in the UI (`make dev`), not on the terminal.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
QUERIES = ["parse command-line options and arguments", "compress data with gzip", "make a temporary directory"]


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from latechunk_dagster.app.settings import quiet_dagster_warnings
    from latechunk_dagster.core.engines.vllm_local import quiet_engine_logs

    quiet_engine_logs()  # errors only; VLLM_LOGGING_LEVEL=INFO shows the engine's full log
    quiet_dagster_warnings()
    from latechunk_dagster.app import settings

    settings.ensure_dagster_home()
    import dagster as dg

    from latechunk_dagster.app.definitions import TABLE, defs
    from latechunk_dagster.core.chunker import LateChunker
    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.sink.search import search

    resources = defs.resources
    store = resources["store"].get_store()
    instance = dg.DagsterInstance.get()
    partitions_def = TABLE.partitions_def
    added, removed = sync_partitions(instance, store, partitions_def, resources["lancedb"], TABLE.wiring.table_names)
    keys = instance.get_dynamic_partitions(partitions_def.name)
    print(f"store {store.uri} ({store.kind}): {len(keys)} shards (+{len(added)} -{len(removed)})", flush=True)

    t0 = time.perf_counter()
    result = defs.resolve_job_def("chunk_documents").execute_in_process(
        instance=instance,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
        run_config=QUIET,
        raise_on_error=False,
    )
    wall = time.perf_counter() - t0
    if not result.success:
        print("the chunk_documents run failed; see `make dev` for its logs", file=sys.stderr)
        return 1
    mats = [e for e in result.get_asset_materialization_events()]
    md = [m.event_specific_data.materialization.metadata for m in mats]  # type: ignore[union-attr]
    docs = sum(m["documents_in"].value for m in md)
    chunks = sum(m["chunks_out"].value for m in md)
    rejected = sum(m["rejected"].value for m in md)
    tokens = sum(m["tokens_encoded"].value for m in md)
    encoded = sum(m["window_tokens"].value for m in md)
    windows = sum(m["encoder_windows"].value for m in md)
    long_docs = sum(m["documents_over_model_length"].value for m in md)
    seconds = sum(m["engine_seconds"].value for m in md)
    skipped = sum(m["documents_skipped"].value for m in md)
    reencoded = sum(m["documents_reencoded"].value for m in md)
    checks = result.get_asset_check_evaluations()
    failed = [c.check_name for c in checks if not c.passed]
    print(
        f"materialized {len(md)} partitions in one run: {docs} documents ({skipped} unchanged, "
        f"{reencoded} encoded) -> {chunks} chunks written, "
        f"{rejected} rejected; {long_docs} documents longer than the model; "
        f"{tokens} tokens ({encoded} encoded in {windows} windows, "
        f"+{100 * (encoded - tokens) / max(tokens, 1):.1f}% overlap); engine {seconds:.1f} s "
        f"({tokens / max(seconds, 1e-9):.0f} tokens/s); run wall {wall:.1f} s"
    )
    print(f"asset checks: {len(checks) - len(failed)} passed, {len(failed)} failed" + (f" {failed}" if failed else ""))
    if rejected:
        print("rejected documents are in the rejected_documents table (doc_id, partition, reason)")
    defs.resolve_job_def("index_chunks").execute_in_process(instance=instance, run_config=QUIET)

    engine = resources["engine"]
    with LateChunker(engine.model_path()) as chunker:
        for q in QUERIES:
            print(f"\nsearch: {q!r}   (cosine distance, doc_id, char range, text)")
            for hit in search(
                q, chunker=chunker, uri=resources["lancedb"].uri, table_name=TABLE.wiring.table_name, k=3
            ):
                snippet = " ".join((hit.text or "").split())[:110]
                print(f"  {hit.distance:.3f}  {hit.doc_id} {hit.char_range}: {snippet}")
        print("\n" + _evaluation(chunker, resources, store, settings.home() / "queries"))
    return 1 if failed else 0


def _evaluation(chunker: object, resources: dict, store: object, queries_dir: Path) -> str:
    """The demo's late-vs-naive tables, recomputed only when the chunk rows changed.

    The naive side re-embeds every chunk text, which costs about as much as encoding the corpus
    again; the tables are kept in ``queries_dir/report.txt`` under a fingerprint of the chunk rows
    (chunk ids and the runs that wrote them: the index job's compaction changes the table version,
    not the rows), the model and the package version, and printed from there while those stay.
    """
    import hashlib

    from latechunk_dagster import __version__, sink
    from latechunk_dagster.app.definitions import TABLE
    from latechunk_dagster.app.demo_queries import run_demo_evaluation

    uri = resources["lancedb"].uri
    table = sink.connect(uri).open_table(TABLE.wiring.table_name)
    ids = table.search().select(["chunk_id", "run_id"]).limit(None).to_arrow()
    pairs = sorted(zip(ids.column("chunk_id").to_pylist(), ids.column("run_id").to_pylist()))
    digest = hashlib.sha256(repr(pairs).encode()).hexdigest()[:16]
    key = f"rows {digest} model {chunker.card.fingerprint[:16]} package {__version__}"  # type: ignore[attr-defined]
    cache = queries_dir / "report.txt"
    if cache.exists() and cache.read_text().split("\n", 1)[0] == key:
        return cache.read_text().split("\n", 1)[1] + "\n(the chunk rows are unchanged: tables from the last evaluation)"
    demo_store = store if resources["store"].build_demo else None  # stdlib queries fit the demo corpus only
    text = run_demo_evaluation(chunker, uri=uri, store=demo_store, write_to=queries_dir)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(key + "\n" + text)
    return text


if __name__ == "__main__":
    sys.exit(main())
