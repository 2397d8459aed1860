"""A document store of 10,000 objects in an S3 bucket (moto's server on loopback): listing time and requests.

The store is a text tree of ``--objects`` small ``.txt`` objects in ``--shards`` shards. Measured:

* ``boto3``: the same prefix listed with boto3's paginator (what the emulator itself takes);
* ``list``: :meth:`DocumentStore.listing` (one paginated listing, 1,000 keys a page);
* ``fingerprints``: :meth:`DocumentStore.fingerprints` (from the listing: no object read);
* ``sensor tick``: the real store sensor of :func:`latechunk_dagster.late_chunk_assets`, twice: the
  first tick (no cursor: adds every partition, requests the runs) and a steady tick (nothing changed);
  each opens the store (:meth:`DocumentStore.from_path`), lists it and fingerprints it.

Times are taken against moto directly; requests are counted by a loopback proxy in front of moto
(``tests/s3_proxy.py``; its own overhead makes its times longer, so they are not reported). A
steady tick must read no object (``GET`` 0).

Run: ``.venv/bin/python bench/bucket_listing.py [--objects 10000] [--shards 100]``.

**At scale** (issue 49 item 5), ``--scale [--objects 100000] [--shards 1000]``: a *local* text tree of
that many small ``.txt`` files (moto uploads ~43 objects/s here: 100,000 would take ~40 minutes, and it
scans every key for each page of a listing), each step in a fresh interpreter (``--step``) so its peak
RSS is its own: ``listing()``, ``fingerprints()`` (one ``stat`` a file, no read), a first
``sync_partitions`` (adds every partition to a Dagster instance) and a steady one (nothing changed).
Reported: seconds and peak RSS above the interpreter's after its imports. ``--quick``: 2,000 files in 20 shards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUCKET = "bench-docs"


def upload(url: str, objects: int, shards: int) -> None:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)

    def put(i: int) -> None:
        body = f"Document {i}: pumps, owls and green tea in one short sentence.".encode()
        client.put_object(Bucket=BUCKET, Key=f"store/s{i % shards:03d}/doc{i:05d}.txt", Body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(objects)))


def boto3_listing(url: str) -> int:
    """The keys under the store's prefix, listed with boto3's paginator: the same pages, another client."""
    import boto3

    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1"
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="store/")
    return sum(len(page.get("Contents", [])) for page in pages)


def options(url: str) -> dict[str, str]:
    keys = {"aws_access_key_id": "t", "aws_secret_access_key": "t"}
    # the emulator takes seconds per page of 10,000 keys: longer than the AWS SDK's 3 s request timeout
    return {**keys, "aws_endpoint": url, "aws_region": "us-east-1", "allow_http": "true", "timeout": "120s"}


def timed(fn, repeat: int = 3) -> tuple[float, object]:  # noqa: ANN001
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def sensor_ticks(url: str, home: Path) -> list[tuple[float, object]]:
    """(seconds, result) of a first and a steady tick of the real store sensor over the bucket."""
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource

    table = late_chunk_assets(table_name="chunks", index=False, parity_check=False, job_name="chunk")
    [sensor] = [s for s in table.sensors if s.name.endswith("store_sensor")]
    resources = {
        "store": DocumentStoreResource(path=f"s3://{BUCKET}/store", storage_options=options(url)),
        "lancedb": LanceDBResource(uri=str(home / "db")),
    }
    out = []
    cursor = None
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        for _ in range(2):
            t0 = time.perf_counter()
            with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
                result = sensor(ctx)
            if isinstance(result, dg.SkipReason):
                raise SystemExit(f"the tick skipped: {result.skip_message}")
            out.append((time.perf_counter() - t0, result))
            for request in result.dynamic_partitions_requests:
                instance.add_dynamic_partitions(table.partitions_def.name, list(request.partition_keys))
            cursor = result.cursor
    return out


def make_tree(root: Path, objects: int, shards: int) -> None:
    """A local text tree of ``objects`` small ``.txt`` files in ``shards`` first-level directories."""
    for s in range(shards):
        (root / f"s{s:04d}").mkdir(parents=True, exist_ok=True)
    for i in range(objects):
        body = f"Document {i}: pumps, owls and green tea in one short sentence."
        (root / f"s{i % shards:04d}" / f"doc{i:06d}.txt").write_text(body)


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def one_step(step: str, root: Path, home: Path) -> None:
    """One measured step in this (fresh) interpreter; prints ``seconds peak_mib base_mib count``."""
    import dagster as dg

    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.sources.files import DocumentStore

    base = peak_rss_mib()
    t0 = time.perf_counter()
    if step == "listing":
        count = len(DocumentStore.from_path(root).listing().shards)
    elif step == "fingerprints":
        count = len(DocumentStore.from_path(root).fingerprints())
    else:
        parts = dg.DynamicPartitionsDefinition(name="shards")
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            if step == "sync-steady":  # the partitions already there (named by the directories: no listing)
                instance.add_dynamic_partitions("shards", sorted(p.name for p in root.iterdir()))
                base, t0 = peak_rss_mib(), time.perf_counter()
            added, _ = sync_partitions(instance, DocumentStore.from_path(root), parts)
            count = len(added) if step == "sync-first" else len(instance.get_dynamic_partitions("shards"))
    print(f"{time.perf_counter() - t0:.3f} {peak_rss_mib():.1f} {base:.1f} {count}")


def scale(objects: int, shards: int) -> None:
    """The local tree at scale, each step in a fresh interpreter (module docstring)."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        t0 = time.perf_counter()
        make_tree(root, objects, shards)
        print(f"local tree of {objects:,} files in {shards:,} shards written in {time.perf_counter() - t0:.1f} s")
        for step in ("listing", "fingerprints", "sync-first", "sync-steady"):
            home = Path(tmp) / f"home-{step}"
            home.mkdir()
            cmd = [sys.executable, __file__, "--step", step, "--root", str(root), "--home", str(home)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()[-4:]
            seconds, peak, base, count = float(out[0]), float(out[1]), float(out[2]), int(out[3])
            print(f"{step:13s} {seconds:7.2f} s   peak RSS +{peak - base:6.1f} MiB (of {peak:.0f})   -> {count:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=None)
    parser.add_argument("--shards", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run (200 objects, or 2,000 with --scale)")
    parser.add_argument("--scale", action="store_true", help="a local tree of 100,000 files in 1,000 shards")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        one_step(args.step, args.root, args.home)
        return
    if args.scale:
        big = (2_000, 20) if args.quick else (100_000, 1_000)
        scale(args.objects or big[0], args.shards or big[1])
        return
    args.objects, args.shards = args.objects or 10_000, args.shards or 100
    if args.quick:
        args.objects, args.shards = 200, 4

    from latechunk_dagster.sources.files import DocumentStore
    from tests.s3_proxy import s3_proxy
    from tests.servers import start_moto_server

    srv = start_moto_server()
    try:
        t0 = time.perf_counter()
        upload(srv.url, args.objects, args.shards)
        print(f"uploaded {args.objects} objects in {args.shards} shards: {time.perf_counter() - t0:.1f} s")
        uri = f"s3://{BUCKET}/store"
        t_open, store = timed(lambda: DocumentStore.from_path(uri, storage_options=options(srv.url)), 1)
        t_boto, keys = timed(lambda: boto3_listing(srv.url))
        print(f"boto3 list_objects_v2 paginated ({keys} keys, the emulator's own pace): {t_boto:.2f} s (median of 3)")
        t_list, listing = timed(lambda: store.listing())
        t_fp, fps = timed(lambda: store.fingerprints())
        if len(listing.shards) != args.shards or len(fps) != args.shards:
            raise SystemExit(f"listed {len(listing.shards)} shards, {len(fps)} fingerprints: {listing.warnings()[:3]}")
        print(f"open (kind detection, one listing): {t_open:.2f} s")
        print(f"listing(): {t_list:.2f} s (median of 3); fingerprints(): {t_fp:.2f} s")
        with tempfile.TemporaryDirectory() as home:
            (first_s, first), (steady_s, steady) = sensor_ticks(srv.url, Path(home))
        print(f"sensor first tick {first_s:.2f} s ({len(first.run_requests)} run requests); steady {steady_s:.2f} s")
        with s3_proxy(srv.url) as proxy:
            store = DocumentStore.from_path(uri, storage_options=options(proxy.url))
            print(f"requests, open: {dict(proxy.counts)}")
            proxy.reset()
            store.listing()
            print(f"requests, listing(): {dict(proxy.counts)}")
            proxy.reset()
            store.fingerprints()
            print(f"requests, fingerprints(): {dict(proxy.counts)}")
            with tempfile.TemporaryDirectory() as home:
                proxy.reset()
                sensor_ticks(proxy.url, Path(home))
                print(f"requests, two sensor ticks (first + steady): {dict(proxy.counts)}")
            assert proxy.counts["get"] == 0, "a tick read an object"
    finally:
        srv.stop(10)


if __name__ == "__main__":
    main()
