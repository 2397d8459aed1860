"""Host worker processes: a partition's conversion of document files (PDF, DOCX, PPTX, HTML to
Markdown), prepare (tokenize, spans, windows) and finish (means, head, Arrow rows) run in a pool of
processes, so the host side scales with cores instead of one GIL.

Used by :func:`~latechunk_dagster.pipeline.materialize_partition` when ``host_workers >= 1``::

    calling thread  file f -> worker f % W: convert   -> the document (text, converter, pages) comes back
                    batch k -> worker k % W: prepare   -> the windows' token ids come back
    engine thread   engine call -> its rows (span sums on the span path, else token states)
                    copied ONCE into a shared-memory block
                    -> the same worker: finish (its prepared batch is kept there)
    writer thread   the worker's Arrow rows + per-document summaries, in batch order -> staging file

Each worker holds the chunker's host part (:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`,
pickled once: tokenizer, settings, head, engine traits; no engine). A batch is prepared and
finished by the same worker (its tokenizations, spans and window plans
never cross the process boundary; only the windows' token ids, and on the span path each window's
row ranges, go to the engine). The engine's rows (float32 span-sum pairs, or token states on the
token-state path) go to the worker as one ``multiprocessing.shared_memory`` block per batch: the engine's rows are
copied into it once and the worker reads them in place (numpy views). The writer thread consumes
results in batch order, so the staging file, the commit and its atomicity are those of the
threaded stream; at most ``W`` batches are prepared ahead and ``W`` finishing, so memory stays
bounded by the batch (times the worker count), not by the partition.

A worker that dies (killed, out of memory) fails every request it held with
:class:`HostWorkerError`; the partition then raises before its commit, so the table keeps the
partition's old rows. A pool that lost a worker is shut down and the next call starts a new one.
Pools are kept per (chunker, worker count) across calls (:func:`host_pool`; a changed host part
restarts them), since starting a worker (``spawn``: a fresh interpreter importing numpy,
transformers, pyarrow) takes seconds; they
are closed when their chunker is garbage-collected, at interpreter exit, or by
:func:`shutdown_host_pools`.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing
import os
import pickle
import threading
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from latechunk_dagster.core.chunker import EncoderInputs, LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.pipeline.accounting import DocumentSummary
from latechunk_dagster.pipeline.hostworker import TEST_WORKER_KILL_ENV as TEST_WORKER_KILL_ENV  # re-exported
from latechunk_dagster.pipeline.hostworker import HostWorkerError as HostWorkerError  # re-exported
from latechunk_dagster.pipeline.hostworker import document_fields, run_host_worker
from latechunk_dagster.sources.documents import Document
from latechunk_dagster.sources.text_files import UnconvertedFile

log = logging.getLogger(__name__)

#: Shared-memory blocks a pool keeps for reuse, per worker (one being filled, one queued, one being
#: read). Reusing them matters: a fresh block per batch cost ~4x the system time of the threaded
#: stream in page faults (measured in bench/host_ceiling.py), since every page is new to both sides.
BLOCKS_PER_WORKER = 3


@dataclass
class PreparedHandle:
    """What the parent keeps of a batch prepared in a worker.

    Attributes:
        worker: the worker that holds the prepared batch; seq: its key there.
        inputs: the batch's engine inputs (:meth:`LateChunker.encoder_inputs`, made in the worker).
        seconds: the worker's time in ``chunker.prepare``.
    """

    worker: int
    seq: int
    inputs: EncoderInputs
    seconds: float


@dataclass
class FinishedBatch:
    """A batch finished in a worker: its Arrow rows per granularity table (``{}``: no chunk) and one
    entry per document (a :class:`DocumentSummary`, or the :class:`DocumentError` that refused it),
    in batch order."""

    rows: Any
    results: list[DocumentSummary | DocumentError]
    seconds: float


def host_payload(chunker: LateChunker) -> bytes:
    """What the workers get of ``chunker``: its host part, pickled (compared byte for byte to tell a
    changed setting).

    Raises:
        RuntimeError: the chunker is closed.
    """
    if chunker.engine is None:
        raise RuntimeError("LateChunker is closed")
    return pickle.dumps(chunker.host)


class HostPool:
    """``workers`` processes, each holding ``chunker``'s host part.

    Args:
        chunker: the partition's chunker; its engine stays in this process.
        workers: number of worker processes (>= 1).

    Raises:
        ValueError: ``workers`` < 1.
    """

    def __init__(self, chunker: LateChunker, workers: int, payload: bytes | None = None) -> None:
        if workers < 1:
            raise ValueError(f"host_workers must be at least 1 for a pool, got {workers}")
        self.workers = workers
        #: the host part the workers hold, pickled (a pool is replaced when it changes)
        self.payload = host_payload(chunker) if payload is None else payload
        self.broken: BaseException | None = None
        self._seq = itertools.count()
        self._next = itertools.count()
        self._lock = threading.Lock()
        # per worker, its unanswered requests by seq: the future, and what the request is (for errors)
        self._pending: list[dict[int, tuple[Future, str]]] = [{} for _ in range(workers)]
        self._send_locks = [threading.Lock() for _ in range(workers)]
        self._blocks_lock = threading.Lock()
        self._free: list[shared_memory.SharedMemory] = []  # kept blocks not in use
        self._kept: set[str] = set()  # names of the blocks kept for reuse
        self._forget: list[list[str]] = [[] for _ in range(workers)]  # evicted blocks each worker still maps
        self.made: list[str] = []  # names of every block this pool created (diagnostics, tests)
        self.closed = False
        ctx = multiprocessing.get_context("spawn")
        payload = self.payload
        # one tokenizer thread per worker when the workers fill the cores (the user's setting wins)
        threads = "true" if workers < (os.cpu_count() or 1) else "false"
        self._conns, self._procs, self._readers = [], [], []
        for w in range(workers):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=run_host_worker, args=(child, payload, threads), name=f"latechunk-host-{w}", daemon=True
            )
            proc.start()
            child.close()
            reader = threading.Thread(target=self._read, args=(w, parent), name=f"latechunk-host-reader-{w}")
            reader.daemon = True
            reader.start()
            self._conns.append(parent)
            self._procs.append(proc)
            self._readers.append(reader)

    # -- requests ---------------------------------------------------------------------------
    def convert(self, item: UnconvertedFile) -> Future:
        """Convert a document file in the next worker (round robin); a future of its
        :class:`~latechunk_dagster.sources.documents.Document` or ``RejectedRow``
        (:meth:`UnconvertedFile.convert <latechunk_dagster.sources.text_files.UnconvertedFile.convert>`).
        The file's bytes are pickled to the worker at once: the caller need not keep them."""
        w = next(self._next) % self.workers
        return self._request(w, "convert", (item,), f"converting {item.where}")

    def prepare(
        self,
        batch: Sequence[Document],
        strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy],
        needs: Sequence[Sequence[str]] | None = None,
    ) -> Future:
        """Prepare ``batch`` in the next worker (round robin); a future of its :class:`PreparedHandle`.

        Args:
            strategy: one strategy or the granularities ``{name: strategy}``.
            needs: per document, the granularities whose tables take its rows
                (:func:`~latechunk_dagster.pipeline.finish.finish_rows`); ``None``: every one.
        """
        w = next(self._next) % self.workers
        docs = [document_fields(d) for d in batch]
        body = (docs, strategy, None if needs is None else [tuple(n) for n in needs])
        return self._request(w, "prepare", body, f"preparing {_batch_named([d.doc_id for d in batch])}")

    def pool_rows(
        self,
        handle: PreparedHandle,
        rows: list[np.ndarray],
        native: list[NativeChunks],
        refused: dict[int, DocumentError],
        context: tuple,
    ) -> tuple[Future, shared_memory.SharedMemory | None]:
        """Finish a prepared batch in its worker with the engine's ``rows`` (copied once into shared memory).

        Args:
            handle: from :meth:`prepare`; rows: float32 ``[len(window), dim]`` per window, in order;
            native: the engine's chunk means of ``handle.inputs.native_texts``;
            refused: the documents the engine refused (``LateChunker.encode_inputs``), left out
            of ``rows`` and ``native``;
            context: :data:`~latechunk_dagster.pipeline.finish.RowContext` for the Arrow rows.

        Returns:
            (a future of the :class:`FinishedBatch`, the shared-memory block to :meth:`release` after it).
        """
        if self.broken is not None:
            fut: Future = Future()
            fut.set_exception(HostWorkerError(f"the host worker pool is broken: {self.broken}"))
            return fut, None
        shm, kept, layout = self._to_shared(rows)
        try:
            with self._blocks_lock:
                forget, self._forget[handle.worker] = self._forget[handle.worker], []
            body = (handle.seq, shm.name if shm else None, kept, forget, layout, native, refused, context)
            fut = self._request(handle.worker, "finish", body, f"finishing {_batch_named(handle.inputs.ids)}")
        except BaseException:
            self.release(shm)
            raise
        return fut, shm

    # -- shared-memory blocks ---------------------------------------------------------------
    def _to_shared(
        self, rows: list[np.ndarray]
    ) -> tuple[shared_memory.SharedMemory | None, bool, tuple[int, list[tuple[int, int]]] | None]:
        """Every window's float32 rows back to back in one shared-memory block (the one copy).

        Returns:
            (the block, whether it is kept for reuse, ``(row width, [(row offset, n_rows) per window])``);
            ``(None, False, None)`` without rows.
        """
        if not rows:
            return None, False, None
        dim = rows[0].shape[1]
        counts = [len(r) for r in rows]
        total = sum(counts)
        shm, kept = self._acquire(total * dim * 4)
        try:
            # shape: [total rows of the batch, dim], float32
            block = np.ndarray((total, dim), dtype=np.float32, buffer=shm.buf)
            layout, at = [], 0
            for r, n in zip(rows, counts):
                block[at : at + n] = r
                layout.append((at, n))
                at += n
            del block
        except BaseException:
            self.release(shm)
            raise
        return shm, kept, (dim, layout)

    def _acquire(self, nbytes: int) -> tuple[shared_memory.SharedMemory, bool]:
        """A free kept block of at least ``nbytes``, else a new one (kept when there is room)."""
        evicted: shared_memory.SharedMemory | None = None
        with self._blocks_lock:
            for k, b in enumerate(self._free):
                if b.size >= nbytes:
                    return self._free.pop(k), True
            if len(self._kept) >= BLOCKS_PER_WORKER * self.workers and self._free:
                evicted = self._free.pop(0)  # too small for today's batches: make room for a larger one
                self._kept.discard(evicted.name)
                for names in self._forget:
                    names.append(evicted.name)
            keep = len(self._kept) < BLOCKS_PER_WORKER * self.workers and not self.closed
        if evicted is not None:
            _unlink(evicted)
        size = max(nbytes * 5 // 4, 1 << 20) if keep else max(nbytes, 1)
        shm = shared_memory.SharedMemory(create=True, size=size)
        with self._blocks_lock:
            self.made.append(shm.name)
            if keep:
                self._kept.add(shm.name)
        return shm, keep

    def release(self, shm: shared_memory.SharedMemory | None) -> None:
        """A batch's block is no longer needed: back to the free list, or unlinked (``None``: nothing)."""
        if shm is None:
            return
        with self._blocks_lock:
            if shm.name in self._kept and not self.closed:
                if all(b is not shm for b in self._free):
                    self._free.append(shm)
                return
            self._kept.discard(shm.name)
        _unlink(shm)

    def _request(self, w: int, kind: str, body: tuple, what: str) -> Future:
        """Send request ``kind`` to worker ``w``; ``what`` names it in the error if the worker dies on it."""
        fut: Future = Future()
        if self.broken is not None:
            fut.set_exception(HostWorkerError(f"the host worker pool is broken: {self.broken}"))
            return fut
        seq = next(self._seq)
        with self._lock:
            self._pending[w][seq] = fut, what
        try:
            with self._send_locks[w]:
                self._conns[w].send((kind, seq, body))
        except (OSError, EOFError) as exc:
            self._fail(w, HostWorkerError(f"host worker {w} (pid {self._procs[w].pid}) is gone: {exc}"))
        return fut

    def _read(self, w: int, conn: Any) -> None:
        """Reader thread of worker ``w``: resolves its futures; on EOF fails them all."""
        while True:
            try:
                kind, seq, body = conn.recv()
            except (EOFError, OSError):
                proc = self._procs[w] if w < len(self._procs) else None
                if proc is not None:
                    proc.join(timeout=1.0)
                code = proc.exitcode if proc is not None else None
                with self._lock:  # a worker answers in order: its oldest request is the one it died on
                    doing = self._pending[w][min(self._pending[w])][1] if self._pending[w] else "idle"
                self._fail(w, HostWorkerError(f"host worker {w} died (exit code {code}) while {doing}"))
                return
            with self._lock:
                request = self._pending[w].pop(seq, None)
            if request is None:
                continue
            fut = request[0]
            if kind == "error":
                fut.set_exception(body)
            elif kind == "converted":
                fut.set_result(body)
            elif kind == "prepared":
                inputs, seconds = body
                fut.set_result(PreparedHandle(w, seq, inputs, seconds))
            else:
                fut.set_result(FinishedBatch(*body))

    def _fail(self, w: int, exc: HostWorkerError) -> None:
        self.broken = self.broken or exc
        with self._lock:
            pending, self._pending[w] = self._pending[w], {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    def close(self) -> None:
        """Stop the workers (a worker still busy is terminated after 5 s). Safe to call twice."""
        for w, conn in enumerate(self._conns):
            try:
                with self._send_locks[w]:
                    conn.send(("stop", -1, ()))
            except (OSError, EOFError, ValueError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self.broken = self.broken or HostWorkerError("the host worker pool was closed")
        with self._blocks_lock:
            self.closed = True
            free, self._free = self._free, []
            for b in free:
                self._kept.discard(b.name)
        for b in free:
            _unlink(b)  # blocks still in use are unlinked when the stream releases them


def _batch_named(ids: Sequence[str]) -> str:
    """A batch as errors name it, from its document ids: their count and the first and last."""
    if not ids:
        return "an empty batch"
    return f"a batch of {len(ids)} documents ({ids[0]!r}{' ... ' + repr(ids[-1]) if len(ids) > 1 else ''})"


def _unlink(shm: shared_memory.SharedMemory) -> None:
    """Close and unlink a shared-memory block (safe twice)."""
    try:
        shm.close()
        shm.unlink()
    except FileNotFoundError:
        pass


def pool_refusal(chunker: object, strategy: ChunkingStrategy) -> str | None:
    """Why worker processes cannot do this partition's host work, or ``None`` when they can.

    The workers get the chunker's host part and the strategy, pickled, so a chunker that is not a
    :class:`LateChunker` (a wrapper) or a strategy that does not pickle (a class defined inside a
    function) cannot go to them.
    """
    if not isinstance(chunker, LateChunker):
        return f"the chunker is a {type(chunker).__name__}, not a LateChunker whose host part the workers can hold"
    try:
        pickle.dumps(strategy)
    except Exception as exc:
        return f"the strategy {strategy!r} cannot be pickled for the worker processes ({exc})"
    return None


# -- pools kept across calls -------------------------------------------------------------------

_POOLS: weakref.WeakKeyDictionary[LateChunker, dict[int, HostPool]] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def host_pool(chunker: LateChunker, workers: int) -> HostPool:
    """The live pool of ``workers`` processes for ``chunker``, started on first use, after a failure, or
    when a setting of the chunker changed since (``window_length``, ``prefix``...: the workers hold its
    host part, pickled, compared byte for byte)."""
    payload = host_payload(chunker)  # the host part as it is now: a changed setting restarts the workers
    with _POOLS_LOCK:
        pools = _POOLS.setdefault(chunker, {})
        pool = pools.get(workers)
        if pool is None or pool.broken is not None or pool.payload != payload:
            if pool is not None:
                pool.close()
            pool = pools[workers] = HostPool(chunker, workers, payload)
            weakref.finalize(chunker, pool.close)  # the workers go when the chunker does
        return pool


def discard_host_pool(pool: HostPool) -> None:
    """Close ``pool`` and forget it (after a failed partition: its workers may hold stale batches)."""
    with _POOLS_LOCK:
        for pools in _POOLS.values():
            for k, p in list(pools.items()):
                if p is pool:
                    del pools[k]
    pool.close()


@atexit.register
def shutdown_host_pools() -> None:
    """Close every pool (at interpreter exit; tests call it to start afresh)."""
    with _POOLS_LOCK:
        pools = [p for d in _POOLS.values() for p in d.values()]
        _POOLS.clear()
    for p in pools:
        p.close()
