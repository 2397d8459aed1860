"""A shard of small files in an S3 bucket read with injected latency: files/s, one way against another.

moto's S3 server on loopback behind ``tests/s3_proxy.py``, which holds each request ``--delays`` ms
(0, 25 and 100: S3's guidelines plan for 100-200 ms to a small GET's first byte). The shard is
``--files`` small ``.txt`` objects (about 2 KB). Each way reads every file whole; per delay and way:
files/s, and its ratio to the same way's rate without latency (issue 49's goal: >= 0.5 at 25 ms).

Ways:

* ``store x1``: :meth:`DocumentStore.iter_shard` one file at a time (``read_concurrency=1``: before issue 49);
* ``store xN``: the same with N fetches in flight (:mod:`latechunk_dagster.sources.prefetch`, a thread
  pool over ``pyarrow.fs``): what a run does. Each file costs 3 requests: HEAD (open), GET, HEAD (the
  one-version check of issue 47 kind 2);
* ``pyarrow xN``: bare ``pyarrow.fs`` reads on the same thread pool (HEAD + GET, no document made);
* ``obstore xN``: obstore's ``get`` (Rust object_store) on a thread pool of N, when obstore is installed
  (``pip install obstore``; not a dependency). fsspec/s3fs is not measured: installing it pins an older
  botocore than the one boto3 (a test dependency) needs.

Run: ``.venv/bin/python bench/bucket_reads.py [--quick] [--files 1000] [--workers 32]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUCKET = "bench-reads"


def upload(url: str, files: int) -> list[str]:
    from tests.s3_proxy import s3_client

    client = s3_client(url)
    keys = [f"store/s/doc{i:05d}.txt" for i in range(files)]
    body = ("Pumps, owls and green tea in one short sentence. " * 40).encode()

    def put(key: str) -> None:
        client.put_object(Bucket=BUCKET, Key=key, Body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, keys))
    return keys


def ways(proxy_url: str, keys: list[str], workers: int) -> dict[str, Callable[[], int]]:
    """Each way's read of the whole shard (returns the files read)."""
    import pyarrow.fs as pafs

    from latechunk_dagster.sources.files import DocumentStore
    from tests.s3_proxy import store_options

    options = store_options(proxy_url, "bench", "bench")
    stores = {
        n: DocumentStore.from_path(f"s3://{BUCKET}/store", storage_options=options, read_concurrency=n)
        for n in (1, workers)
    }
    fs = pafs.S3FileSystem(
        access_key="b", secret_key="b", endpoint_override=proxy_url.split("//")[1], scheme="http", region="us-east-1"
    )

    def store_read(n: int) -> Callable[[], int]:
        return lambda: sum(1 for _ in stores[n].iter_shard("s"))

    def pyarrow_one(key: str) -> int:
        with fs.open_input_stream(f"{BUCKET}/{key}") as f:
            return len(f.read())

    out: dict[str, Callable[[], int]] = {
        "store x1": store_read(1),
        f"store x{workers}": store_read(workers),
        f"pyarrow x{workers}": lambda: _pooled(pyarrow_one, keys, workers),
    }
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        return out
    ob = S3Store(
        BUCKET,
        config={
            "aws_endpoint": proxy_url,
            "aws_access_key_id": "b",
            "aws_secret_access_key": "b",
            "aws_region": "us-east-1",
        },
        client_options={"allow_http": True},
    )

    def obstore_one(key: str) -> int:
        return len(obstore.get(ob, key).bytes())

    out[f"obstore x{workers}"] = lambda: _pooled(obstore_one, keys, workers)
    return out


def _pooled(read: Callable[[str], int], keys: list[str], workers: int) -> int:
    with ThreadPoolExecutor(workers) as pool:
        return sum(1 for _ in pool.map(read, keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--delays", default="0,25,100", help="ms added to each request, comma-separated")
    parser.add_argument("--quick", action="store_true", help="60 files, delays 0 and 25 ms (under a minute)")
    args = parser.parse_args()
    files, delays = (60, [0, 25]) if args.quick else (args.files, [int(d) for d in args.delays.split(",")])
    from tests.s3_proxy import s3_client, s3_proxy
    from tests.servers import start_moto_server

    srv = start_moto_server()
    try:
        s3_client(srv.url).create_bucket(Bucket=BUCKET)
        keys = upload(srv.url, files)
        with s3_proxy(srv.url) as proxy:
            run = ways(proxy.url, keys, args.workers)
            rates: dict[str, dict[int, float]] = {name: {} for name in run}
            for delay in delays:
                proxy.delay = delay / 1000
                for name, read in run.items():
                    if name == "store x1" and delay >= 100 and files > 200:
                        continue  # minutes; the 25 ms ratio says it
                    start = time.perf_counter()
                    assert read() == files
                    rates[name][delay] = files / (time.perf_counter() - start)
    finally:
        srv.stop(10)
    print(
        f"{files} files of ~2 KB, {args.workers} in flight where concurrent; files/s (ratio to the way's own 0 ms rate)"
    )
    print(f"{'way':<14}" + "".join(f"{f'{d} ms':>22}" for d in delays))
    for name, by_delay in rates.items():
        base = by_delay.get(0)
        cells = [
            f"{by_delay[d]:>10.1f} ({by_delay[d] / base:4.2f})" if d in by_delay and base else f"{'-':>17}"
            for d in delays
        ]
        print(f"{name:<14}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
