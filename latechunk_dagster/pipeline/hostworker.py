"""The host worker process of :mod:`latechunk_dagster.pipeline.hostpool`: its loop, convert, prepare and finish.

What runs in a worker: it unpickles the chunker's host part
(:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`: no engine) once, then answers ``prepare`` (check,
tokenize, spans, windows: the engine inputs go back), ``convert`` (a document file's bytes to its
:class:`~latechunk_dagster.sources.documents.Document` or rejection) and ``finish`` (the engine's rows read in place
from the parent's shared-memory block, then :func:`~latechunk_dagster.pipeline.finish.finish_rows`:
means, head, Arrow rows) requests in order. The parent side (the pool, the shared-memory blocks)
is :mod:`latechunk_dagster.pipeline.hostpool`.

A file is converted in a child forked from the worker (:class:`_Converter`, forked again after it dies): a converter
that crashes its process (a fault in a PDF library on a hostile file) rejects that file alone as
``unreadable_file``, naming it and the exit code, and one that runs past the file's
:attr:`~latechunk_dagster.sources.converters.ConversionLimits.convert_timeout_s` is killed and the file
is ``timed_out``; the worker, its batches and the partition go on (contract: one bad document does not
sink its partition).
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import time
import warnings
from collections.abc import Mapping
from dataclasses import fields
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from latechunk_dagster.core.batches import EncodedBatch, PreparedBatch
from latechunk_dagster.core.chunker_host import ChunkerHost
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.errors import DocumentError, LateChunkError
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.pipeline.accounting import DocumentSummary, word_cuts
from latechunk_dagster.pipeline.finish import finish_rows, given_chunks
from latechunk_dagster.sources.converters.base import CONVERT_TIMEOUT_ENV
from latechunk_dagster.sources.documents import Document, RejectedRow
from latechunk_dagster.sources.text_files import UnconvertedFile

#: Test hook read by each worker: when it names a point (``convert``, ``prepare``, ``finish``), the worker
#: SIGKILLs itself on its second request of that kind; ``converter``: the child converting the worker's
#: second file SIGKILLs itself (a converter that crashes). For crash-safety tests only.
TEST_WORKER_KILL_ENV = "LATECHUNK_TEST_KILL_HOST_WORKER_AT"


#: The answer's kind to each request's kind.
_REPLIES = {"convert": "converted", "prepare": "prepared", "finish": "finished"}


class HostWorkerError(LateChunkError):
    """A host worker process died or failed outside any one document; the partition is not written."""


def run_host_worker(conn: Any, payload: bytes, tokenizer_threads: str) -> None:
    """A worker's loop (the worker process's target): prepare / finish requests, answered in order on
    ``conn``; ``payload`` is the pickled :class:`ChunkerHost`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", tokenizer_threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # an ignored SIGTERM is inherited (see core.timebound)
    host: ChunkerHost = pickle.loads(payload)
    held: dict[int, tuple[list[Document], PreparedBatch, list[tuple[str, ...]]]] = {}
    maps: dict[str, shared_memory.SharedMemory] = {}  # the parent's kept blocks, mapped once
    seen = {"convert": 0, "prepare": 0, "finish": 0}
    converter = _Converter()
    kill_at = os.environ.get(TEST_WORKER_KILL_ENV)
    while True:
        try:
            kind, seq, body = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            converter.close()
            return
        seen[kind] += 1
        if kill_at == kind and seen[kind] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            if kind == "convert":  # an UnconvertedFile: a document or its rejection
                reply: Any = converter.convert(body[0], crash=kill_at == "converter" and seen[kind] == 2)
            elif kind == "prepare":
                reply = _prepare(host, held, seq, *body)
            else:
                reply = _finish(host, held, maps, *body)
            conn.send((_REPLIES[kind], seq, reply))
        except BaseException as exc:  # one request's failure fails its partition, not the worker
            held.pop(body[0] if kind == "finish" else seq, None)
            conn.send(("error", seq, _picklable(exc)))


class _Converter:
    """A child forked from this worker that converts document files one at a time (module docstring),
    forked again after it dies. One fork per worker, not per file: a fork of a worker (~0.5 GB mapped)
    cost ~19 ms a file against ~5 ms to convert a small one. ``os.fork``, since a worker is a daemonic
    process, which ``multiprocessing`` does not let have children; the child serves until its socket
    closes (the worker gone) and exits without the worker's exit handlers."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.conn: Connection | None = None

    def convert(self, item: UnconvertedFile, *, crash: bool = False) -> Document | RejectedRow:
        """:meth:`UnconvertedFile.convert <latechunk_dagster.sources.text_files.UnconvertedFile.convert>`
        in the child.

        Returns:
            The document or its rejection; ``RejectedRow(reason="unreadable_file", file_read=True)``
            naming the file and the exit code when the child died converting it; ``timed_out`` naming
            the limit when it gave no answer within ``item.limits.convert_timeout_s`` (the child is
            killed, and the next file forks a new one).

        Raises:
            What the conversion raised, as the child raised it (where it pickles).
        """
        if self.conn is None:
            self._start()
        assert self.conn is not None
        limit = item.limits.convert_timeout_s
        try:
            self.conn.send((item, crash))
            if limit is not None and not self.conn.poll(limit):  # no answer (nor death) within the limit
                return self._timed_out(item, limit)
            kind, value = self.conn.recv()
        except (EOFError, OSError):  # the child died before its whole answer was sent
            code = self.close()
            detail = f"{item.where}: converting it crashed the converter's process (exit code {code})"
            return RejectedRow(item.doc_id, item.where, "unreadable_file", detail, file_read=True)
        if kind == "error":
            raise value
        return value  # type: ignore[no-any-return]

    def _timed_out(self, item: UnconvertedFile, limit: float) -> RejectedRow:
        """Kill the child converting ``item`` past its time limit; the file's ``timed_out`` rejection."""
        assert self.pid is not None
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended meanwhile: reaped below all the same
            pass
        self.close()
        detail = (
            f"{item.where}: converting it took longer than the limit of {limit:g} s and was stopped "
            f"(ConversionLimits.convert_timeout_s, or {CONVERT_TIMEOUT_ENV})"
        )
        return RejectedRow(item.doc_id, item.where, "timed_out", detail, file_read=True)

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        with warnings.catch_warnings():  # lancedb warns at every fork; the child never touches it
            warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
            pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _serve_conversions(Connection(theirs.detach()))
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self.conn = pid, Connection(ours.detach())

    def close(self) -> int | None:
        """Close the child's socket and reap it; its exit code (negative: the signal), ``None`` if none ran."""
        if self.conn is None or self.pid is None:
            return None
        self.conn.close()
        _, status = os.waitpid(self.pid, 0)
        self.pid = self.conn = None
        return os.waitstatus_to_exitcode(status)


def _serve_conversions(conn: Connection) -> None:
    """The converter child's loop: ``(file, crash)`` in, ``("ok", document or rejection)`` or ``("error",
    exception)`` out, until the worker closes the socket."""
    while True:
        try:
            item, crash = conn.recv()
        except (EOFError, OSError):
            return
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            answer: tuple[str, Any] = ("ok", item.convert())
        except BaseException as exc:
            answer = ("error", _picklable(exc))
        conn.send(answer)


def document_fields(doc: Document) -> tuple[Any, ...]:
    """What a worker gets of a document: every field, in order (``doc_id, text, sha256, chunks,
    converter, pages``: a converted document's rows carry its converter and pages) (:func:`_document`)."""
    return tuple(getattr(doc, f.name) for f in fields(Document))


def _document(values: tuple[Any, ...]) -> Document:
    """The document of :func:`document_fields` again, its own chunks, converter and pages included."""
    return Document(*values)


def _prepare(
    host: ChunkerHost,
    held: dict,
    seq: int,
    docs: list[tuple[str, str, str, Any]],
    strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy],
    needs: list[tuple[str, ...]] | None,
) -> tuple:
    t0 = time.perf_counter()
    batch = [_document(d) for d in docs]
    prepared = host.prepare(
        [d.text for d in batch], strategy, doc_ids=[d.doc_id for d in batch], chunks=given_chunks(batch, strategy)
    )
    every = prepared.granularities.names
    held[seq] = (batch, prepared, needs if needs is not None else [every] * len(batch))
    return host.encoder_inputs(prepared), time.perf_counter() - t0


def _finish(
    host: ChunkerHost,
    held: dict,
    maps: dict[str, shared_memory.SharedMemory],
    seq: int,
    shm_name: str | None,
    kept: bool,
    forget: list[str],
    layout: tuple[int, list[tuple[int, int]]] | None,
    native: list[NativeChunks],
    refused: dict[int, DocumentError],
    context: tuple,
) -> tuple:
    t0 = time.perf_counter()
    for name in forget:  # blocks the parent no longer keeps
        old = maps.pop(name, None)
        if old is not None:
            old.close()
    batch, prepared, needs = held.pop(seq)
    prepared.refuse(refused)
    shm = None
    if shm_name is not None:
        shm = maps.get(shm_name) or shared_memory.SharedMemory(name=shm_name)
        if kept:
            maps[shm_name] = shm
    try:
        if shm is not None and layout is not None:
            width, spans = layout
            total = spans[-1][0] + spans[-1][1]
            # shape: [total rows of the batch, width], float32: the parent's block, read in place
            block = np.ndarray((total, width), dtype=np.float32, buffer=shm.buf)
            rows = [block[a : a + n] for a, n in spans]
        else:
            block, rows = None, []
        results, record = finish_rows(host, EncodedBatch(prepared, rows, native), batch, context, needs)
        del rows, block
    finally:
        if shm is not None and not kept:
            shm.close()
    summaries: list[DocumentSummary | DocumentError] = [
        DocumentSummary(len(r.token_ids), r.windows, r.path, word_cuts(r)) if isinstance(r, ChunkedDocument) else r
        for r in results
    ]
    return record, summaries, time.perf_counter() - t0


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a :class:`HostWorkerError` carrying its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return HostWorkerError(f"{type(exc).__name__}: {exc}")
