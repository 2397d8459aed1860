"""Store-sensor tick time on a single-file JSONL store: 20,000 rows in 10 / 100 / 400 / 1,000 shards.

Each store is one ``docs.jsonl`` with a ``shard`` column (rows dealt round-robin over the shards,
~90 characters of text each). For each shard count the real sensor of
:func:`latechunk_dagster.late_chunk_assets` is evaluated twice on a temporary Dagster instance:

* ``first tick``: no cursor, no partitions yet: it fingerprints every shard, adds a partition per
  shard and requests the runs;
* ``steady tick``: the partitions exist and the cursor is the first tick's: nothing changed.

``per-shard scan`` times what the sensor did before issue 16 (one :meth:`DocumentStore.shard_fingerprint`
per shard, each a scan of the whole file: shards x rows), up to ``--compare-up-to`` shards (default
100; ``--quick``: 10). The sensor's figures must grow with rows, not with shards x rows.

Run: ``.venv/bin/python bench/sensor_tick.py [--rows 20000] [--shards 10 100 400 1000] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def write_store(path: Path, rows: int, shards: int) -> Path:
    """``rows`` JSONL rows dealt round-robin over ``shards`` shards; returns the file."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            text = f"Document {i} of shard {i % shards}: pumps, owls and green tea in one short sentence."
            f.write(json.dumps({"id": f"d{i}", "text": text, "shard": f"s{i % shards:04d}"}) + "\n")
    return path


def tick(sensor, instance, resources: dict, cursor: str | None) -> tuple[float, object]:  # noqa: ANN001
    import dagster as dg

    t0 = time.perf_counter()
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        result = sensor(ctx)
    return time.perf_counter() - t0, result


def main() -> None:
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.sources.files import DocumentStore

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--shards", type=int, nargs="+", default=[10, 100, 400, 1000])
    ap.add_argument("--compare-up-to", type=int, default=100, help="time the per-shard scan up to this many shards")
    ap.add_argument("--quick", action="store_true", help="2,000 rows; per-shard scan only at 10 shards")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.compare_up_to = 2_000, 10
    table = late_chunk_assets(index=False)
    [sensor] = [s for s in table.sensors if s.name.endswith("store_sensor")]
    tmp = Path(tempfile.mkdtemp())
    print(f"{args.rows} JSONL rows in one file, real store sensor, temporary Dagster instance\n")
    print(f"{'shards':>6} | {'first tick s':>12} | {'steady tick s':>13} | {'per-shard scan s':>16} | runs requested")
    print("-" * 72)
    for shards in args.shards:
        store = write_store(tmp / f"docs_{shards}.jsonl", args.rows, shards)
        resources = {
            "store": DocumentStoreResource(path=str(store)),
            "lancedb": LanceDBResource(uri=str(tmp / f"db_{shards}")),
        }
        home = tmp / f"home_{shards}"
        home.mkdir()
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            first_s, first = tick(sensor, instance, resources, None)
            [add] = first.dynamic_partitions_requests
            instance.add_dynamic_partitions(table.partitions_def.name, list(add.partition_keys))
            steady_s, steady = tick(sensor, instance, resources, first.cursor)
            assert steady.run_requests == [] and len(add.partition_keys) == shards
        old = "skipped"
        if shards <= args.compare_up_to:
            st = DocumentStore.from_path(store)
            t0 = time.perf_counter()
            old_fps = {s: st.shard_fingerprint(s) for s in st.shards()}
            old = f"{time.perf_counter() - t0:.2f}"
            assert old_fps == json.loads(first.cursor)  # the one-pass fingerprints are the same values
        print(f"{shards:>6} | {first_s:>12.2f} | {steady_s:>13.2f} | {old:>16} | {len(first.run_requests)}")


if __name__ == "__main__":
    main()
