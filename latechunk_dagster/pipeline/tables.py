"""The chunk tables of a partition's run: one per granularity, what each holds, and one commit each.

A run of one strategy writes one table (the granularity ``""``); a run of several granularities
writes one table per granularity (:func:`~latechunk_dagster.sink.schema.granularity_table` names
them), each with its own stored documents and vector configuration
(:mod:`latechunk_dagster.pipeline.run`). :func:`commit_tables` commits them one at a time, finest
first, each in ONE streamed ``merge_insert`` (:func:`~latechunk_dagster.sink.writes.commit_documents`);
LanceDB has no transaction over two tables, so a process killed between two of them leaves some
tables new and the others old, and the next run re-encodes only what a table lacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.granularities import SINGLE, Granularities
from latechunk_dagster.pipeline.config import is_single, normalised
from latechunk_dagster.pipeline.killpoints import killing_after_first, kills_here
from latechunk_dagster.pipeline.run import PartitionRun
from latechunk_dagster.sink.schema import chunk_schema, sql_in, sql_string
from latechunk_dagster.sink.writes import commit_documents


def tables_of_run(granularities: Granularities | ChunkingStrategy, chunk_table: Any) -> dict[str, Any]:
    """``{granularity: open table}``, finest first (``{"": chunk_table}`` for one strategy).

    Args:
        granularities: as the run's edge normalised them (:class:`~latechunk_dagster.core.granularities.Granularities`).

    Raises:
        ValueError: ``chunk_table`` a mapping for one strategy, or not a mapping of the same keys for several.
    """
    granularities = normalised(granularities)
    if is_single(granularities):
        if isinstance(chunk_table, Mapping):
            raise ValueError("chunk_table is a mapping of tables, but strategy is one strategy: give one open table")
        return {SINGLE: chunk_table}
    if not isinstance(chunk_table, Mapping) or set(chunk_table) != set(granularities):
        got = sorted(chunk_table) if isinstance(chunk_table, Mapping) else type(chunk_table).__name__
        raise ValueError(
            f"several granularities {list(granularities)} need chunk_table={{name: open table}} with the same "
            f"names, got {got} (table names: latechunk_dagster.sink.schema.granularity_table)"
        )
    return {g: chunk_table[g] for g in granularities}


class StoredDocuments(dict):
    """``{doc_id: (doc_sha256, vector_config)}`` of a partition's stored documents, with ``stamps``:
    ``{doc_id: source_stamp}`` of those whose rows carry one (:mod:`latechunk_dagster.sources.stamps`;
    none in a table written before the column)."""

    def __init__(self, pairs: Any = (), stamps: dict[str, str] | None = None) -> None:
        super().__init__(pairs)
        self.stamps: dict[str, str] = stamps or {}


def stored_documents(table: Any, partition: str) -> StoredDocuments:
    """The partition's stored documents (their first chunk): :class:`StoredDocuments`, in one query."""
    where = f"partition = {sql_string(partition)} AND chunk_index = 0"
    stamped = "source_stamp" in table.schema.names
    columns = ["doc_id", "doc_sha256", "vector_config", *(["source_stamp"] if stamped else [])]
    rows = table.search().where(where).select(columns).limit(None).to_arrow()
    ids = rows.column("doc_id").to_pylist()
    pairs = zip(ids, zip(rows.column("doc_sha256").to_pylist(), rows.column("vector_config").to_pylist()))
    stamps = {d: s for d, s in zip(ids, rows.column("source_stamp").to_pylist()) if s} if stamped else {}
    return StoredDocuments(pairs, stamps)


def commit_tables(
    run: PartitionRun, staged: dict[str, Path], opened: contextlib.ExitStack, tables: dict[str, Any]
) -> set[str]:
    """ONE commit per granularity table (finest first) streamed from its staging file; the doc_ids
    removed from the store (their rows deleted from every table).

    In each table: the rows of the documents it needed are replaced, the rows of the documents it
    did not need stay (unchanged there, or encoded for another table), the rows of the documents
    rejected now or gone from the store are deleted. ``run.report`` gets each table's commit
    (``granularities[g].write``; ``write``: the first table's).
    """
    state, report = run.state, run.report
    removed: set[str] = set()
    for g, table in tables.items():
        existing = set(run.existing[g])
        kept = state.skipped | state.kept.get(g, set())
        gone = existing - state.present
        removed |= gone
        replaced = ((state.attempted & existing) - kept) | gone

        def staged_rows(path: Path = staged[g]) -> pa.RecordBatchReader:  # opened afresh for each commit attempt
            reader = pa.ipc.open_stream(opened.enter_context(pa.OSFile(str(path), "rb")))
            if kills_here("during_commit", run.partition):
                return pa.RecordBatchReader.from_batches(reader.schema, killing_after_first(reader))
            return reader

        rows = staged_rows if report.granularities[g].chunks_written else None
        stamps = {d: s for d, s in state.restamp.items() if getattr(run.existing[g], "stamps", {}).get(d) != s}
        rows = with_restamped_rows(table, run.partition, stamps, run.chunker.embedding_dim, rows)
        write = commit_documents(table, run.partition, rows, replaced=replaced, kept=kept)
        report.granularities[g].write = write
        if g == next(iter(tables)):
            report.write = write
    return removed


#: Documents whose rows are read back per query when their source stamps are written (:func:`with_restamped_rows`).
RESTAMP_BATCH = 256


def with_restamped_rows(
    table: Any,
    partition: str,
    stamps: Mapping[str, str],
    dim: int,
    rows: Callable[[], pa.RecordBatchReader] | None,
) -> Callable[[], pa.RecordBatchReader] | None:
    """``rows`` followed by the stored rows of the documents of ``stamps`` with their new source stamp
    (a touched but identical file, or one whose stamp was unsure: kept, not re-encoded, its stamp
    recorded in the same one commit so the next run does not fetch it). Read back from ``table``
    ``RESTAMP_BATCH`` documents a query, as a stream; ``rows`` itself when ``stamps`` is empty."""
    if not stamps:
        return rows
    schema = chunk_schema(dim)
    ids = sorted(stamps)

    def restamped() -> Iterator[pa.RecordBatch]:
        for k in range(0, len(ids), RESTAMP_BATCH):
            where = f"partition = {sql_string(partition)} AND {sql_in('doc_id', ids[k : k + RESTAMP_BATCH])}"
            got = table.search().where(where).select(schema.names).limit(None).to_arrow()
            column = pa.array([stamps[d] for d in got.column("doc_id").to_pylist()], pa.string())
            got = got.set_column(got.schema.get_field_index("source_stamp"), "source_stamp", column)
            yield from got.select(schema.names).cast(schema).to_batches()

    def source() -> pa.RecordBatchReader:
        first = rows() if rows is not None else None
        batches = iter(()) if first is None else iter(first)
        return pa.RecordBatchReader.from_batches(schema, _chain(batches, restamped()))

    return source


def _chain(*parts: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for part in parts:
        yield from part
