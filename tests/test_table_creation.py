"""Opening and creating tables (issue 39 C6, C7, C8): racing creates lose no rows, every page of
``list_tables`` is read, and a table a user changed is kept or refused naming the columns.

Real local LanceDB throughout; the one stand-in is :class:`PaginatedCloudFake`, a connection that
answers ``list_tables`` a page at a time as LanceDB Cloud does (Cloud cannot run here).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest

from latechunk_dagster import sink
from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.granularity_tables import granularity_tables
from latechunk_dagster.sink.writes import delete_partitions, stored_partitions


def rejected_rows(partition: str, ids: list[str]) -> pa.Table:
    """Rows of the rejected-documents table (the pipeline's second table; no engine needed)."""
    n = len(ids)
    return pa.table(
        {
            "rejection_id": ids,
            "doc_id": [f"doc-{i}" for i in ids],
            "partition": [partition] * n,
            "reason": ["empty"] * n,
            "detail": ["no text"] * n,
            "doc_sha256": ["0" * 64] * n,
            "run_id": ["run"] * n,
            "rejected_at": [datetime(2026, 12, 4, tzinfo=UTC)] * n,
        },
        schema=sink.REJECTED_SCHEMA,
    )


# --- C8: racing creates ------------------------------------------------------------------------


def test_racing_creates_and_first_commits_lose_no_rows(tmp_path: Path) -> None:
    """6 threads, each with its own connection, create the same missing table at once and commit one
    partition each, 40 tables over. Unfixed, lance landed a late create as an Overwrite over other
    writers' rows (1 table in 100 with 4 threads lost 3 of 4 rows) or failed the create with
    "was not found" / "preempted": every writer must succeed and every row must be there."""
    writers, tables = 6, 40
    failures: list[str] = []
    for k in range(tables):
        barrier = threading.Barrier(writers)

        def write(i: int, name: str = f"t{k}", barrier: threading.Barrier = barrier) -> None:
            db = lancedb.connect(str(tmp_path))
            barrier.wait()
            try:
                table = sink.open_or_create(db, name, sink.REJECTED_SCHEMA)
                sink.replace_partition(table, "rejection_id", f"p{i}", rejected_rows(f"p{i}", [f"{name}-{i}"]))
            except Exception as exc:  # collected: a failed writer is a failure of the test
                failures.append(f"{name} writer {i}: {exc}")

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = lancedb.connect(str(tmp_path)).open_table(f"t{k}").to_arrow().column("rejection_id").to_pylist()
        assert sorted(ids) == sorted(f"t{k}-{i}" for i in range(writers)), f"table t{k}"
    assert failures == []


class LateCreate:
    """A real local LanceDB connection whose ``create_table`` lands the way a racing create does:
    after a rival writer created the table and committed its first partition, as an Overwrite
    (``mode="overwrite"`` commits the same transaction lance commits for a create that lost the race;
    the race itself is timing this test cannot pin, :func:`test_racing_creates_and_first_commits_lose_no_rows`
    runs it for real)."""

    def __init__(self, uri: str) -> None:
        self.db = lancedb.connect(uri)
        self.uri = uri

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def create_table(self, name: str, *, schema: pa.Schema) -> Any:
        rival = lancedb.connect(self.uri).create_table(name, schema=schema)
        sink.replace_partition(rival, "rejection_id", "rival", rejected_rows("rival", ["r1", "r2"]))
        return self.db.create_table(name, schema=schema, mode="overwrite")


def test_a_create_that_lands_over_a_rivals_rows_puts_them_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = LateCreate(str(tmp_path))
    table = sink.open_or_create(db, "rejected", sink.REJECTED_SCHEMA)
    assert sorted(table.to_arrow().column("rejection_id").to_pylist()) == ["r1", "r2"]
    assert "landed as version 3 over version 2" in caplog.text and "put back 2 rows" in caplog.text
    sink.replace_partition(table, "rejection_id", "mine", rejected_rows("mine", ["m1"]))
    stored = lancedb.connect(str(tmp_path)).open_table("rejected").to_arrow()
    assert sorted(stored.column("rejection_id").to_pylist()) == ["m1", "r1", "r2"]


# --- C7: every page of list_tables --------------------------------------------------------------


@dataclass
class Page:
    tables: list[str]
    page_token: str | None


class PaginatedCloudFake:
    """Stands in for a LanceDB Cloud connection (Cloud cannot run here): ``list_tables`` answers
    ``per_page`` names and a page token, as Cloud does; every other call goes to a real local database.
    ``create_table`` is refused: a table on a later page must be found, not created again."""

    def __init__(self, uri: str, per_page: int = 2) -> None:
        self.db, self.per_page, self.uri = lancedb.connect(uri), per_page, uri
        self.pages_served = 0

    def list_tables(self, page_token: str | None = None, limit: int | None = None) -> Page:
        names = sorted(self.db.list_tables(limit=1000).tables)
        start = int(page_token) if page_token else 0
        end = start + self.per_page
        self.pages_served += 1
        return Page(names[start:end], str(end) if end < len(names) else None)

    def open_table(self, name: str) -> Any:
        return self.db.open_table(name)

    def create_table(self, name: str, **_: Any) -> Any:
        raise AssertionError(f"create_table({name!r}) of a table on a later page")


def test_every_page_of_list_tables_is_read(tmp_path: Path) -> None:
    real = lancedb.connect(str(tmp_path))
    for name in ["a1", "a2", "a3", "a4", "a5"]:
        real.create_table(name, schema=pa.schema([("x", pa.int32())]))
    table = sink.open_or_create(real, "zz_rejected", sink.REJECTED_SCHEMA)
    sink.replace_partition(table, "rejection_id", "gone", rejected_rows("gone", ["g1"]))

    fake = PaginatedCloudFake(str(tmp_path))
    assert table_names(fake) == ["a1", "a2", "a3", "a4", "a5", "zz_rejected"] and fake.pages_served == 3
    assert sink.open_or_create(fake, "zz_rejected", sink.REJECTED_SCHEMA).count_rows() == 1  # found, not created
    assert stored_partitions(fake, ["zz_rejected"]) == {"gone"}
    assert delete_partitions(fake, ["zz_rejected"], ["gone"]) == 1
    # the real local database pages the same way when asked for 2 names a page
    assert table_names(real, page_size=2) == ["a1", "a2", "a3", "a4", "a5", "zz_rejected"]
    assert real.list_tables(limit=2).page_token is not None


def test_a_granularity_table_on_a_later_page_is_found(tmp_path: Path) -> None:
    real = lancedb.connect(str(tmp_path))
    for name in ["a1", "a2", "a3"]:
        real.create_table(name, schema=pa.schema([("x", pa.int32())]))
    schema = sink.chunk_schema(2)
    table = real.create_table("docs_fine", schema=schema)
    row = {f.name: None for f in schema}
    row |= {"chunk_id": "c", "doc_id": "d", "partition": "p", "chunk_index": 0, "token_start": 0, "token_end": 1}
    row |= {"vector": [1.0, 0.0], "doc_sha256": "s", "doc_tokens": 1, "windows": 1, "id": "c", "granularity": "fine"}
    row |= {k: "x" for k in ["model_name", "model_sha256", "head", "opt_ins", "strategy", "strategy_params"]}
    row |= {k: "x" for k in ["engine_path", "vllm_version", "package_version", "run_id"]}
    row |= {"materialized_at": datetime(2026, 12, 4, tzinfo=UTC)}
    table.add(pa.Table.from_pylist([row], schema=schema))
    assert list(granularity_tables(PaginatedCloudFake(str(tmp_path)), "docs")) == ["fine"]


# --- C6: a table a user changed -----------------------------------------------------------------


def test_a_user_added_nullable_column_is_kept_through_writes(tmp_path: Path) -> None:
    db = lancedb.connect(str(tmp_path))
    table = sink.open_or_create(db, "rejected", sink.REJECTED_SCHEMA)
    sink.replace_partition(table, "rejection_id", "p", rejected_rows("p", ["a", "b"]))
    table.add_columns([pa.field("reviewed_by", pa.string())])
    table.update(where="rejection_id = 'a'", values={"reviewed_by": "ana"})

    again = sink.open_or_create(lancedb.connect(str(tmp_path)), "rejected", sink.REJECTED_SCHEMA)
    sink.replace_partition(again, "rejection_id", "p", rejected_rows("p", ["a", "c"]))
    got = {r["rejection_id"]: r["reviewed_by"] for r in again.to_arrow().to_pylist()}
    assert got == {"a": "ana", "c": None}  # kept on the updated row, NULL on the new one, b replaced


def test_a_changed_table_is_refused_naming_the_columns(tmp_path: Path) -> None:
    settings = LanceDBSettings(uri=str(tmp_path))
    db = lancedb.connect(str(tmp_path))
    chunks = settings.chunk_table("chunks", 4)
    chunks.drop_columns(["headings"])
    chunks.add_columns({"score": "CAST(1 AS INT)"})  # NOT NULL: new rows could not be inserted
    with pytest.raises(ValueError) as refused:
        settings.chunk_table("chunks", 4)
    message = str(refused.value)
    assert "missing column 'headings' (list<item: string>)" in message
    assert "['score'] not written by the pipeline and NOT NULL" in message and "drop_columns" in message
    assert "two" not in message and "use another table name" not in message

    db.create_table("wide", schema=sink.chunk_schema(8))
    with pytest.raises(ValueError, match=r"column 'vector' is fixed_size_list<item: float>\[8\], the pipeline writes"):
        settings.chunk_table("wide", 4)
    retyped = db.create_table("retyped", schema=sink.REJECTED_SCHEMA)
    retyped.alter_columns({"path": "reason", "data_type": pa.large_string()})
    with pytest.raises(ValueError, match=r"column 'reason' is large_string, the pipeline writes string \(cast it back"):
        settings.rejected_table("retyped")
