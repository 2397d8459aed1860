"""One partition materialized as a bounded stream: read, skip unchanged, encode, pool, stage, one commit.

Flow of :func:`materialize_partition` (three threads, bounded queues between them)::

    calling thread  documents -> skip unchanged (doc_sha256 + vector_config) -> batches of at most
                    ``batch_tokens`` estimated document tokens -> chunker.prepare(batch)
                    (check, tokenize, spans, window plans)
    engine thread   chunker.encode(prepared)                    (the engine; one call at a time)
    writer thread   finish_rows: chunker.pool_results(encoded) (means, head) -> Arrow rows
                    (sink.rows.chunk_batch) -> counted (pipeline.accounting) -> staged to a
                    local Arrow IPC file
    then            systemic-failure check -> ONE LanceDB commit streamed from the staged file

With ``host_workers >= 1`` the same three threads only move batches: prepare runs in a worker
process and finish with the Arrow rows in the same worker (the same ``finish_rows``), the engine's
rows passing through shared memory (:mod:`latechunk_dagster.pipeline.hostpool`); order, staging and
the one commit are unchanged.

In the code, one step each: ``_begin`` (budget, vector configuration, stored documents; the run's
bookkeeping is :mod:`latechunk_dagster.pipeline.run`), the stream (:mod:`latechunk_dagster.pipeline.stream`:
one loop of three threads over a local or pooled host), ``_count_reader_rejections``,
``_check_systemic``, ``_commit``, ``_final_report``. Crash-test kill points:
:mod:`latechunk_dagster.pipeline.killpoints`.

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

**Two tables, two commits.** The chunk rows and the rejection records live in two LanceDB tables,
and LanceDB commits one table at a time (no transaction spans two tables), so the chunk-table
commit comes first and the rejected-table commit (the whole partition's rejections, replaced)
second. A process killed between them leaves the chunk table complete and new (what search
reads) and the rejected table as the previous run left it: a document rejected now but chunked
before has no rows and no record (``documents_accounted`` lists it as ``missing``), and one
chunked now but rejected before has both (``chunked_and_rejected``), so that blocking check fails
for the partition until the next run. The next run of the partition repairs it without
re-encoding anything that was committed: its chunk rows match the store and are skipped, the
rejected documents are tried again, and its rejected-table commit replaces the stale records.

**Several granularities** (``strategy={name: strategy}``, issue 29): each document is still
tokenized and encoded once, and every granularity's chunks are pooled from that pass
(``LateChunker.pool_results``); each granularity has its own table, staging file and
commit (finest first, :mod:`latechunk_dagster.pipeline.tables`), then the one rejected table. The
incremental rule below holds per table: a document is encoded when any table needs it and its
rows go only to the tables that need them (:mod:`latechunk_dagster.pipeline.run`).

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
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.errors import LateChunkError
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.pipeline.accounting import GranularityReport, PartitionReport
from latechunk_dagster.pipeline.config import (
    check_host_workers,
    conversion_workers,
    default_batch_tokens,
    default_host_workers,
    granularity_configs,
    host_workers_env,
)
from latechunk_dagster.pipeline.hostpool import pool_refusal
from latechunk_dagster.pipeline.killpoints import TEST_KILL_ENV as TEST_KILL_ENV  # re-exported
from latechunk_dagster.pipeline.killpoints import TEST_KILL_ONCE_ENV as TEST_KILL_ONCE_ENV  # re-exported
from latechunk_dagster.pipeline.killpoints import kill_point
from latechunk_dagster.pipeline.progress import Progress, ProgressMeter
from latechunk_dagster.pipeline.run import PartitionRun, TokenEstimate, special_tokens
from latechunk_dagster.pipeline.stream import LocalHost, PoolHost, Stream
from latechunk_dagster.pipeline.tables import commit_tables, stored_documents, tables_of_run
from latechunk_dagster.sink.rows import lineage, rejected_row, rejection_row
from latechunk_dagster.sink.schema import REJECTED_SCHEMA, sql_string
from latechunk_dagster.sink.writes import replace_partition
from latechunk_dagster.sources.documents import READ_ERRORS, Document, RejectedRow, fingerprint_of
from latechunk_dagster.sources.listing import INCOMPLETE_READS
from latechunk_dagster.sources.text_files import UnconvertedFile

#: Most batches of documents between the document iterator and the staging file at any time.
IN_FLIGHT_BATCHES = 5

#: Seconds between two progress reports of a partition.
PROGRESS_INTERVAL = 10.0

#: Prefix of a staging directory; the writing process's pid follows it.
STAGE_PREFIX = "latechunk-stage-"

#: ``doc_id`` of the rejection row that stands for a whole shard that could not be read or failed systemically.
UNREADABLE_SHARD = "*"


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


def materialize_partition(
    chunker: LateChunker,
    documents: Iterable[Document | RejectedRow | UnconvertedFile],
    partition: str,
    strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy],
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
    host_workers: int | None = None,
    granularities: Granularities | None = None,
) -> PartitionReport:
    """Late-chunk one partition as a stream of bounded batches and commit it once (module docstring).

    Args:
        chunker: the engine; each batch goes through ``chunker.prepare`` (calling thread),
            ``chunker.encode`` (engine thread) and ``chunker.pool_results`` (writer thread).
        documents: the partition's documents in any order, with a ``RejectedRow`` for each row that
            made none (:meth:`DocumentStore.iter_shard`); read once, lazily. A document file not yet
            converted (:class:`~latechunk_dagster.sources.text_files.UnconvertedFile`: ``iter_shard(...,
            defer_conversion=True)``) is converted here, in the host workers when there are any.
        partition: the partition key.
        strategy: how documents are cut into spans: one strategy, or several granularities
            ``{name: strategy}`` finest first (:meth:`~latechunk_dagster.core.granularities.Granularities.of`),
            all pooled from one encoder pass per document (:mod:`~latechunk_dagster.pipeline.run`:
            which tables need which documents). With a ``GivenChunks`` granularity each document's
            own chunks (:attr:`Document.chunks <latechunk_dagster.sources.documents.Document.chunks>`)
            are passed to ``prepare``.
        chunk_table / rejected_table: open LanceDB tables (:func:`latechunk_dagster.sink.open_or_create`);
            with several granularities ``chunk_table`` is ``{name: open table}`` with the same keys
            (their names by :func:`~latechunk_dagster.sink.schema.granularity_table`), each committed
            once (finest first), then the one rejected table.
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
        host_workers: worker processes for the host work (prepare, and finish with the Arrow rows;
            :mod:`latechunk_dagster.pipeline.hostpool`); ``0``: in this process, in the calling and
            writer threads. Default :func:`~latechunk_dagster.pipeline.config.default_host_workers`
            (``LATECHUNK_HOST_WORKERS``, else 0); with neither set, document files are still converted
            in :func:`~latechunk_dagster.pipeline.config.conversion_workers` worker processes (started at
            the first file), never in this process; ``0`` given converts them in the calling thread.
            The results (vectors, ranges, row ids, order) are the same either way.
        granularities: ``strategy`` as the caller's edge normalised it already
            (:class:`~latechunk_dagster.core.granularities.Granularities`; ``run_shard`` passes its own);
            ``None``: normalised here, once.

    Returns:
        A :class:`~latechunk_dagster.pipeline.accounting.PartitionReport`.

    Raises:
        SystemicFailureError: the partition's documents failed for one reason; nothing written.
        HostWorkerError: a host worker process died; nothing written.
        TypeError, ValueError: a bad strategy mapping
            (:meth:`~latechunk_dagster.core.granularities.Granularities.of`).
        ValueError: ``chunk_table`` is a mapping for one strategy, or not a mapping with the strategies'
            keys for several; ``host_workers`` is not an integer >= 0, or given while the worker
            processes cannot take the
            chunker or the strategy (:func:`~latechunk_dagster.pipeline.hostpool.pool_refusal`; by
            default the host work then stays in this process, with a warning).
        Exception: anything the iterator or the engine raises; nothing written.
    """
    if granularities is None:  # the API's edge: the union normalised once, then passed down
        granularities = Granularities.of(strategy)
    if progress is None and log is not None:
        progress = lambda p: log.info(p.describe())  # noqa: E731
    workers = default_host_workers() if host_workers is None else check_host_workers(host_workers)
    why_not = pool_refusal(chunker, strategy) if workers else None
    if why_not is not None:
        if host_workers is not None:
            raise ValueError(f"host_workers={host_workers}: {why_not}; pass host_workers=0 to work in this process")
        logging.getLogger(__name__).warning(
            "partition %r: host work stays in this process (default host_workers=%d): %s", partition, workers, why_not
        )
        workers = 0
    # no setting given: document files are converted in worker processes all the same (issue 49 item 3)
    defaulted = host_workers is None and host_workers_env() is None and why_not is None
    converters = conversion_workers() if defaulted and pool_refusal(chunker, strategy) is None else 0
    tables = tables_of_run(granularities, chunk_table)
    meter = ProgressMeter(partition, expected_documents, progress, progress_interval)
    run = _begin(chunker, partition, strategy, granularities, tables, run_id, batch_tokens, force, meter)
    remove_stale_staging(staging_dir)
    with (
        tempfile.TemporaryDirectory(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=staging_dir) as tmp,
        contextlib.ExitStack() as opened,
    ):
        staged = {g: Path(tmp) / f"rows-{k}.arrows" for k, g in enumerate(tables)}
        # read, skip unchanged, encode, pool, stage
        host = PoolHost(run, workers) if workers else LocalHost(run, converters)
        Stream(run, staged, host).stream(documents)
        _count_reader_rejections(run)
        _check_systemic(run, max_rejected_share, systemic_min_documents)
        removed = _commit(run, staged, opened, tables, rejected_table)
    return _final_report(run, removed, tables)


# -- the steps of one call, in order -------------------------------------------------------------


def _begin(
    chunker: LateChunker,
    partition: str,
    strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy],
    granularities: Granularities,
    tables: dict[str, Any],
    run_id: str,
    batch_tokens: int | None,
    force: bool,
    meter: ProgressMeter,
) -> PartitionRun:
    """Step 1: the batch budget (checked), each granularity's vector configuration, lineage and stored documents."""
    t_start = time.perf_counter()
    budget = int(batch_tokens or default_batch_tokens(chunker))
    if budget <= 0:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    settings = chunker.settings
    names = list(granularities)
    parents = {g: (names[k + 1] if k + 1 < len(names) else None) for k, g in enumerate(names)}
    configs = granularity_configs(settings, granularities)
    now = datetime.now(UTC)
    report = PartitionReport(partition)
    report.granularities = {g: GranularityReport(table=getattr(t, "name", "")) for g, t in tables.items()}
    return PartitionRun(
        chunker=chunker,
        partition=partition,
        strategy=strategy,
        run_id=run_id,
        force=force,
        budget=budget,
        configs=configs,
        existing={g: stored_documents(t, partition) for g, t in tables.items()},
        now=now,
        lineages={g: lineage(settings, s, run_id, now, configs[g], g) for g, s in granularities.items()},
        parents=parents,
        meter=meter,
        estimator=TokenEstimate(special_tokens(chunker)),
        t_start=t_start,
        report=report,
    )


def _count_reader_rejections(run: PartitionRun) -> None:
    """Step 3: the rows the reader could not make into documents join the rejections; the totals."""
    state, report = run.state, run.report
    for row in state.reader_rejections:
        state.rejections.append(rejected_row(row, run.partition, run.run_id, run.now))
        report.count_rejection(row.reason)
    report.documents = state.items_read
    report.rejected = len(state.rejections)


def _check_systemic(run: PartitionRun, max_share: float, min_documents: int) -> None:
    """Step 4: the systemic-failure rule (module docstring); raises before anything is written."""
    state, partition, total = run.state, run.partition, run.report.documents
    for row in state.reader_rejections:
        # a file that cannot be read, or one cut off mid-write: the rows after the cut would read
        # as deleted documents, so the partition keeps its old rows
        if row.reason in INCOMPLETE_READS and not row.file_read:  # a converter's refusal stands alone
            raise SystemicFailureError(partition, row.reason, 1, total, row.detail)
    if state.rejections:
        reason, count = Counter(r["reason"] for r in state.rejections).most_common(1)[0]
        if (count == total and total >= 2) or (total >= min_documents and count / total >= max_share):
            example = next(r for r in state.rejections if r["reason"] == reason)
            raise SystemicFailureError(partition, reason, count, total, f"{example['doc_id']!r}: {example['detail']}")
    stored = run.stored_ids()
    if state.items_read == 0 and stored:
        # a shard that reads empty while its partition holds documents is far more often a
        # truncated file than a deliberate deletion (which removes the shard: the sensor and
        # `sync-partitions` then drop the partition and its rows)
        raise SystemicFailureError(
            partition,
            "empty_shard",
            0,
            0,
            "",
            why=f"the shard read 0 documents but the partition holds {len(stored)} (a truncated file?); "
            "to drop them, remove the shard from the store",
        )


def _commit(
    run: PartitionRun,
    staged: dict[str, Path],
    opened: contextlib.ExitStack,
    tables: dict[str, Any],
    rejected_table: Any,
) -> set[str]:
    """Step 5: ONE commit per granularity table (finest first) streamed from its staging file
    (:func:`~latechunk_dagster.pipeline.tables.commit_tables`), then the rejections; the removed doc_ids."""
    removed = commit_tables(run, staged, opened, tables)
    kill_point("between_commits", run.partition)
    replace_partition(
        rejected_table,
        "rejection_id",
        run.partition,
        pa.Table.from_pylist(run.state.rejections, schema=REJECTED_SCHEMA),
    )
    return removed


def _final_report(run: PartitionRun, removed: set[str], tables: dict[str, Any]) -> PartitionReport:
    """Step 6: the document counts, the partition's rows afterwards (per table and in all), the wall
    time; the last progress line."""
    state, report = run.state, run.report
    report.documents_skipped = len(state.skipped)
    report.documents_reencoded = len(state.attempted)
    report.documents_new = len(state.attempted - run.stored_ids())
    report.documents_deleted = len(removed)
    report.fingerprint = fingerprint_of(state.fingerprint_pairs)
    report.chunked_doc_ids = sorted(state.skipped | state.chunked)
    for g, table in tables.items():
        part = report.granularities[g]
        part.partition_rows = table.count_rows(f"partition = {sql_string(run.partition)}")
        part.version = int(table.version)
    report.partition_rows = sum(part.partition_rows for part in report.granularities.values())
    report.seconds = time.perf_counter() - run.t_start
    run.meter.complete()
    return report


#: What :func:`materialize_partition` raises for a whole shard's data, before either table is
#: touched: the shard cannot be read (:data:`~latechunk_dagster.sources.documents.READ_ERRORS`:
#: gone, not a table, a column missing, a file unreadable or not Parquet) or its documents failed
#: for one reason (:class:`SystemicFailureError`).
#: An orchestrator catches these, keeps the shard's old rows and records :func:`record_shard_failure`;
#: anything else (a bad setting's ``ValueError``, a programming error's ``TypeError``) fails the run.
#: The Dagster asset and the Airflow task share this one list.
SHARD_ERRORS: tuple[type[Exception], ...] = (*READ_ERRORS, SystemicFailureError)


def record_shard_failure(rejected_table: Any, partition: str, exc: Exception, run_id: str) -> str:
    """Replace the partition's rejection rows with one :data:`UNREADABLE_SHARD` row for ``exc``.

    What an orchestrator records when :func:`materialize_partition` raised one of
    :data:`SHARD_ERRORS`: the chunk rows stay as they were, and the ``documents_accounted`` check
    fails for the partition until a run succeeds (that run replaces the partition's rejection rows
    again). The row's detail is ``str(exc)``.

    Returns:
        The recorded reason: ``"systemic_failure"`` for :class:`SystemicFailureError`, else
        ``"unreadable_shard"``.
    """
    reason = "systemic_failure" if isinstance(exc, SystemicFailureError) else "unreadable_shard"
    row = rejection_row(UNREADABLE_SHARD, "", partition, reason, str(exc), run_id, datetime.now(UTC))
    replace_partition(rejected_table, "rejection_id", partition, pa.Table.from_pylist([row], schema=REJECTED_SCHEMA))
    return reason


# -- helpers -------------------------------------------------------------------------------------


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
