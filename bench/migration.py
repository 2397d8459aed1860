"""The demo migrated from one chunking setting to another while a loop of searches runs (issue 36).

Real parts end to end: the demo store (``MODULES`` standard-library modules' docstrings, the shards
``make demo`` writes), Dagster runs of ``late_chunk_assets(generations=True)`` on the in-process
vLLM engine, LanceDB, and a thread searching the definition with ``sink.search.search`` (its own
light query engine) for the whole migration:

1. generation 1: ``FixedTokens(64)``, every partition in one run (served at once);
2. generation 2: ``Sentences(max_tokens=128)``, built beside it in one run while searches run;
3. the promote asset switches readers (one commit), ``latechunk rollback`` switches back, the
   promote asset again.

Prints: searches made, mixed-generation results (a search whose hits are chunks of both
generations: must be 0), refused searches (must be 0), the backfill's time, the promotion's and the
rollback's, and the storage the old generation holds.

    .venv/bin/python bench/migration.py [MODULES]   # default 40
    .venv/bin/python bench/migration.py --quick     # a smoke run: 6 modules
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg

from latechunk_dagster import late_chunk_assets, sink
from latechunk_dagster.app.cli import main as cli_main
from latechunk_dagster.app.demo_corpus import build_demo_store
from latechunk_dagster.app.settings import shipped_model_path
from latechunk_dagster.core.chunker import query_chunker
from latechunk_dagster.core.chunking import FixedTokens, Sentences
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import DocumentStore

QUERIES = ["how to parse command line arguments", "compress data with zlib", "read a CSV file"]
TABLE = "kb"


def _chunks(db: Any, name: str) -> set[tuple[str, int, str]]:
    t = db.open_table(name).to_arrow().select(["doc_id", "chunk_index", "text"])
    return set(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def _bytes(root: Path, names: list[str]) -> int:
    return sum(f.stat().st_size for n in names for f in (root / f"{n}.lance").rglob("*") if f.is_file())


def main(modules: int = 40) -> None:
    root = Path(tempfile.mkdtemp(prefix="latechunk-migration-"))
    store = build_demo_store(root / "documents", max_modules=modules)
    uri, model = str(root / "lancedb"), shipped_model_path()
    resources = {
        "engine": VLLMEngineResource(model=model, max_model_len=256),
        "lancedb": LanceDBResource(uri=uri),
        "store": DocumentStoreResource(path=str(store)),
    }
    tables = {
        name: late_chunk_assets(table_name=TABLE, strategy=s, generations=True, index=False, job_name=f"chunk_{name}")
        for name, s in (("old", FixedTokens(chunk_size=64)), ("new", Sentences(max_tokens=128)))
    }
    db = sink.connect(uri)
    (root / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), tables["old"].partitions_def)
        shards = sorted(instance.get_dynamic_partitions(tables["old"].partitions_def.name))
        span = {"dagster/asset_partition_range_start": shards[0], "dagster/asset_partition_range_end": shards[-1]}

        def backfill(name: str) -> float:
            defs = tables[name].to_definitions(resources=resources)
            t0 = time.perf_counter()
            assert defs.resolve_job_def(f"chunk_{name}").execute_in_process(instance=instance, tags=span).success
            return time.perf_counter() - t0

        def promote(name: str) -> float:
            [asset] = tables[name].extra_assets
            t0 = time.perf_counter()
            assert dg.materialize([asset], instance=instance, resources=resources).success
            return time.perf_counter() - t0

        backfill("old")
        first = _chunks(db, TABLE)
        seen: list[set[tuple[str, int, str]]] = []
        refused: list[BaseException] = []
        stop = threading.Event()

        def searches() -> None:
            with query_chunker(model) as qc:
                while not stop.is_set():
                    for q in QUERIES:
                        try:
                            hits = search(q, chunker=qc, uri=uri, table_name=TABLE, k=10, exact=True)
                        except Exception as exc:  # noqa: BLE001 - every refusal is counted
                            refused.append(exc)
                            continue
                        seen.append({(h.doc_id, h.chunk_index, h.text) for h in hits})

        loop = threading.Thread(target=searches)
        loop.start()
        try:
            build_s = backfill("new")
            second = _chunks(db, f"{TABLE}__g2")
            promote_s = promote("new")
            t0 = time.perf_counter()
            assert cli_main(["rollback", "--uri", uri, "--table", TABLE]) == 0
            rollback_s = time.perf_counter() - t0
            promote("new")
            time.sleep(1.0)
        finally:
            stop.set()
            loop.join()
    mixed = sum(1 for hits in seen if not (hits <= first or hits <= second))
    print(f"{len(shards)} shards, {len(first)} chunks in generation 1, {len(second)} in generation 2")
    print(f"searches {len(seen) + len(refused)}: mixed-generation results {mixed}, refused {len(refused)}")
    if refused:
        print(f"first refusal: {refused[0]!r}")
    print(
        f"backfill of generation 2 {build_s:.1f} s; promotion (the promote asset's run) {promote_s:.2f} s; "
        f"rollback (latechunk rollback) {rollback_s:.2f} s; the old generation holds "
        f"{_bytes(root / 'lancedb', [TABLE]) / 2**20:.1f} MiB"
    )


if __name__ == "__main__":
    main(6 if sys.argv[1:2] == ["--quick"] else int(sys.argv[1]) if len(sys.argv) > 1 else 40)
