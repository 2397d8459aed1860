"""One partition materialized as a bounded stream: read, skip unchanged, encode, pool, stage, one commit.

Flow of :func:`materialize_partition` (three threads, bounded queues between them)::

    calling thread  documents -> skip unchanged (doc_sha256 + vector_config) -> batches of at most
                    ``batch_tokens`` estimated document tokens -> chunker.prepare(batch)
                    (check, tokenize, spans, window plans)
    engine thread   chunker.encode(prepared)                    (the engine; one call at a time)
    writer thread   chunker.finish(encoded) (means, head) -> Arrow rows (sink.rows.chunk_batch)
                    -> staged to a local Arrow IPC file
    then            systemic-failure check -> ONE LanceDB commit streamed from the staged file

**Overlap.** While the engine encodes batch k, the calling thread prepares batch k+1 and the
writer pools and writes batch k-1. The heavy parts of each step release the GIL (vLLM's model
forward in torch, the fast tokenizer's batch call in Rust, numpy's reductions), so the threads
run at once; measured in ``bench/partition_memory.py --overlap``. ``prepare`` runs in the calling
thread so that, when that is the main thread, the strategy's per-document time bound can use
SIGALRM (:mod:`latechunk_dagster.core.timebound`) instead of a worker process.

**Memory.** At most :data:`IN_FLIGHT_BATCHES` batches of documents are between the iterator and
the staging file (one being formed and prepared, one queued, one encoding, one queued, one being
written), and at most three hold token states (encoding, queued, being pooled). The rows
go to disk as they are made; the commit streams them back in record batches. What grows with the
partition is bookkeeping of ids and hashes (~0.5 KB per document) and LanceDB's merge (~+100 MB
for 30k rows, measured in ``bench/partition_memory.py``). Peak memory therefore follows
``batch_tokens``, not the partition's text or vectors.

**Atomicity: why staging + one streamed merge_insert.** A reader of the table must see the
partition's complete old rows or its complete new rows. LanceDB commits are atomic table versions,
so the partition is replaced in one commit (:func:`latechunk_dagster.sink.writes.commit_documents`:
``merge_insert`` on ``chunk_id`` with ``when_not_matched_by_source_delete`` limited to the
replaced documents). Its source is a ``RecordBatchReader``, which LanceDB 0.40 streams (measured:
+200 MB RSS for 20k source rows, +370 MB for 480k rows of 1.9 KB), so the commit's memory does
not grow with the data. The rows are staged on local disk rather than fed to the merge while the
engine runs because the merge's delete scope (which documents are changed, removed or now
rejected) and the systemic-failure decision are known only after the last document: one
``add`` per batch would expose a half-written partition, and ``add`` + final delete would be
two commits. Nothing touches the table before the commit, so an exception at any point (a bad
iterator, the engine, a systemic failure) leaves the partition's old rows whole.

**Concurrent runs and crashes.** Runs writing different partitions of one table commit side by
side; two runs of the same partition end with one run's rows whole; commit conflicts are retried
with backoff (:mod:`latechunk_dagster.sink.writes`, :mod:`latechunk_dagster.sink.retry`). A
process killed at any point leaves the partition's old rows: before the commit nothing touched the
table, and a commit killed midway leaves only data files no table version references (LanceDB's
``cleanup_old_versions`` / ``optimize`` removes them). Its staging directory
(``latechunk-stage-<pid>-*``) is removed by the next call of any process on the same host once
``<pid>`` is gone. :data:`TEST_KILL_ENV` is a test hook that kills the process at named points.

**Incremental.** A document is re-encoded only if its ``doc_sha256`` or the ``vector_config``
(:func:`latechunk_dagster.pipeline.config.vector_config`: model, head, dtype, prefix, windows,
strategy and parameters, :data:`~latechunk_dagster.pipeline.config.CHUNKING_VERSION`) of its
stored rows differs; the rows of skipped documents are not rewritten (their ``run_id`` and
``materialized_at`` stay). Changed documents' rows are replaced, removed documents' rows deleted,
new documents' rows added. Rejected documents have no rows, so they are tried again every time.
``force=True`` re-encodes everything.

**Systemic failure.** When a whole file cannot be read, when at least 2 documents were all
rejected for the same reason, or when one reason rejected at least ``max_rejected_share`` of at
least ``systemic_min_documents`` documents, :class:`SystemicFailureError` is raised naming the
partition, the reason and the counts, and neither table is touched.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.errors import DocumentError, LateChunkError
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.pipeline.config import default_batch_tokens, vector_config
from latechunk_dagster.pipeline.memory import release_freed_memory
from latechunk_dagster.pipeline.progress import Progress, ProgressMeter
from latechunk_dagster.sink.rows import chunk_batch, encoded_tokens, lineage, rejected_row, rejection_row
from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_schema, sql_string
from latechunk_dagster.sink.writes import WriteResult, commit_documents, replace_partition
from latechunk_dagster.sources.documents import Document, RejectedRow, fingerprint_of

#: Most batches of documents between the document iterator and the staging file at any time.
IN_FLIGHT_BATCHES = 5

#: Seconds between two progress reports of a partition.
PROGRESS_INTERVAL = 10.0

#: Test hook: when this environment variable names a point, the process SIGKILLs itself there
#: (``before_engine``: before the first engine call; ``during_encode``: in the encode loop, after the
#: first engine call returned and its results went to the staging writer; ``during_commit``: inside the LanceDB
#: commit, after it has read the first staged record batch). For crash-safety tests only.
TEST_KILL_ENV = "LATECHUNK_TEST_KILL_AT"

#: Prefix of a staging directory; the writing process's pid follows it.
STAGE_PREFIX = "latechunk-stage-"

#: ``doc_id`` of the rejection row that stands for a whole shard that could not be read or failed systemically.
UNREADABLE_SHARD = "*"

_END = object()


class SystemicFailureError(LateChunkError):
    """A partition's documents failed for one shared reason; its old rows were kept untouched.

    Attributes:
        partition, reason: where and why; rejected / documents: the counts.
    """

    def __init__(
        self, partition: str, reason: str, rejected: int, documents: int, example: str, *, why: str | None = None
    ) -> None:
        self.partition, self.reason, self.rejected, self.documents = partition, reason, rejected, documents
        why = why or f"{rejected} of {documents} documents rejected for the same reason {reason!r} (e.g. {example})"
        super().__init__(
            f"partition {partition!r} failed: {why}; nothing was written, the partition's old rows are kept"
        )


@dataclass
class PartitionReport:
    """What one :func:`materialize_partition` call did.

    Attributes:
        documents: documents of the partition (good ones, skipped included) plus rejected rows.
        documents_skipped / documents_reencoded / documents_deleted: unchanged (rows kept) /
            encoded this run (new or changed, rejected ones included) / removed from the store.
        documents_new: encoded documents that had no rows before.
        rejected: rejection rows written; rejected_reasons: {reason: count}.
        tokens_encoded: document tokens pooled this run; encoded_tokens: tokens the encoder read
            (> tokens_encoded when windows overlap); windows, windowed_documents: encoder inputs,
            documents longer than the model.
        chunks_written: chunk rows staged and committed this run; partition_rows: rows of the
            partition in the table afterwards.
        engine_seconds: time inside ``chunker.encode`` (the engine thread); prepare_seconds: time
            inside ``chunker.prepare`` (the calling thread); finish_seconds: ``chunker.finish`` and
            the Arrow rows (the writer thread); seconds: wall time of the whole call. With the
            overlap, ``seconds`` approaches the largest of the three, not their sum.
        batches: engine calls; paths: documents per engine path.
        write: the chunk table commit (``None``: nothing changed, no commit).
        fingerprint: :func:`~latechunk_dagster.sources.documents.fingerprint_of` the items read.
        chunked_doc_ids: sorted doc_ids that have rows after the call.
    """

    partition: str
    documents: int = 0
    documents_skipped: int = 0
    documents_reencoded: int = 0
    documents_deleted: int = 0
    documents_new: int = 0
    rejected: int = 0
    rejected_reasons: dict[str, int] = field(default_factory=dict)
    tokens_encoded: int = 0
    encoded_tokens: int = 0
    windows: int = 0
    windowed_documents: int = 0
    chunks_written: int = 0
    partition_rows: int = 0
    engine_seconds: float = 0.0
    prepare_seconds: float = 0.0
    finish_seconds: float = 0.0
    seconds: float = 0.0
    batches: int = 0
    paths: dict[str, int] = field(default_factory=dict)
    write: WriteResult | None = None
    fingerprint: str = ""
    chunked_doc_ids: list[str] = field(default_factory=list)


def materialize_partition(
    chunker: LateChunker,
    documents: Iterable[Document | RejectedRow],
    partition: str,
    strategy: ChunkingStrategy,
    *,
    chunk_table: Any,
    rejected_table: Any,
    run_id: str,
    batch_tokens: int | None = None,
    force: bool = False,
    max_rejected_share: float = 0.5,
    systemic_min_documents: int = 10,
    expected_documents: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    progress_interval: float = PROGRESS_INTERVAL,
    log: logging.Logger | Any | None = None,
    staging_dir: str | Path | None = None,
) -> PartitionReport:
    """Late-chunk one partition as a stream of bounded batches and commit it once (module docstring).

    Args:
        chunker: the engine; ``chunker.chunk`` is called once per batch.
        documents: the partition's documents in any order, with a ``RejectedRow`` for each row that
            made none (:meth:`DocumentStore.iter_shard`); read once, lazily.
        partition: the partition key; strategy: how documents are cut into spans.
        chunk_table / rejected_table: open LanceDB tables (:func:`latechunk_dagster.sink.open_or_create`).
        run_id: recorded on every row written.
        batch_tokens: budget of document tokens per engine call, estimated before tokenization as
            ``chars * ratio + specials`` (ratio 1.0, a bound for WordPiece/BPE, until a batch has
            been encoded; then 1.25 x the observed tokens per char, at most 1.0); a document over
            the budget is a batch of its own. Default :func:`default_batch_tokens`.
        force: re-encode every document, changed or not.
        max_rejected_share, systemic_min_documents: the systemic-failure rule (module docstring).
        expected_documents: an estimate for the progress's time left (``None``: unknown).
        progress: called with a :class:`Progress` at most every ``progress_interval`` seconds and at the end.
        log: a logger (or Dagster's ``context.log``) for the progress lines when ``progress`` is ``None``.
        staging_dir: where the staged rows go (default: the system's temp directory).

    Returns:
        A :class:`PartitionReport`.

    Raises:
        SystemicFailureError: the partition's documents failed for one reason; nothing written.
        Exception: anything the iterator or the engine raises; nothing written.
    """
    t_start = time.perf_counter()
    budget = int(batch_tokens or default_batch_tokens(chunker))
    if budget <= 0:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    config = vector_config(chunker, strategy)
    existing = _stored_documents(chunk_table, partition)
    now = datetime.now(UTC)
    dim = chunker.embedding_dim
    row_lineage = lineage(chunker, strategy, run_id, now, config)
    if progress is None and log is not None:
        progress = lambda p: log.info(p.describe())  # noqa: E731
    meter = ProgressMeter(partition, expected_documents, progress, progress_interval)
    report = PartitionReport(partition)
    state = _State()
    estimator = _TokenEstimate(_special_tokens(chunker))

    remove_stale_staging(staging_dir)
    with (
        tempfile.TemporaryDirectory(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=staging_dir) as tmp,
        contextlib.ExitStack() as opened,
    ):
        staged = Path(tmp) / "rows.arrows"
        schema = chunk_schema(dim)
        to_engine: queue.Queue = queue.Queue(maxsize=1)
        to_writer: queue.Queue = queue.Queue(maxsize=1)
        stop = threading.Event()

        def fail(exc: BaseException) -> None:
            if state.thread_error is None:
                state.thread_error = exc
            stop.set()

        def encode() -> None:
            try:
                while (item := _get(to_engine, stop)) is not _END:
                    batch, prepared = item
                    _test_kill_point("before_engine")
                    t0 = time.perf_counter()
                    encoded = chunker.encode(prepared)
                    report.engine_seconds += time.perf_counter() - t0
                    report.batches += 1
                    _put(to_writer, (batch, encoded), stop)
                    del item, prepared, encoded
                    _test_kill_point("during_encode")
                _put(to_writer, _END, stop)
            except _Stopped:
                return  # another thread failed and raises its own error
            except BaseException as exc:
                fail(exc)

        def write() -> None:
            try:
                with pa.OSFile(str(staged), "wb") as sink, pa.ipc.new_stream(sink, schema) as stream:
                    while (item := _get(to_writer, stop)) is not _END:
                        batch, encoded = item
                        t0 = time.perf_counter()
                        results = chunker.finish(encoded, errors="return")
                        del item, encoded
                        good = _account(batch, results, chunker, report, state, partition, run_id, now)
                        if good:
                            rows = chunk_batch(good, partition, row_lineage, dim)
                            stream.write_batch(rows)
                            report.chunks_written += rows.num_rows
                            estimator.observe(good)
                        report.finish_seconds += time.perf_counter() - t0
                        meter.add(len(batch), sum(len(r.token_ids) for _, r in good))
                        del results, good
                        release_freed_memory()  # the batch's token states are freed: hand the pages back
            except _Stopped:
                return
            except BaseException as exc:
                fail(exc)

        def submit(batch: list[Document]) -> None:
            t0 = time.perf_counter()
            prepared = chunker.prepare([d.text for d in batch], strategy, doc_ids=[d.doc_id for d in batch])
            report.prepare_seconds += time.perf_counter() - t0
            _put(to_engine, (batch, prepared), stop)

        engine = threading.Thread(target=encode, name=f"latechunk-engine-{partition}", daemon=True)
        writer = threading.Thread(target=write, name=f"latechunk-write-{partition}", daemon=True)
        engine.start()
        writer.start()
        try:
            batch: list[Document] = []
            tokens = 0
            for item in documents:
                if stop.is_set():
                    break
                state.items_read += 1
                state.fingerprint_pairs.append(item)
                if isinstance(item, RejectedRow):
                    state.reader_rejections.append(item)
                    continue
                state.present.add(item.doc_id)
                if not force and existing.get(item.doc_id) == (item.sha256, config):
                    state.skipped.add(item.doc_id)
                    meter.add(1, 0)
                    continue
                cost = estimator.estimate(item.text)
                if batch and tokens + cost > budget:
                    submit(batch)
                    batch, tokens = [], 0
                batch.append(item)
                tokens += cost
            if batch and not stop.is_set():
                submit(batch)
            del batch
            _put(to_engine, _END, stop)
            while engine.is_alive() or writer.is_alive():
                engine.join(timeout=0.1)
                writer.join(timeout=0.1)
        except BaseException:
            stop.set()
            raise
        finally:
            engine.join(timeout=5)
            writer.join(timeout=5)
        if state.thread_error is not None:
            raise state.thread_error

        for row in state.reader_rejections:
            state.rejections.append(rejected_row(row, partition, run_id, now))
            report.rejected_reasons[row.reason] = report.rejected_reasons.get(row.reason, 0) + 1
        report.documents = state.items_read
        report.rejected = len(state.rejections)
        _check_systemic(partition, state, report, max_rejected_share, systemic_min_documents)
        if state.items_read == 0 and existing:
            # a shard that reads empty while its partition holds documents is far more often a
            # truncated file than a deliberate deletion (which removes the shard: the sensor and
            # `sync-partitions` then drop the partition and its rows)
            raise SystemicFailureError(
                partition,
                "empty_shard",
                0,
                0,
                "",
                why=f"the shard read 0 documents but the partition holds {len(existing)} (a truncated file?); "
                "to drop them, remove the shard from the store",
            )

        removed = set(existing) - state.present
        replaced = (state.attempted & set(existing)) | removed
        kept = state.skipped

        def staged_rows() -> pa.RecordBatchReader:  # opened afresh for each commit attempt
            reader = pa.ipc.open_stream(opened.enter_context(pa.OSFile(str(staged), "rb")))
            if os.environ.get(TEST_KILL_ENV) == "during_commit":
                return pa.RecordBatchReader.from_batches(reader.schema, _killing_after_first(reader))
            return reader

        rows = staged_rows if report.chunks_written else None
        report.write = commit_documents(chunk_table, partition, rows, replaced=replaced, kept=kept)
        replace_partition(
            rejected_table,
            "rejection_id",
            partition,
            pa.Table.from_pylist(state.rejections, schema=REJECTED_SCHEMA),
        )

    report.documents_skipped = len(state.skipped)
    report.documents_reencoded = len(state.attempted)
    report.documents_new = len(state.attempted - set(existing))
    report.documents_deleted = len(removed)
    report.fingerprint = fingerprint_of(state.fingerprint_pairs)
    report.chunked_doc_ids = sorted(state.skipped | state.chunked)
    report.partition_rows = chunk_table.count_rows(f"partition = {sql_string(partition)}")
    report.seconds = time.perf_counter() - t_start
    meter.finish()
    return report


def record_shard_failure(rejected_table: Any, partition: str, reason: str, detail: str, run_id: str) -> None:
    """Replace the partition's rejection rows with one :data:`UNREADABLE_SHARD` row (``reason``, ``detail``).

    What an orchestrator records when :func:`materialize_partition` raised for a whole shard (it
    could not be read, or :class:`SystemicFailureError`): the chunk rows stay as they were, and the
    ``documents_accounted`` check fails for the partition until a run succeeds (that run replaces
    the partition's rejection rows again).
    """
    row = rejection_row(UNREADABLE_SHARD, "", partition, reason, detail, run_id, datetime.now(UTC))
    replace_partition(rejected_table, "rejection_id", partition, pa.Table.from_pylist([row], schema=REJECTED_SCHEMA))


def remove_stale_staging(staging_dir: str | Path | None = None) -> list[Path]:
    """Remove staging directories left by processes of this host that no longer run (e.g. killed).

    Returns:
        The directories removed.
    """
    removed = []
    for path in Path(staging_dir or tempfile.gettempdir()).glob(f"{STAGE_PREFIX}*-*"):
        pid = path.name[len(STAGE_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _test_kill_point(point: str) -> None:
    """The :data:`TEST_KILL_ENV` hook: SIGKILL this process when the variable names ``point``."""
    if os.environ.get(TEST_KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _killing_after_first(reader: pa.RecordBatchReader):  # noqa: ANN202
    """Yields ``reader``'s first batch, then SIGKILLs the process when LanceDB asks for more."""
    yield from itertools.islice(reader, 1)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class _State:
    items_read: int = 0
    present: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    attempted: set[str] = field(default_factory=set)
    chunked: set[str] = field(default_factory=set)
    reader_rejections: list[RejectedRow] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    fingerprint_pairs: list[Document | RejectedRow] = field(default_factory=list)
    thread_error: BaseException | None = None

    def __post_init__(self) -> None:
        # fingerprint_of needs only (doc_id, sha256): keep light records, not the texts
        self.fingerprint_pairs = _LightList()  # type: ignore[assignment]


class _LightList(list):
    """Keeps (doc_id, sha256) stand-ins instead of whole documents (memory stays per document, not per text)."""

    def append(self, item: Document | RejectedRow) -> None:  # type: ignore[override]
        super().append(Document(item.doc_id, "", item.sha256) if isinstance(item, Document) else item)


@dataclass
class _Failure:
    exc: BaseException


class _TokenEstimate:
    """Document tokens of a text before tokenizing it: ``chars * ratio + specials``."""

    def __init__(self, specials: int) -> None:
        self.specials = specials
        self.ratio = 1.0
        self._chars = 0
        self._tokens = 0

    def estimate(self, text: str) -> int:
        return int(len(text) * self.ratio) + self.specials

    def observe(self, good: list[tuple[Document, ChunkedDocument]]) -> None:
        self._chars += sum(len(doc.text) for doc, _ in good)
        self._tokens += sum(max(len(res.token_ids) - self.specials, 0) for _, res in good)
        if self._chars:
            self.ratio = min(1.0, 1.25 * self._tokens / self._chars)


def _special_tokens(chunker: LateChunker) -> int:
    """Special and prefix tokens every document gets."""
    prefix = len(chunker.tokenizer(chunker.prefix, add_special_tokens=False)["input_ids"]) if chunker.prefix else 0
    return prefix + chunker.tokenizer.num_special_tokens_to_add(pair=False)


def _stored_documents(table: Any, partition: str) -> dict[str, tuple[str, str | None]]:
    """{doc_id: (doc_sha256, vector_config)} of the partition's stored documents (their first chunk)."""
    where = f"partition = {sql_string(partition)} AND chunk_index = 0"
    rows = table.search().where(where).select(["doc_id", "doc_sha256", "vector_config"]).limit(None).to_arrow()
    return dict(
        zip(
            rows.column("doc_id").to_pylist(),
            zip(rows.column("doc_sha256").to_pylist(), rows.column("vector_config").to_pylist()),
        )
    )


def _account(
    batch: list[Document],
    results: list,
    chunker: LateChunker,
    report: PartitionReport,
    state: _State,
    partition: str,
    run_id: str,
    now: datetime,
) -> list[tuple[Document, ChunkedDocument]]:
    good: list[tuple[Document, ChunkedDocument]] = []
    for doc, res in zip(batch, results):
        state.attempted.add(doc.doc_id)
        if isinstance(res, DocumentError):
            state.rejections.append(
                rejection_row(doc.doc_id, doc.sha256, partition, res.reason, res.detail, run_id, now)
            )
            report.rejected_reasons[res.reason] = report.rejected_reasons.get(res.reason, 0) + 1
            continue
        state.chunked.add(doc.doc_id)
        report.tokens_encoded += len(res.token_ids)
        report.encoded_tokens += encoded_tokens(chunker, res)
        report.windows += res.windows
        report.windowed_documents += res.windows > 1
        report.paths[res.path] = report.paths.get(res.path, 0) + 1
        good.append((doc, res))
    return good


def _check_systemic(
    partition: str, state: _State, report: PartitionReport, max_share: float, min_documents: int
) -> None:
    for row in state.reader_rejections:
        if row.reason == "unreadable_file":
            raise SystemicFailureError(partition, row.reason, 1, report.documents, row.detail)
    if not state.rejections:
        return
    reason, count = Counter(r["reason"] for r in state.rejections).most_common(1)[0]
    total = report.documents
    if (count == total and total >= 2) or (total >= min_documents and count / total >= max_share):
        example = next(r for r in state.rejections if r["reason"] == reason)
        raise SystemicFailureError(partition, reason, count, total, f"{example['doc_id']!r}: {example['detail']}")


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
                raise _Stopped from None


class _Stopped(Exception):
    """Raised in a pipeline thread waiting on a queue after another thread failed."""
