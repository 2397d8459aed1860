"""Deletion decided from a listing of the store (issue 27, A and C): nothing is removed on a view that
could not see the whole store, a skipped entry is never read as a removed shard, a change back to
content seen before runs again, and names that cannot be partition keys are skipped alone.

Through public surfaces: ``DocumentStore``, ``sync_partitions`` (and the CLI that calls it), the
store sensor evaluated by Dagster's own ``build_sensor_context``, and real materializations. The
right answers come from the inputs: which shards the whole store holds, which rows were written.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latechunk_dagster import LateChunker, sink
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.sensors import read_cursor, sync_partitions
from latechunk_dagster.sources.files import DocumentStore, IncompleteListingError
from latechunk_dagster.sources.listing import INVALID_KEY_SUBSTRINGS
from tests.conftest import SHARED_ENGINE
from tests.test_cli import run_cli
from tests.test_pipeline import TABLE, make_defs, run_partitions

FIXED_4 = {"ops": {"chunk_vectors": {"config": {"strategy": "fixed_tokens", "chunk_size": 4}}}}
PARTITIONS = TABLE.partitions_def.name

#: shards a, b, c of one JSONL file, two documents each
ROWS = [
    {"id": f"{s}{i}", "text": f"Document {i} of shard {s} is about pumps.", "shard": s} for s in "abc" for i in (1, 2)
]
FULL = "".join(json.dumps(r) + "\n" for r in ROWS)


def partitions(instance: dg.DagsterInstance) -> list[str]:
    return sorted(instance.get_dynamic_partitions(PARTITIONS))


def row_partitions(db: Path) -> dict[str, int]:
    """{partition: row count} of the chunk table."""
    table = sink.connect(str(db)).open_table("chunks").to_arrow()
    out: dict[str, int] = {}
    for p in table.column("partition").to_pylist():
        out[p] = out.get(p, 0) + 1
    return out


def instance_in(home: Path) -> Any:  # noqa: ANN401 - Dagster's context manager
    home.mkdir(parents=True, exist_ok=True)
    return dg.instance_for_test(temp_dir=str(home))


def lancedb(db: Path) -> LanceDBResource:
    return LanceDBResource(uri=str(db))


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, store: Path, db: Path, cursor: str | None = None) -> Any:  # noqa: ANN401
    """One evaluation of the store sensor, as the daemon runs it."""
    sensor = defs.resolve_sensor_def("chunk_vectors_store_sensor")
    resources = {"store": DocumentStoreResource(path=str(store)), "lancedb": lancedb(db)}
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        return sensor(ctx)


@pytest.fixture(scope="module")
def single_file(tmp_path_factory, chunker: LateChunker) -> Iterator[dict[str, Any]]:
    """Shards a, b, c of one JSONL file, all materialized (FixedTokens(4)) in one real run."""
    SHARED_ENGINE["chunker"] = chunker
    root = tmp_path_factory.mktemp("listing")
    store, db = root / "docs.jsonl", root / "lancedb"
    store.write_text(FULL)
    (root / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        defs = make_defs(store, db)
        assert run_partitions(defs, instance, "a", "c", run_config=FIXED_4).success
        yield {"store": store, "db": db, "instance": instance, "defs": defs, "rows": row_partitions(db)}


# -- 1. a single-file store read while it is being rewritten ------------------------------------


def test_a_file_cut_mid_line_deletes_nothing_and_adds_no_stem_partition(single_file, tmp_path: Path) -> None:
    store, db, instance = single_file["store"], single_file["db"], single_file["instance"]
    assert single_file["rows"].keys() == {"a", "b", "c"}
    store.write_text(FULL[: FULL.index('"b2"') + 6])  # half rewritten: cut inside a line of shard b
    try:
        with pytest.raises(IncompleteListingError, match=f"{store}: row 4: the last line is cut off"):
            sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def, lancedb(db), ["chunks"])
        skipped = tick(single_file["defs"], instance, store, db)
        assert isinstance(skipped, dg.SkipReason)
        assert "could not be listed whole" in skipped.skip_message and str(store) in skipped.skip_message
        out = run_cli(["sync-partitions"], tmp_path / "home", LATECHUNK_DOCUMENT_STORE=str(store))
        assert out.returncode != 0 and "cut off" in out.stderr and "Traceback" not in out.stderr
    finally:
        store.write_text(FULL)
    assert partitions(instance) == ["a", "b", "c"]  # no 'docs' (the file stem), none removed
    assert row_partitions(db) == single_file["rows"]


def test_a_parquet_file_without_its_footer_deletes_nothing(single_file, tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # a writer half way through
    listing = DocumentStore.from_path(path).listing()
    assert listing.shards == () and not listing.complete
    assert listing.removed(["a", "b", "c"]) == []
    skipped = tick(single_file["defs"], single_file["instance"], path, single_file["db"])
    assert isinstance(skipped, dg.SkipReason) and str(path) in skipped.skip_message
    assert partitions(single_file["instance"]) == ["a", "b", "c"]
    assert row_partitions(single_file["db"]) == single_file["rows"]


# -- 2. a change back to content seen before is a change ----------------------------------------


def test_a_revert_and_a_restored_shard_get_runs_with_keys_never_seen(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for shard in ("a", "b"):
        (store / shard).mkdir(parents=True)
        (store / shard / "doc.txt").write_text(f"First text of shard {shard}.")
    defs, db = make_defs(store, tmp_path / "db"), tmp_path / "db"
    keys: list[str] = []
    with instance_in(tmp_path / "home") as instance:
        sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        cursor = None

        def next_tick() -> list[dg.RunRequest]:
            nonlocal cursor
            result = tick(defs, instance, store, db, cursor)
            cursor = result.cursor
            for r in result.dynamic_partitions_requests:
                if isinstance(r, dg.AddDynamicPartitionsRequest):
                    instance.add_dynamic_partitions(PARTITIONS, list(r.partition_keys))
                else:
                    for key in r.partition_keys:
                        instance.delete_dynamic_partition(PARTITIONS, key)
            keys.extend(run.run_key for run in result.run_requests)
            return result.run_requests

        assert len(next_tick()) == 1  # the first tick: both shards, one range run
        assert next_tick() == []  # nothing changed: nothing requested
        (store / "a" / "doc.txt").write_text("Edited text of shard a.")
        [edit] = next_tick()
        (store / "a" / "doc.txt").write_text("First text of shard a.")  # reverted to the first content
        [revert] = next_tick()
        assert edit.partition_key == revert.partition_key == "a"
        (store / "b" / "doc.txt").rename(tmp_path / "b.txt")
        (store / "b").rmdir()
        assert next_tick() == [] and partitions(instance) == ["a"]
        (store / "b").mkdir()
        (tmp_path / "b.txt").rename(store / "b" / "doc.txt")  # restored unchanged
        [restored] = next_tick()
        assert restored.partition_key == "b" and partitions(instance) == ["a", "b"]
    assert len(set(keys)) == len(keys) == 4  # Dagster runs a key once: every one of them is new
    assert read_cursor(cursor)[0] == 4


def test_a_tick_repeated_from_the_same_cursor_requests_the_same_keys(tmp_path: Path) -> None:
    """A tick whose cursor was not saved (it failed) must not request its runs a second time."""
    store = tmp_path / "store"
    (store / "a").mkdir(parents=True)
    (store / "a" / "doc.txt").write_text("Text of shard a.")
    defs = make_defs(store, tmp_path / "db")
    with instance_in(tmp_path / "home") as instance:
        first = tick(defs, instance, store, tmp_path / "db")
        again = tick(defs, instance, store, tmp_path / "db")
    assert [r.run_key for r in first.run_requests] == [r.run_key for r in again.run_requests]
    # a cursor from before generations were counted (a plain {shard: fingerprint}) still reads
    fingerprints = read_cursor(first.cursor)[1]
    assert read_cursor(json.dumps(fingerprints)) == (0, fingerprints)


# -- 3. links, compressed files and loops: read or named, never read as removed ----------------


def test_a_shard_moved_to_another_disk_and_linked_back_is_read_where_it_is(tmp_path: Path) -> None:
    store, elsewhere = tmp_path / "store", tmp_path / "other-disk"
    for shard in ("a", "b"):
        (store / shard).mkdir(parents=True)
        (store / shard / "doc.txt").write_text(f"Text of shard {shard}.")
    (store / "b" / "notes").mkdir()
    (store / "b" / "notes" / "n.txt").write_text("A note inside shard b.")
    before = DocumentStore.from_path(store).fingerprints()
    elsewhere.mkdir()
    (store / "b").rename(elsewhere / "b")
    (store / "b").symlink_to(elsewhere / "b", target_is_directory=True)  # the usual move to another disk
    (elsewhere / "more").mkdir()
    (elsewhere / "more" / "m.txt").write_text("A linked subdirectory inside shard a.")
    (store / "a" / "more").symlink_to(elsewhere / "more", target_is_directory=True)
    (store / "a" / "loop").symlink_to(store, target_is_directory=True)  # a link to an ancestor
    st = DocumentStore.from_path(store)
    listing = st.listing()
    assert listing.shards == ("a", "b") and listing.complete
    assert st.fingerprints()["b"] == before["b"]  # the same documents, read through the link
    assert sorted(d.doc_id for d in st.read_shard("a")) == ["a/doc.txt", "a/more/m.txt"]
    [loop] = st.bad_shards()
    assert (loop.reason, loop.where) == ("symlink_loop", str(store / "a" / "loop"))
    warnings: list[str] = []
    with instance_in(tmp_path / "home") as instance:
        instance.add_dynamic_partitions(PARTITIONS, ["a", "b"])
        added, removed = sync_partitions(instance, st, TABLE.partitions_def, warn=warnings.append)
    assert (added, removed) == ([], [])
    assert any("a symbolic link back to a directory above it" in w for w in warnings)


def test_a_link_to_nowhere_is_a_gap_and_a_compressed_shard_holds_its_name(tmp_path: Path) -> None:
    store = tmp_path / "tables"
    store.mkdir()
    for shard in ("a", "b", "c"):
        (store / f"{shard}.jsonl").write_text(json.dumps({"id": "1", "text": f"shard {shard}"}) + "\n")
    (store / "README.md").write_text("# A dataset card")  # issue 27, 9: named, not a refusal
    (store / "b.jsonl").rename(store / "b.jsonl.xz")  # compressed (xz, which the store does not read), but not removed
    st = DocumentStore.from_path(store)
    listing = st.listing()
    assert listing.shards == ("a", "c")
    assert {(r.reason, Path(r.where).name) for r in listing.skipped} == {
        ("other_kind", "README.md"),
        ("other_kind", "b.jsonl.xz"),
    }
    assert listing.removed(["a", "b", "c", "d"]) == ["d"]  # b is held by its .xz file
    (store / "c.jsonl").rename(tmp_path / "c.jsonl")
    (store / "c.jsonl").symlink_to(tmp_path / "unmounted" / "c.jsonl")  # its disk is not mounted
    listing = st.listing()
    assert [g.reason for g in listing.gaps] == ["dangling_link"]
    assert listing.removed(["a", "b", "c", "d"]) == []  # a gap: nothing is read as removed
    warnings: list[str] = []
    with instance_in(tmp_path / "home") as instance:
        instance.add_dynamic_partitions(PARTITIONS, ["a", "b", "c", "d"])
        added, removed = sync_partitions(instance, st, TABLE.partitions_def, warn=warnings.append)
        assert (added, removed) == ([], []) and partitions(instance) == ["a", "b", "c", "d"]
    assert sum("not listed:" in w and "unmounted" in w for w in warnings) == 1
    assert sum("skipped:" in w for w in warnings) == 2


# -- 4. rows committed after their shard left the store -----------------------------------------


def test_rows_of_a_shard_removed_during_its_run_are_removed_by_the_next_sync(single_file, tmp_path: Path) -> None:
    """The run commits after a sensor tick dropped its partition; the next sync compares the store
    with the table's partitions too, so the rows go (search must not keep returning them)."""
    store = tmp_path / "store"
    (store / "keep").mkdir(parents=True)
    (store / "keep" / "doc.txt").write_text("A shard that stays in the store.")
    (store / "gone").mkdir()
    (store / "gone" / "doc.txt").write_text("A shard that leaves the store while it is encoded.")
    db = tmp_path / "lancedb"
    defs = make_defs(store, db)
    with instance_in(tmp_path / "home") as instance:
        sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        assert run_partitions(defs, instance, "gone", "keep", run_config=FIXED_4).success
        (store / "gone" / "doc.txt").unlink()
        (store / "gone").rmdir()
        instance.delete_dynamic_partition(PARTITIONS, "gone")  # what a tick did while the run encoded
        assert row_partitions(db).keys() == {"gone", "keep"}  # the run's commit landed after it
        added, removed = sync_partitions(
            instance, DocumentStore.from_path(store), TABLE.partitions_def, lancedb(db), TABLE.wiring.table_names
        )
        assert (added, removed) == ([], ["gone"])
        assert row_partitions(db).keys() == {"keep"}
        # the store sensor applies the same rule: the same race once more, cleaned by a tick
        (store / "gone").mkdir()
        (store / "gone" / "doc.txt").write_text("A shard that leaves the store while it is encoded.")
        instance.add_dynamic_partitions(PARTITIONS, ["gone"])
        assert run_partitions(defs, instance, "gone", "gone", run_config=FIXED_4).success
        (store / "gone" / "doc.txt").unlink()
        (store / "gone").rmdir()
        instance.delete_dynamic_partition(PARTITIONS, "gone")
        assert row_partitions(db).keys() == {"gone", "keep"}
        result = tick(defs, instance, store, db)
        assert row_partitions(db).keys() == {"keep"}
        assert result.dynamic_partitions_requests == []  # 'gone' is no partition any more


# -- 7. special files ---------------------------------------------------------------------------


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail a test that blocks (a FIFO opened for reading waits for a writer) instead of hanging CI."""

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError("blocked reading a special file")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_a_fifo_named_like_a_document_is_named_not_read(single_file, tmp_path: Path, alarm: None) -> None:
    store = tmp_path / "tree"
    (store / "x").mkdir(parents=True)
    (store / "x" / "a.txt").write_text("Acme Corp. builds pumps in Rotterdam.")
    os.mkfifo(store / "x" / "pipe.txt")
    db = tmp_path / "lancedb"
    defs = make_defs(store, db)
    with instance_in(tmp_path / "home") as instance:
        result = tick(defs, instance, store, db)  # the tick finishes
        assert [list(r.partition_keys) for r in result.dynamic_partitions_requests] == [["x"]]
        instance.add_dynamic_partitions(PARTITIONS, ["x"])
        assert run_partitions(defs, instance, "x", "x", run_config=FIXED_4).success
    assert row_partitions(db) == {"x": len(sink.connect(str(db)).open_table("chunks").to_arrow())}
    written = set(sink.connect(str(db)).open_table("chunks").to_arrow().column("doc_id").to_pylist())
    assert written == {"x/a.txt"}
    [rejected] = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
    assert (rejected["doc_id"], rejected["reason"]) == ("x/pipe.txt", "not_a_regular_file")
    assert "a FIFO" in rejected["detail"]


def test_a_fifo_as_a_table_file_is_an_unreadable_shard_alone(tmp_path: Path, alarm: None) -> None:
    store = tmp_path / "tables"
    store.mkdir()
    (store / "a.jsonl").write_text(json.dumps({"id": "1", "text": "A good shard."}) + "\n")
    os.mkfifo(store / "p.jsonl")
    st = DocumentStore.from_path(store)
    assert st.shards() == ["a", "p"] and st.count_shards(["a", "p"]) == {"a": 1, "p": 0}
    [row] = list(st.iter_shard("p"))
    assert (row.reason, row.where) == ("unreadable_file", str(store / "p.jsonl")) and "a FIFO" in row.detail
    assert st.fingerprints().keys() == {"a", "p"}
    with pytest.raises(ValueError, match="it is a FIFO"):
        DocumentStore.from_path(store / "p.jsonl")


# -- 10. names that cannot be partition keys ----------------------------------------------------


def test_the_invalid_key_list_covers_dagsters_own() -> None:
    from dagster._core.definitions.partitions.utils.base import INVALID_PARTITION_SUBSTRINGS

    assert set(INVALID_PARTITION_SUBSTRINGS) <= set(INVALID_KEY_SUBSTRINGS)


def test_shard_names_that_cannot_be_keys_are_skipped_alone_and_the_rest_syncs(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    lines = [
        {"id": "1", "text": "Shard a.", "shard": "a"},
        {"id": "2", "text": "A NUL in the shard name.", "shard": "a\x00b"},
        {"id": "3", "text": "A newline in the shard name.", "shard": "c\nd"},
        {"id": "4", "text": "Shard e.", "shard": "e"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    st = DocumentStore.from_path(path)
    assert st.shards() == ["a", "docs", "e"]  # the two rows are bad_shard rows of the file stem's shard
    [bad_nul, bad_newline] = [r for r in st.iter_shard("docs")]
    assert (bad_nul.reason, bad_nul.doc_id) == ("bad_shard", "2") and "'\\x00'" in bad_nul.detail
    assert (bad_newline.reason, bad_newline.doc_id) == ("bad_shard", "3") and "'\\n'" in bad_newline.detail
    tree = tmp_path / "tree"
    for name in ("good", "two...dots", "tab\there"):
        (tree / name).mkdir(parents=True)
        (tree / name / "doc.txt").write_text(f"A document of {name!r}.")
    warnings: list[str] = []
    with instance_in(tmp_path / "home") as instance:
        added, _ = sync_partitions(instance, DocumentStore.from_path(tree), TABLE.partitions_def, warn=warnings.append)
        assert added == ["good"] == partitions(instance)
    assert len(warnings) == 2 and all("cannot be a partition key" in w for w in warnings)
    assert any("'...'" in w for w in warnings) and any("'\\t'" in w for w in warnings)


def test_a_part_of_a_shard_the_listing_cannot_see_keeps_the_partitions_old_rows(single_file, tmp_path: Path) -> None:
    """The same rule inside a run: a document behind a link to nowhere (its disk not mounted) is not
    a deleted document; the run keeps the partition's old rows and names the link."""
    store = tmp_path / "tree"
    (store / "x").mkdir(parents=True)
    (store / "x" / "a.txt").write_text("Acme Corp. builds pumps in Rotterdam.")
    (store / "x" / "b.txt").write_text("Its maintenance team works at night.")
    db = tmp_path / "lancedb"
    defs = make_defs(store, db)
    with instance_in(tmp_path / "home") as instance:
        sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        assert run_partitions(defs, instance, "x", "x", run_config=FIXED_4).success
        before = sink.connect(str(db)).open_table("chunks").to_arrow().sort_by("chunk_id")
        (store / "x" / "b.txt").unlink()
        (store / "x" / "b.txt").symlink_to(tmp_path / "unmounted" / "b.txt")
        assert run_partitions(defs, instance, "x", "x", run_config=FIXED_4).success is False
    assert sink.connect(str(db)).open_table("chunks").to_arrow().sort_by("chunk_id").equals(before)
    [row] = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
    assert (row["doc_id"], row["reason"]) == ("*", "systemic_failure")
    assert "dangling_link" in row["detail"] and "b.txt" in row["detail"] and "does not exist" in row["detail"]
