"""``make demo``: the main job on the embedded default, then searches and the granularities' scores.

Builds the demo store (unless ``LATECHUNK_DOCUMENT_STORE`` is set), syncs partitions,
materializes every shard in **one** run (a single-run backfill: one engine load) into both
granularities of the demo table (one encode) with the asset checks, refreshes the indexes,
prints the numbers and small-to-big search results (matched on the 32-token chunks, their
128-token parents shown), scores the generated context-dependent query set, and materializes
the ``retrieval_eval`` asset (the standard-library queries on the demo table) with its check;
for each query set it prints which granularity (or small-to-big) wins. Runs land in the persistent
``DAGSTER_HOME`` (``$LATECHUNK_HOME/dagster``), so ``make dev`` shows them: the partitions, the
checks, and ``retrieval_eval``'s table, plot and check.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from latechunk_dagster.app.phases import Phase  # light: the first line comes before the heavy imports

if TYPE_CHECKING:
    from collections.abc import Callable

    import dagster as dg

    from latechunk_dagster.core.chunker import LateChunker
    from latechunk_dagster.sources.files import DocumentStore

#: Dagster's console logger at WARNING: the run's events are in the UI (`make dev`), not on the terminal.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
#: Run tag of a ``retrieval_eval`` run: what it evaluated (:func:`_evaluated`).
EVALUATED_TAG = "latechunk/evaluated"
QUERIES = ["parse command-line options and arguments", "compress data with gzip", "make a temporary directory"]


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with Phase("loading Dagster, vLLM and the definitions"):
        from latechunk_dagster.app.settings import quiet_dagster_warnings, quiet_table_logs
        from latechunk_dagster.core.engines.vllm_local import QUIET_ENGINE_LOG_LEVEL, quiet_engine_logs

        quiet_table_logs()
        quiet_engine_logs(QUIET_ENGINE_LOG_LEVEL)  # errors only; VLLM_LOGGING_LEVEL=INFO shows the engine's full log
        quiet_dagster_warnings()
        from latechunk_dagster.app import settings

        settings.ensure_dagster_home()
        import dagster as dg

        from latechunk_dagster.app.definitions import TABLE, defs
        from latechunk_dagster.core.chunker import LateChunker

    resources = defs.resources
    instance = dg.DagsterInstance.get()
    try:
        queries = demo_queries()  # a bad LATECHUNK_QUERIES file: one line, before anything runs
        with Phase("reading the store (the demo's is built on the first run) and syncing its partitions"):
            store, keys = sync_store(instance)
    # TooManyRemovalsError (e.g. another store at a shared DAGSTER_HOME), QueryFileError (both
    # ValueErrors), a store that is not there or cannot be listed (OSError): one line, nothing changed
    except (ValueError, OSError) as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 2
    if not keys:
        print("the store holds no shard: nothing to materialize", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    written = _shards_written(instance, TABLE.chunk_keys[0], len(keys))
    with Phase(f"encoding {len(keys)} shards in one run (engine start, then every shard)", status=written):
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
    failed = _print_run(result, wall)
    with Phase("building the indexes (vector and full-text)"):
        defs.resolve_job_def("index_chunks").execute_in_process(instance=instance, run_config=QUIET)

    demo_store = resources["store"].build_demo
    with Phase("starting the engine for the searches"):
        chunker = LateChunker(resources["engine"].model_path())
    with chunker:
        _print_searches(chunker, queries)
        if demo_store:
            with Phase("scoring the generated context-dependent set"):
                text = _context_set(chunker, settings.queries_dir())
            print("\n" + text)
        else:
            print(
                "\ngenerated context-dependent set: skipped (it scores the model on generated documents, "
                "not on yours; `make demo` without LATECHUNK_DOCUMENT_STORE runs it)"
            )
        model = chunker.card.fingerprint
    if TABLE.extra_assets:  # the retrieval_eval asset runs its own engine: after this one is closed
        print("\n" + _retrieval_eval(defs, instance, resources, store, model))
    else:  # the reason was printed with the searches, once
        print("\nretrieval scores: skipped: no labeled queries (see the searches above)")
    print("\n" + next_commands(None if demo_store else os.environ.get("LATECHUNK_DOCUMENT_STORE")))
    return 1 if failed else 0


def _shards_written(instance: dg.DagsterInstance, key: dg.AssetKey, total: int) -> Callable[[], str]:
    """The encode phase's status: ``"N/total shards written"``, the materializations of ``key`` since now
    (read from the run's event log, in the phase's thread)."""
    since = time.time()

    def status() -> str:
        import dagster as dg

        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, after_timestamp=since), limit=total + 1
        ).records
        return f"{len(records)}/{total} shards written"

    return status


def next_commands(own_store: str | None) -> str:
    """The demo's last four lines: what to run next (search the table, open the UI, index a store of
    one's own); ``own_store`` is the ``LATECHUNK_DOCUMENT_STORE`` the demo ran on (``None``: the demo's)."""
    store = f"LATECHUNK_DOCUMENT_STORE={shlex.quote(own_store)} " if own_store else ""
    return "\n".join(
        [
            "next:",
            f'  {store}.venv/bin/latechunk search "read a csv file"   # search this table (--hybrid, -k 10, --help)',
            f"  {store}make dev   # the Dagster UI on these runs: partitions, checks, retrieval_eval",
            "  LATECHUNK_DOCUMENT_STORE=/path/to/your/documents make demo   # a folder, JSONL, Parquet or s3://...",
        ]
    )


#: Why the demo neither searches nor scores a store of the user's without their queries.
NO_QUERIES = (
    "no labeled queries for this store; set LATECHUNK_QUERIES=queries.jsonl (one JSON object a line: "
    '{"query": "...", "doc_id": "..."}, optionally char_start, char_end) to search your documents with '
    "them and score late vs naive chunking on them (asset retrieval_eval), or search with "
    '`latechunk search "..."` (the same LATECHUNK_DOCUMENT_STORE set)'
)


def sync_store(instance: dg.DagsterInstance) -> tuple[DocumentStore, list[str]]:
    """The demo's first step: the embedded default's partitions synced with its store
    (:func:`~latechunk_dagster.integration.sensors.sync_partitions`, which refuses to remove more than
    ``LATECHUNK_MAX_DELETE`` of the partitions at once), and one line saying so; for a store of the
    user's (``LATECHUNK_DOCUMENT_STORE``) also where its tables live, apart from the demo's
    (:func:`~latechunk_dagster.app.settings.store_home`).

    Returns:
        ``(store, every partition key)``.

    Raises:
        TooManyRemovalsError: nothing was added or removed (the message names the partitions).
    """
    from latechunk_dagster.app import settings
    from latechunk_dagster.app.definitions import TABLE, defs
    from latechunk_dagster.integration.sensors import sync_partitions

    resources = defs.resources
    store = resources["store"].get_store()
    how = "`latechunk sync-partitions --max-delete 100%` (with the same LATECHUNK_DOCUMENT_STORE and DAGSTER_HOME)"
    added, removed = sync_partitions(
        instance, store, TABLE.partitions_def, resources["lancedb"], TABLE.wiring.table_names, how=how
    )
    keys = instance.get_dynamic_partitions(TABLE.partitions_def.name)
    # a "text" store is a tree of documents of any supported format (PDF, HTML, ...), not only text
    kind = "document tree" if store.kind == "text" else store.kind
    line = f"store {_shown(store.uri)} ({kind}): {len(keys)} shards (+{len(added)} -{len(removed)})"
    if not resources["store"].build_demo:
        line += f"; its tables in {_shown(settings.lancedb_uri())} (the demo's are kept apart)"
    print(line, flush=True)
    return store, keys


def demo_queries() -> list[str]:
    """The searches the demo prints: the stdlib queries on the demo store; on a store of the user's, the
    first three queries of ``LATECHUNK_QUERIES``, else none (:data:`NO_QUERIES` says why).

    Raises:
        QueryFileError: a bad ``LATECHUNK_QUERIES`` file (naming it and the line).
    """
    from latechunk_dagster.app.definitions import defs

    if defs.resources["store"].build_demo and "LATECHUNK_QUERIES" not in os.environ:
        return list(QUERIES)
    if not os.environ.get("LATECHUNK_QUERIES"):
        return []
    from latechunk_dagster.evaluation import read_queries

    return [q.query for q in read_queries(os.environ["LATECHUNK_QUERIES"])[:3]]


def _print_searches(chunker: LateChunker, queries: list[str]) -> None:
    """Small-to-big results of ``queries`` on the table (matched on the finest granularity, its parents
    shown); without queries, one line saying why none."""
    from latechunk_dagster.app.definitions import TABLE, defs
    from latechunk_dagster.sink.search import search

    if not queries:
        print(f"\nsearches: skipped: {NO_QUERIES}")
        return
    fine, coarse = TABLE.wiring.granularities[0].name, TABLE.wiring.granularities[1].name
    for q in queries:
        print(
            f"\nsearch: {q!r}   small-to-big: matched on {fine}, its {coarse} parents "
            "(cosine distance of the best match, doc_id, char range, chunks matched, text)"
        )
        for hit in search(
            q,
            chunker=chunker,
            uri=defs.resources["lancedb"].uri,
            table_name=TABLE.wiring.table_name,
            granularity=fine,
            return_parent=True,
            k=3,
        ):
            snippet = " ".join((hit.text or "").split())[:100]
            print(f"  {hit.distance:.3f}  {hit.doc_id} {hit.char_range} {len(hit.matched)}: {snippet}")


def _print_run(result: dg.ExecuteInProcessResult, wall: float) -> list[str]:
    """The chunk run's numbers and its checks, in two lines; returns the failed checks' names."""

    from latechunk_dagster.app.definitions import TABLE

    # one materialization per granularity asset and partition: the shared counts (documents, tokens,
    # engine) from the finest granularity's, the chunks written from each granularity's
    by_key: dict[dg.AssetKey, list] = {k: [] for k in TABLE.chunk_keys}
    for e in result.get_asset_materialization_events():
        if e.asset_key in by_key:
            by_key[e.asset_key].append(e.event_specific_data.materialization.metadata)  # type: ignore[union-attr]
    md = by_key[TABLE.chunk_keys[0]]
    docs = sum(m["documents_in"].value for m in md)
    written = {k.to_user_string(): sum(m["chunks_written"].value for m in ms) for k, ms in by_key.items()}
    chunks = sum(written.values())
    rejected = sum(m["documents_rejected"].value for m in md)
    tokens = sum(m["tokens_encoded"].value for m in md)
    in_windows = sum(m["window_tokens"].value for m in md)
    windows = sum(m["encoder_windows"].value for m in md)
    long_docs = sum(m["documents_over_model_length"].value for m in md)
    seconds = sum(m["engine_seconds"].value for m in md)
    skipped = sum(m["documents_skipped"].value for m in md)
    reencoded = sum(m["documents_reencoded"].value for m in md)
    checks = result.get_asset_check_evaluations()
    # a WARN check that does not pass is a warning: the word "failed" only where an ERROR check failed
    warned = [c.check_name for c in checks if not c.passed and c.severity == dg.AssetCheckSeverity.WARN]
    failed = [c.check_name for c in checks if not c.passed and c.check_name not in warned]
    print(
        f"materialized {len(md)} partitions in one run: {docs} documents ({skipped} unchanged, "
        f"{reencoded} encoded once) -> {chunks} chunks written "
        f"({', '.join(f'{n} {c}' for n, c in written.items())}), "
        f"{rejected} rejected; {long_docs} documents longer than the model; "
        f"{tokens} tokens encoded ({in_windows} tokens in {windows} encoder windows, "
        f"+{100 * (in_windows - tokens) / max(tokens, 1):.1f}% overlap); engine {seconds:.1f} s "
        f"({tokens / max(seconds, 1e-9):.0f} tokens/s); run wall {wall:.1f} s"
    )
    passed = len(checks) - len(failed) - len(warned)
    print(
        f"asset checks: {passed} passed"
        + (f", {len(warned)} warnings {warned}" if warned else "")
        + (f", {len(failed)} failed {failed}" if failed else "")
    )
    if rejected:
        print("rejected documents are in the rejected_documents table (doc_id, partition, reason)")
    return failed


def _context_set(chunker: LateChunker, queries_dir: Path) -> str:
    """The generated context-dependent set's late-vs-naive tables, kept in ``queries_dir/context.txt``
    while the model and the package version stay (the set is generated, not read from the table)."""
    from latechunk_dagster import __version__
    from latechunk_dagster.app.demo_queries import run_demo_evaluation
    from latechunk_dagster.evaluation.blends import BLEND_WEIGHTS

    key = f"model {chunker.card.fingerprint[:16]} package {__version__} blends {BLEND_WEIGHTS}"
    cache = queries_dir / "context.txt"
    if cache.exists() and cache.read_text().split("\n", 1)[0] == key:
        return cache.read_text().split("\n", 1)[1] + "\n(the model is unchanged: tables from the last evaluation)"
    text = run_demo_evaluation(chunker, write_to=queries_dir)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(key + "\n" + text)
    return text


def _retrieval_eval(
    defs: dg.Definitions, instance: dg.DagsterInstance, resources: dict, store: DocumentStore, model: str
) -> str:
    """Materialize ``retrieval_eval`` (the demo table's labeled queries: each granularity's late, naive
    and hybrid rankings and small-to-big) and its check, and return its table and the winner; its
    run is skipped while the chunk rows, the model and the query file are those of its latest
    materialization (the naive side re-embeds every chunk of each granularity, about as costly as
    encoding the corpus again per granularity)."""
    from latechunk_dagster.app import settings
    from latechunk_dagster.app.definitions import TABLE
    from latechunk_dagster.app.demo_queries import write_stdlib_queries
    from latechunk_dagster.integration.evaluation import late_vs_naive_result

    queries = Path(settings.queries_path() or "")
    if resources["store"].build_demo and "LATECHUNK_QUERIES" not in os.environ:
        write_stdlib_queries(store, queries)  # the demo corpus's hand-written queries
    [asset] = TABLE.extra_assets
    evaluated = _evaluated(resources, model, queries)
    latest = instance.get_latest_materialization_event(asset.key)
    run = instance.get_run_by_id(latest.run_id) if latest is not None else None
    reused = run is not None and run.tags.get(EVALUATED_TAG) == evaluated
    if not reused:
        # minutes on the demo corpus: the naive side re-embeds every chunk of each granularity
        with Phase(f"evaluating {queries.name} (asset {asset.key.to_user_string()}: late, naive, hybrid)"):
            result = defs.resolve_job_def("evaluate_retrieval").execute_in_process(
                instance=instance, run_config=QUIET, tags={EVALUATED_TAG: evaluated}, raise_on_error=False
            )
        if not result.success:
            return "the evaluate_retrieval run failed; see `make dev` for its logs"
        latest = instance.get_latest_materialization_event(asset.key)
    md = latest.asset_materialization.metadata  # type: ignore[union-attr]
    verdict = late_vs_naive_result(md)
    lines = [
        f"retrieval by granularity: {queries.name} on the {'demo' if resources['store'].build_demo else 'store'}'s "
        f"table (asset {asset.key.to_user_string()})",
        md["table"].value,
        # a WARN check that does not pass is a warning, not a failure
        f"check late_not_below_naive: {'passed' if verdict.passed else 'warning'} ({verdict.description})",
    ]
    if reused:
        lines.append("(the chunk rows are unchanged: the latest materialization, not run again)")
    lines.append(f"query files in {_shown(str(queries.parent))} (try: latechunk eval {_shown(str(queries))})")
    return "\n".join(lines)


def _evaluated(resources: dict, model: str, queries: Path) -> str:
    """What a ``retrieval_eval`` materialization evaluated: the chunk rows of every granularity (chunk
    ids and the runs that wrote them: the index job's compaction changes the table version, not the
    rows), the model, the package version and the query file."""
    import hashlib

    from latechunk_dagster import __version__, sink
    from latechunk_dagster.app.definitions import TABLE
    from latechunk_dagster.evaluation import granularity_tables

    pairs = []
    for table in granularity_tables(sink.connect(resources["lancedb"].uri), TABLE.wiring.table_name).values():
        ids = table.search().select(["chunk_id", "run_id"]).limit(None).to_arrow()
        pairs += zip(ids.column("chunk_id").to_pylist(), ids.column("run_id").to_pylist())
    pairs.sort()
    parts = [repr(pairs), model, __version__, queries.read_text() if queries.exists() else ""]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it (the output names no machine path)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


if __name__ == "__main__":
    sys.exit(main())
