"""Step 2 of a partition's run: the documents streamed through three threads to the staging file.

One loop, :class:`Stream`, with bounded queues between its threads::

    calling thread  read, convert document files (host.convert, ahead by host.convert_ahead),
                    skip unchanged, form batches -> host.prepare (ahead by host.ahead)
    engine thread   host.encode: the one engine call of a batch
    writer thread   host.pool_rows: means, head and Arrow rows -> accounting -> staging files
                    (one per granularity table)

Where the host work runs is the only difference between the two arrangements, each a *host*:

* :class:`LocalHost`: prepare in the calling thread, finish in the writer thread
  (:func:`~latechunk_dagster.pipeline.finish.finish_rows`); document files converted in host worker
  processes (by default, :func:`~latechunk_dagster.pipeline.config.conversion_workers`) or, with
  ``host_workers=0``, in the calling thread;
* :class:`PoolHost`: all three in host worker processes (:mod:`latechunk_dagster.pipeline.hostpool`),
  which call the same functions; the threads move file bytes, converted documents, batches, token
  ids, shared-memory blocks and finished rows.

A document file the store did not convert (:class:`~latechunk_dagster.sources.text_files.UnconvertedFile`,
``DocumentStore.iter_shard(..., defer_conversion=True)``) is converted by the host, in order: with
workers, up to ``host.convert_ahead`` files (and :data:`CONVERT_AHEAD_BYTES` of their bytes) are in the
workers at once, so conversion, the slow host step for PDFs (``bench/conversion.py``), runs on every
worker while the calling thread reads the next files.

Order, staging and the one commit are the same either way.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import pyarrow as pa

from latechunk_dagster.pipeline.accounting import token_count
from latechunk_dagster.pipeline.finish import finish_rows, given_chunks
from latechunk_dagster.pipeline.hostpool import discard_host_pool, host_pool
from latechunk_dagster.pipeline.killpoints import kill_point
from latechunk_dagster.pipeline.memory import FreedMemory
from latechunk_dagster.pipeline.run import PartitionRun
from latechunk_dagster.sink.schema import chunk_schema
from latechunk_dagster.sources.documents import Document, RejectedRow
from latechunk_dagster.sources.text_files import UnconvertedFile

_END = object()
#: Most bytes of document files sent to the host workers for conversion and not yet converted (at
#: least one file is always in flight, whatever its size up to ``ConversionLimits.max_file_bytes``).
CONVERT_AHEAD_BYTES = 64 << 20


class Stopped(Exception):
    """Raised in a pipeline thread waiting on a queue or a worker after another thread failed."""


class LocalHost:
    """Host work in this process: prepare in the calling thread, finish in the writer thread.

    ``converters``: host worker processes that convert the document files (a pool started at the
    first file, :func:`~latechunk_dagster.pipeline.hostpool.host_pool`; each converts in a child of
    its own, so a crash or a time-out rejects one file); ``0``: converted in the calling thread.
    """

    ahead = 1
    writer_queue = 1

    def __init__(self, run: PartitionRun, converters: int = 0) -> None:
        self.run = run
        self.context = run.context
        self.freed = FreedMemory()
        self.converters = converters
        self.convert_ahead = 2 * converters  # 0: converted at once, in the calling thread
        self.pool: Any = None
        self._refused: str | None = None  # why the converters cannot go to a worker ("": they can)

    def convert(self, item: UnconvertedFile) -> Future:
        if self.converters and self._picklable(item):
            if self.pool is None:
                self.pool = host_pool(self.run.chunker, self.converters)
            return self.pool.convert(item)
        done: Future = Future()
        done.set_result(item.convert())
        return done

    def prepare(self, batch: list[Document]) -> Future:
        run, t0, done = self.run, time.perf_counter(), Future()
        chunks = given_chunks(batch, run.strategy)
        done.set_result(
            (run.chunker.prepare([d.text for d in batch], run.strategy, doc_ids=[d.doc_id for d in batch],
                                 chunks=chunks),
             time.perf_counter() - t0)
        )  # fmt: skip
        return done

    def encode(self, prepared: Any) -> Any:
        return self.run.chunker.encode(prepared)

    def pool_rows(self, encoded: Any, batch: list[Document], wait: Callable[[Future], Any]) -> tuple[list, Any, float]:
        t0 = time.perf_counter()
        results, rows = finish_rows(self.run.chunker, encoded, batch, self.context, self.run.needs_of(batch))
        engine_bytes = sum(r.nbytes for r in encoded.rows)
        del encoded
        self.freed.freed(engine_bytes)  # the batch's engine rows are freed: hand the pages back now and then
        return results, rows, time.perf_counter() - t0

    def _picklable(self, item: UnconvertedFile) -> bool:
        """Whether the file's converters can go to a worker (a converter class defined inside a function
        cannot); where not, it is converted here, with one warning a partition naming why."""
        if self._refused is None:
            try:
                pickle.dumps(item.converters)
                self._refused = ""
            except Exception as exc:
                self._refused = f"{type(exc).__name__}: {exc}"
                logging.getLogger(__name__).warning(
                    "partition %r: document files are converted in this process, not in worker processes: the "
                    "store's converters do not pickle (%s); define converter classes at module level",
                    self.run.partition,
                    self._refused,
                )
        return not self._refused

    def close(self, failed: bool) -> None:
        if failed and self.pool is not None:
            discard_host_pool(self.pool)  # its workers may hold files of this failed call


class PoolHost:
    """Host work in worker processes: the engine's rows reach the worker through shared memory."""

    def __init__(self, run: PartitionRun, workers: int) -> None:
        self.run = run
        self.pool = host_pool(run.chunker, workers)
        self.ahead = self.writer_queue = workers  # up to `workers` batches prepared ahead / finishing
        self.convert_ahead = 2 * workers  # every worker converting one file, with the next one queued
        self.context = run.context
        self.blocks: set[Any] | None = set()  # shared-memory blocks not yet released (None: call over)
        self.lock = threading.Lock()

    def convert(self, item: UnconvertedFile) -> Future:
        return self.pool.convert(item)

    def prepare(self, batch: list[Document]) -> Future:
        prepared: Future = Future()
        handle = self.pool.prepare(batch, self.run.strategy, self.run.needs_of(batch))
        handle.add_done_callback(lambda f: _chain(f, prepared, lambda h: (h, h.seconds)))
        return prepared

    def encode(self, handle: Any) -> Any:
        rows, native, refused = self.run.chunker.encode_inputs(handle.inputs)
        fut, shm = self.pool.pool_rows(handle, rows, native, refused, self.context)
        del rows, native
        if shm is not None:
            with self.lock:
                if self.blocks is not None:
                    self.blocks.add(shm)
                    return fut, shm
            self.pool.release(shm)  # an engine thread still running after a failure: nothing will read it
        return fut, shm

    def pool_rows(self, pending: Any, batch: list[Document], wait: Callable[[Future], Any]) -> tuple[list, Any, float]:
        fut, shm = pending
        done = wait(fut)
        with self.lock:
            if self.blocks is not None:
                self.blocks.discard(shm)
        self.pool.release(shm)
        return done.results, done.rows, done.seconds

    def close(self, failed: bool) -> None:
        if failed:
            discard_host_pool(self.pool)  # its workers may hold batches of this failed call
        with self.lock:
            blocks, self.blocks = self.blocks, None
        for shm in blocks or ():
            self.pool.release(shm)


def _chain(source: Future, target: Future, convert: Callable[[Any], Any]) -> None:
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(convert(source.result()))


class Stream:
    """The three threads of the module docstring over ``host`` (:class:`LocalHost` or :class:`PoolHost`)."""

    def __init__(self, run: PartitionRun, staged: dict[str, Path], host: LocalHost | PoolHost) -> None:
        self.run, self.staged, self.host = run, staged, host
        self.to_engine: queue.Queue = queue.Queue(maxsize=1)
        self.to_writer: queue.Queue = queue.Queue(maxsize=host.writer_queue)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def stream(self, documents: Iterable[Document | RejectedRow | UnconvertedFile]) -> None:
        """Stream every document to the staging file; raises the first error of any thread. A store's
        shard (:class:`~latechunk_dagster.sources.stamps.ShardItems`) first learns which files' rows are
        current by their source stamps (:meth:`PartitionRun.unchanged`): those are neither fetched nor converted."""
        if hasattr(documents, "skip_unchanged") and not self.run.force:
            documents.skip_unchanged(self.run.unchanged)
        name = self.run.partition
        engine = threading.Thread(target=self._guarded, args=(self._encode,), name=f"latechunk-engine-{name}")
        writer = threading.Thread(target=self._guarded, args=(self._write,), name=f"latechunk-write-{name}")
        engine.daemon = writer.daemon = True
        engine.start()
        writer.start()
        failed = True
        try:
            self._submit_all(self._converted(documents))
            while engine.is_alive() or writer.is_alive():
                engine.join(timeout=0.1)
                writer.join(timeout=0.1)
            failed = self.error is not None
        except BaseException:
            self.stop.set()
            raise
        finally:
            engine.join(timeout=5)
            writer.join(timeout=5)
            self.host.close(failed)
        if self.error is not None:
            raise self.error

    def _guarded(self, loop: Callable[[], None]) -> None:
        """Runs a thread's loop; its error stops the other threads and is raised by :meth:`stream`."""
        try:
            loop()
        except Stopped:
            return  # another thread failed and raises its own error
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            self.stop.set()

    def _wait(self, fut: Future) -> Any:
        """A future's result; raises :class:`Stopped` when another thread failed meanwhile."""
        while True:
            try:
                return fut.result(timeout=0.1)
            except FutureTimeout:
                if self.stop.is_set():
                    raise Stopped from None

    def _converted(self, items: Iterable[Document | RejectedRow | UnconvertedFile]) -> Iterator[Document | RejectedRow]:
        """``items`` in order, each :class:`UnconvertedFile` converted by the host (calling thread):
        at most ``host.convert_ahead`` files and :data:`CONVERT_AHEAD_BYTES` of their bytes in
        conversion at once, besides the one waited for."""
        pending: collections.deque[tuple[Any, int]] = collections.deque()  # (item or future, bytes sent)
        converting = sent = 0
        ahead = self.host.convert_ahead
        for item in items:
            if isinstance(item, UnconvertedFile):
                pending.append((self.host.convert(item), len(item.data)))
                converting, sent = converting + 1, sent + len(item.data)
            else:
                pending.append((item, 0))
            del item
            while pending and (
                not isinstance(pending[0][0], Future) or converting > ahead or sent > CONVERT_AHEAD_BYTES
            ):
                head, size = pending.popleft()
                if isinstance(head, Future):
                    converting, sent = converting - 1, sent - size
                    head = self._wait(head)
                yield head
        while pending:
            head, _ = pending.popleft()
            yield self._wait(head) if isinstance(head, Future) else head

    def _batches(self, documents: Iterable[Document | RejectedRow]) -> Iterator[list[Document]]:
        """The documents to encode, in batches of at most ``budget`` estimated tokens (calling thread)."""
        run = self.run
        batch: list[Document] = []
        tokens = 0
        for item in documents:
            if self.stop.is_set():
                return
            doc = run.admit(item)
            if doc is None:
                continue
            cost = run.estimator.estimate(doc.text)
            if batch and tokens + cost > run.budget:
                yield batch
                batch, tokens = [], 0
            batch.append(doc)
            tokens += cost
        if batch and not self.stop.is_set():
            yield batch

    def _submit_all(self, documents: Iterable[Document | RejectedRow]) -> None:
        """Prepare each batch (up to ``host.ahead`` ahead) and queue them in order, then the end mark."""
        ahead: collections.deque = collections.deque()
        for batch in self._batches(documents):
            ahead.append((batch, self.host.prepare(batch)))
            if len(ahead) >= self.host.ahead:
                self._forward(*ahead.popleft())
            del batch
        while ahead:
            self._forward(*ahead.popleft())
        _put(self.to_engine, _END, self.stop)

    def _forward(self, batch: list[Document], fut: Future) -> None:
        prepared, seconds = self._wait(fut)
        self.run.report.prepare_seconds += seconds
        _put(self.to_engine, (batch, prepared), self.stop)

    def _encode(self) -> None:
        """The engine thread: one engine call at a time."""
        run = self.run
        while (item := _get(self.to_engine, self.stop)) is not _END:
            batch, prepared = item
            kill_point("before_engine", run.partition)
            t0 = time.perf_counter()
            pending = self.host.encode(prepared)
            run.report.engine_seconds += time.perf_counter() - t0
            run.report.batches += 1
            _put(self.to_writer, (batch, pending), self.stop)
            del item, prepared, pending
            kill_point("during_encode", run.partition)
        _put(self.to_writer, _END, self.stop)

    def _write(self) -> None:
        """The writer thread: each batch finished, counted and its rows appended to the staging file
        of each granularity table, in order."""
        run = self.run
        schema = chunk_schema(run.chunker.embedding_dim)
        with contextlib.ExitStack() as files:
            streams = {
                g: files.enter_context(pa.ipc.new_stream(files.enter_context(pa.OSFile(str(path), "wb")), schema))
                for g, path in self.staged.items()
            }
            while (item := _get(self.to_writer, self.stop)) is not _END:
                batch, pending = item
                del item
                results, rows, seconds = self.host.pool_rows(pending, batch, self._wait)
                del pending
                for g, part in rows.items():
                    streams[g].write_batch(part)
                    run.report.count_rows(g, part.num_rows)
                good = run.account(batch, results)
                if good:
                    run.estimator.observe(good)
                run.report.finish_seconds += seconds
                run.meter.add(len(batch), sum(token_count(r) for _, r in good))
                del results, rows, good


def _put(q: queue.Queue, item: object, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _get(q: queue.Queue, stop: threading.Event) -> object:
    while True:
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                raise Stopped from None
