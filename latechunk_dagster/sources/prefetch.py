"""A shard's files fetched concurrently, handed on in store order: reads of an object store are
latency-bound (S3 plans for 100-200 ms to a small GET's first byte), so one GET at a time reads a
shard of small files at a fraction of the store's rate (issue 49: 0.21 of it at 25 ms a request).

:func:`prefetched` keeps up to ``workers`` fetches in flight on a thread pool (pyarrow's filesystem
calls release the GIL) and at most ``max_bytes`` bytes of fetched, not yet handed on files (by the
listing's sizes), and yields the results in the order of the files: rows and rejections are those of
a sequential read. Only I/O runs in the threads; what is done with the bytes (conversion, which is
not thread-safe in every converter) stays in the calling thread. Why a thread pool over
``pyarrow.fs`` and not fsspec/s3fs or obstore: measured in ``bench/bucket_reads.py`` (bench/README.md).

Settings (:func:`read_concurrency`, :func:`read_bytes_in_flight`): ``LATECHUNK_READ_CONCURRENCY``
(default by store: :data:`READ_CONCURRENCY`), ``LATECHUNK_READ_BYTES_IN_FLIGHT`` (default
:data:`READ_BYTES_IN_FLIGHT`).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Fetches in flight by default, by where the store is: a local disk gains little past a few (and
#: a spinning one loses), an object store's throughput grows with requests in flight (rclone's
#: ``--transfers``, s5cmd's workers); with 32, a shard of 1,000 small objects read at 0.79 of its
#: no-latency rate with 25 ms a request, and 5.6x a one-at-a-time read without latency
#: (``bench/bucket_reads.py``, bench/README.md, 2026-12-07).
READ_CONCURRENCY: dict[str, int] = {"local": 4, "object": 32}

#: Bytes of fetched files held at most (by the listing's sizes; one file larger than this is
#: fetched alone): the memory of a shard's reads is bounded by this, not by the shard. 256 MiB: the
#: largest file a text tree reads by default (``max_file_bytes``).
READ_BYTES_IN_FLIGHT = 256 << 20


def _positive_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r}: expected a whole number >= 1")
    return int(text)


def read_concurrency(where: str, setting: int | None = None) -> int:
    """Fetches in flight for a store ``where`` (``"local"`` or ``"object"``): ``setting`` when given,
    else ``LATECHUNK_READ_CONCURRENCY``, else :data:`READ_CONCURRENCY` of ``where``.

    Raises:
        ValueError: a setting below 1 (naming it)."""
    if setting is not None:
        if setting < 1:
            raise ValueError(f"read_concurrency={setting}: expected a whole number >= 1 (1: one file at a time)")
        return setting
    return _positive_int("LATECHUNK_READ_CONCURRENCY", READ_CONCURRENCY[where])


def read_bytes_in_flight() -> int:
    """``LATECHUNK_READ_BYTES_IN_FLIGHT``, else :data:`READ_BYTES_IN_FLIGHT`.

    Raises:
        ValueError: not a whole number >= 1 (naming the variable)."""
    return _positive_int("LATECHUNK_READ_BYTES_IN_FLIGHT", READ_BYTES_IN_FLIGHT)


def prefetched(
    items: Sequence[T],
    fetch: Callable[[T], R],
    *,
    workers: int,
    size: Callable[[T], int],
    max_bytes: int,
) -> Iterator[tuple[T, R]]:
    """``(item, fetch(item))`` for each of ``items``, in order, with up to ``workers`` fetches in flight.

    Args:
        items: what to fetch (a shard's files), in the order wanted.
        fetch: the fetch of one item (run in a worker thread; its exceptions are raised here, in order).
        workers: fetches in flight at most; 1: each item fetched when it is wanted, in the calling thread.
        size: an item's bytes (a file's listed size), for ``max_bytes``.
        max_bytes: bytes of fetched items not yet handed on, at most (one larger item is fetched alone).

    A consumer that stops early cancels the fetches not started (those running finish, at most ``workers``).
    """
    if workers <= 1 or len(items) <= 1:
        for item in items:
            yield item, fetch(item)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="latechunk-read")
    pending: deque[tuple[T, Future[R], int]] = deque()
    held, nxt = 0, 0
    try:
        while nxt < len(items) or pending:
            while nxt < len(items) and len(pending) < workers:
                cost = max(0, size(items[nxt]))
                if pending and held + cost > max_bytes:
                    break
                pending.append((items[nxt], pool.submit(fetch, items[nxt]), cost))
                held += cost
                nxt += 1
            item, future, cost = pending.popleft()
            result = future.result()
            held -= cost
            yield item, result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
