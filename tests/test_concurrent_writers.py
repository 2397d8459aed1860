"""Concurrent writers and crash safety on one local LanceDB table.

Every writer is its own OS process (``tests.writer_process``: a real engine on a tiny random BERT,
``materialize_partition`` or a Dagster run of the factory's job, a real LanceDB table in a temp
dir). Writers that must commit together first say they are ready (engine up, tables open), then
all are let go at once. The module keeps its writer processes (:class:`Pool`) from test to test.
Crashes are real SIGKILLs at named points (``LATECHUNK_TEST_KILL_AT``) of a fresh writer process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import lancedb
import pytest

from latechunk_dagster import sink
from latechunk_dagster.pipeline.partition import STAGE_PREFIX, TEST_KILL_ENV
from latechunk_dagster.sink.retry import CommitConflictError, is_commit_conflict, retry_commit
from latechunk_dagster.sink.validation import documents_accounted
from latechunk_dagster.sources.files import Document
from tests.servers import s3_bucket
from tests.tiny_models import build_tiny_bert
from tests.writer_process import Writer, build_defs, together

TOPICS = ["pumps", "owls", "tea", "harbours", "glaciers", "violins"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny") / "model", minilm_dir)


def docs(partition: str, n: int = 5, tag: str = "") -> dict[str, str]:
    return {
        f"{partition}-d{i}": " ".join(
            f"Note {j} on {TOPICS[(i + j) % len(TOPICS)]}{tag}: unit {i} is checked every {j + 2} days."
            for j in range(2 + i % 3)
        )
        for i in range(n)
    }


class Pool:
    """Writer processes (``tests.writer_process``) started on first use and kept for the module:
    each keeps its engine between partition jobs, so a test pays for no start-up it has paid for.
    A spare writer, for a run that is to be killed, is started ahead of its use."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.writers: list[Writer] = []
        self.spares: list[Writer] = []
        self.started = 0

    def __getitem__(self, n: int) -> list[Writer]:
        """The first ``n`` writers; one that died or was left mid-job (by a failed test) is replaced,
        so one test's failure is that test's alone."""
        for k, w in enumerate(self.writers):
            if not w.usable:
                w.proc.kill()
                w.close()
                self.writers[k] = Writer(self.logs / f"writer-{k}-{self.started}.log")
                self.started += 1
        while len(self.writers) < n:
            self.writers.append(Writer(self.logs / f"writer-{len(self.writers)}.log"))
        return self.writers[:n]

    def start_spare(self) -> None:
        """Start a spare writer now, if none is waiting (its imports overlap the test's other work)."""
        if not self.spares:
            self.spares.append(Writer(self.logs / f"spare-{self.started}.log"))
            self.started += 1

    def spare(self) -> Writer:
        """A writer of its own (started earlier, if it could be); the next one is started now."""
        self.start_spare()
        taken = self.spares.pop(0)
        self.start_spare()
        return taken

    def close(self) -> None:
        for w in self.spares:  # never given a job: nothing to wait for
            w.proc.kill()
        for w in self.writers + self.spares:  # all wind down at once
            w.end()
        for w in self.writers + self.spares:
            w.close()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    p = Pool(tmp_path_factory.mktemp("writer-logs"))
    yield p
    p.close()


def killed_run(pool: Pool, spec: dict[str, Any], point: str, env: dict[str, str] | None = None) -> None:
    """``spec`` run by a writer process of its own that SIGKILLs itself at ``point``."""
    w = pool.spare()
    try:
        result = w.send({**spec, "env": {TEST_KILL_ENV: point, **(env or {})}}).result()
        assert result is None, f"the run went through {point} without being killed: {result}"
    finally:
        w.close()


def chunks_of(db: Path) -> Any:
    return lancedb.connect(str(db)).open_table(sink.CHUNK_TABLE).to_arrow()


def assert_whole(rows: Any, partition: str, documents: dict[str, str], run_ids: set[str]) -> None:
    """No row lost or duplicated: unique chunk_ids, every document present with chunk_index 0..n-1."""
    part = rows.filter(rows.column("partition").to_numpy(zero_copy_only=False) == partition)
    ids = part.column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)), f"duplicate chunk_ids in {partition}"
    assert set(part.column("doc_id").to_pylist()) == set(documents)
    per_doc: dict[str, list[int]] = {}
    for d, i in zip(part.column("doc_id").to_pylist(), part.column("chunk_index").to_pylist()):
        per_doc.setdefault(d, []).append(i)
    assert all(sorted(v) == list(range(len(v))) for v in per_doc.values())
    assert set(part.column("run_id").to_pylist()) <= run_ids


def test_retry_commit_retries_a_real_conflict_and_gives_up_when_bounded(tmp_path: Path) -> None:
    """A stale handle's compaction loses against a delete (a real LanceDB commit conflict)."""
    import pyarrow as pa

    db = lancedb.connect(str(tmp_path))
    table = db.create_table("t", schema=pa.schema([("k", pa.int64()), ("p", pa.string())]))
    for p in "abcd":
        table.add(pa.table({"k": list(range(100)), "p": [p] * 100}))
    stale = lancedb.connect(str(tmp_path)).open_table("t")
    table.delete("p = 'b'")
    with pytest.raises(CommitConflictError, match="after 1 attempts"):
        retry_commit(stale.optimize, what="compact", attempts=1)
    stale = lancedb.connect(str(tmp_path)).open_table("t")
    table.delete("p = 'c'")
    slept: list[float] = []
    _, attempts = retry_commit(stale.optimize, what="compact", refresh=stale.checkout_latest, sleep=slept.append)
    assert attempts == 2 and len(slept) == 1 and 0 <= slept[0] <= 0.25
    assert table.count_rows() == 200
    assert not is_commit_conflict(ValueError("commit conflict")) and not is_commit_conflict(
        RuntimeError("no such column")
    )


def test_a_commit_refused_after_a_concurrent_create_is_retried_on_the_latest_version(tmp_path: Path) -> None:
    """Two writers creating a missing table at once: the second create is an Overwrite at version 2
    (lance), and a writer whose handle read version 1 was refused outright ("Incompatible
    transaction"), which failed a CI run; now retried on the latest version, its rows committed whole."""
    import pyarrow as pa

    schema = pa.schema([pa.field("chunk_id", pa.string(), nullable=False), ("partition", pa.string())])
    stale = lancedb.connect(str(tmp_path)).create_table("t", schema=schema)
    lancedb.connect(str(tmp_path)).create_table("t", schema=schema, mode="overwrite")  # the racing create
    rows = pa.table({"chunk_id": ["c0"], "partition": ["p"]}, schema=schema)

    def merge() -> object:
        return stale.merge_insert("chunk_id").when_matched_update_all().when_not_matched_insert_all().execute(rows)

    with pytest.raises(RuntimeError, match="incompatible with concurrent transaction Overwrite") as refused:
        merge()
    assert is_commit_conflict(refused.value)
    stale = lancedb.connect(str(tmp_path)).open_table("t")  # handle at version 1 again
    stale.checkout(1)
    _, attempts = retry_commit(merge, what="merge", refresh=stale.checkout_latest, sleep=lambda s: None)
    assert attempts == 2
    assert lancedb.connect(str(tmp_path)).open_table("t").to_arrow().column("chunk_id").to_pylist() == ["c0"]


def test_four_processes_write_four_partitions_then_rewrite_them(tmp_path: Path, tiny: Path, pool: Pool) -> None:
    db = tmp_path / "db"
    parts = {f"p{k}": docs(f"p{k}", 4 + k) for k in range(4)}
    base = {"model": str(tiny), "db": str(db), "batch_tokens": 64}
    writers = pool[4]
    first = together(writers, [{**base, "partition": p, "docs": d, "run_id": f"a-{p}"} for p, d in parts.items()])
    assert len({r["pid"] for r in first}) == 4, "four processes"
    rows = chunks_of(db)
    assert rows.num_rows == sum(r["chunks_written"] for r in first)
    for p, d in parts.items():
        assert_whole(rows, p, d, {f"a-{p}"})
    # again, forced: every commit now updates rows other commits' fragments hold
    second = together(
        writers, [{**base, "partition": p, "docs": d, "run_id": f"b-{p}", "force": True} for p, d in parts.items()]
    )
    after = chunks_of(db)
    assert after.num_rows == rows.num_rows
    assert set(after.column("chunk_id").to_pylist()) == set(rows.column("chunk_id").to_pylist())
    for p, d in parts.items():
        assert_whole(after, p, d, {f"b-{p}"})
    assert all(r["attempts"] >= 1 and r["lance_attempts"] >= 1 for r in first + second)


@pytest.mark.parametrize("prefilled", [False, True], ids=["new-partition", "existing-partition"])
def test_two_runs_of_the_same_partition_one_wins_whole(tmp_path: Path, tiny: Path, prefilled: bool, pool: Pool) -> None:
    db = tmp_path / "db"
    d = docs("p", 6)
    base = {"model": str(tiny), "db": str(db), "partition": "p", "docs": d, "batch_tokens": 64, "force": True}
    writers = pool[3]
    if prefilled:
        writers[0].run({**base, "run_id": "old"})
    results = together(writers, [{**base, "run_id": f"r{k}"} for k in range(3)])
    rows = chunks_of(db)
    runs = Counter(rows.column("run_id").to_pylist())
    assert len(runs) == 1, f"a mix of runs: {runs}"
    assert rows.num_rows == results[0]["chunks_written"] == results[1]["chunks_written"]
    assert_whole(rows, "p", d, {"r0", "r1", "r2"})
    # whether the commits overlapped (retries) depends on timing; the outcome above must not


def _write_store(root: Path, texts: dict[str, dict[str, str]]) -> None:
    for part, ds in texts.items():
        (root / part).mkdir(parents=True, exist_ok=True)
        for f in (root / part).iterdir():
            f.unlink()
        for doc, text in ds.items():
            (root / part / f"{doc}.txt").write_text(text)


def _partition_rows(db: Path, partition: str) -> dict[str, tuple[str, str]]:
    rows = chunks_of(db)
    rows = rows.filter(rows.column("partition").to_numpy(zero_copy_only=False) == partition)
    return dict(
        zip(
            rows.column("chunk_id").to_pylist(),
            zip(rows.column("run_id").to_pylist(), rows.column("doc_sha256").to_pylist()),
        )
    )


def _table_files(db: Path) -> set[str]:
    root = db / f"{sink.CHUNK_TABLE}.lance"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


OLD = {"p": docs("p", 5), "q": docs("q", 3)}
NEW = {"p": {**docs("p", 4, tag=" (revised)"), "p-extra": "A new note on owls: they hunt at night."}, "q": OLD["q"]}


def dagster_job(root: Path, tiny: Path, **spec: Any) -> dict[str, Any]:
    """A ``dagster``-mode job over ``root``'s store, table and Dagster home."""
    return {
        "mode": "dagster",
        "model": str(tiny),
        "db": str(root / "db"),
        "store": str(root / "store"),
        "home": str(root / "home"),
        "partitions": ["p", "q"],
        **spec,
    }


@pytest.fixture(scope="module")
def old_state(tmp_path_factory: pytest.TempPathFactory, tiny: Path, pool: Pool) -> tuple[Path, set[str]]:
    """Built once for the kill points, each of which works on a copy: a store, a table and a Dagster
    home in which Dagster runs materialized the old documents of partitions ``p`` and ``q``; and the
    chunk ids of a clean run of ``p``'s new documents, in a table of its own."""
    root = tmp_path_factory.mktemp("old-state")
    clean = root / "clean"
    (root / "home").mkdir()
    (clean / "home").mkdir(parents=True)
    writer = pool[1][0]
    pool.start_spare()  # for the first kill point
    _write_store(clean / "store", NEW)
    writer.run(dagster_job(clean, tiny, partition="p"))
    _write_store(root / "store", OLD)
    for part in ("p", "q"):
        ok = writer.run(dagster_job(root, tiny, partition=part))
        assert ok["success"] and all(ok["checks"].values())
    return root, set(_partition_rows(clean / "db", "p"))


@pytest.mark.parametrize("point", ["before_engine", "during_encode", "during_commit"])
def test_sigkill_leaves_old_rows_and_the_next_run_repairs(
    tmp_path: Path,
    tiny: Path,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
    pool: Pool,
    old_state: tuple[Path, set[str]],
) -> None:
    template, want_new = old_state
    root = tmp_path / "state"
    shutil.copytree(template, root, ignore=shutil.ignore_patterns("clean"))
    store, db, home, staging = root / "store", root / "db", root / "home", tmp_path / "staging"
    staging.mkdir()
    base = dagster_job(root, tiny)
    before, before_q = _partition_rows(db, "p"), _partition_rows(db, "q")
    files_before = _table_files(db)
    # the documents change; a run is killed at `point`
    _write_store(store, NEW)
    killed_run(pool, {**base, "partition": "p", "batch_tokens": 48}, point, env={"TMPDIR": str(staging)})
    assert _partition_rows(db, "p") == before, "the partition must hold its complete old rows"
    assert _partition_rows(db, "q") == before_q
    assert list(staging.glob(f"{STAGE_PREFIX}*")), "the killed run left its staging directory"
    left = _table_files(db) - files_before
    print(f"{point}: files the killed run left in the table: {sorted(left)}")
    assert not any(f.startswith("_versions/") for f in left), "a killed run must not commit a version"
    # the checks say the partition holds a whole earlier materialization that no longer matches the store
    table, defs = build_defs(base)
    # on the instance the runs recorded their materializations in (row_count_matches compares)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        check_job = dg.define_asset_job("checks", selection=dg.AssetSelection.checks_for_assets(table.chunk_asset))
        result = (
            dg.Definitions.merge(defs, dg.Definitions(jobs=[check_job]))
            .resolve_job_def("checks")
            .execute_in_process(
                instance=instance,
                run_config={"ops": {"chunk_vectors_table_checks": {"config": {"partitions": ["p"]}}}},
                raise_on_error=False,
            )
        )
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["unique_chunk_ids"] and checks["vectors_valid"], checks
    assert not checks["documents_accounted"], "p-extra has neither chunks nor a rejection yet"
    # the next run repairs it, and removes the killed run's staging directory
    repaired = pool[1][0].run({**base, "partition": "p", "env": {"TMPDIR": str(staging)}})
    assert repaired["success"] and all(repaired["checks"].values()), repaired
    after = _partition_rows(db, "p")
    assert set(after) == want_new
    assert len({run for run, _ in after.values()}) == 1
    assert _partition_rows(db, "q") == before_q
    assert not list(staging.glob(f"{STAGE_PREFIX}*"))
    # whatever a killed commit left is unreferenced: LanceDB's cleanup removes it
    t = lancedb.connect(str(db)).open_table(sink.CHUNK_TABLE)
    # (lance's own call: the runs' tagged versions are kept, not refused as LanceDB's optimize does)
    t.to_lance().cleanup_old_versions(
        older_than=timedelta(0), delete_unverified=True, error_if_tagged_old_versions=False
    )
    assert not {f for f in left if f.startswith("data/")} & _table_files(db)
    assert set(_partition_rows(db, "p")) == want_new


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_kill_between_the_two_commits_is_flagged_and_the_next_run_repairs_it(
    tmp_path: Path, tiny: Path, where: str, pool: Pool
) -> None:
    """Killed after the chunk-table commit, before the rejected-table commit (locally and on moto's S3):
    the chunk table is the new run's, whole; the rejected table is the old run's; the
    ``documents_accounted`` check names both kinds of mismatch; the next run re-encodes nothing,
    keeps the killed run's chunk rows and replaces the stale rejection records."""
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        if where == "s3":
            stack.enter_context(s3_bucket("between"))
            db = "s3://between/db"
            env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}  # the emulator's
        else:
            db = str(tmp_path / "db")
        writer = pool[1][0]
        old = {**docs("p", 3), "p-late": ""}  # p-late is rejected (empty text)
        new = {**docs("p", 3), "p-late": "A late note on glaciers: they move slowly.", "p-d1": ""}
        base = {"mode": "partition", "model": str(tiny), "db": db, "partition": "p"}
        writer.run({**base, "docs": old, "run_id": "r1", "env": env})
        killed_run(pool, {**base, "docs": new, "run_id": "r2"}, "between_commits", env=env)
        conn = lancedb.connect(db)
        rows = conn.open_table(sink.CHUNK_TABLE).to_arrow()
        rejected = conn.open_table(sink.REJECTED_TABLE).to_arrow()
        # what a reader sees in the window: the new chunk rows whole, the old rejection records
        assert set(rows.column("doc_id").to_pylist()) == {"p-d0", "p-d2", "p-late"}
        assert set(zip(rows.column("doc_id").to_pylist(), rows.column("run_id").to_pylist())) >= {("p-late", "r2")}
        assert rejected.column("doc_id").to_pylist() == ["p-late"]
        current = {k: Document.from_text(k, v) for k, v in new.items()}
        ok, details = documents_accounted(rows, rejected, current)
        assert not ok and details["missing"] == ["p-d1"] and details["chunked_and_rejected"] == ["p-late"]
        # the next run repairs it: nothing committed is encoded again, the rejections are replaced
        again = writer.run({**base, "docs": new, "run_id": "r3", "env": env})
        assert again["chunks_written"] == 0
        rows_after = conn.open_table(sink.CHUNK_TABLE).to_arrow()
        rejected_after = conn.open_table(sink.REJECTED_TABLE).to_arrow()
        assert sorted(rows_after.column("chunk_id").to_pylist()) == sorted(rows.column("chunk_id").to_pylist())
        assert set(rows_after.column("run_id").to_pylist()) == {"r1", "r2"}  # untouched by r3
        assert rejected_after.column("doc_id").to_pylist() == ["p-d1"]
        assert rejected_after.column("reason").to_pylist() == ["empty_text"]
        assert documents_accounted(rows_after, rejected_after, current)[0]


def test_staging_dirs_of_dead_processes_are_removed(tmp_path: Path) -> None:
    from latechunk_dagster.pipeline.partition import remove_stale_staging

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = tmp_path / f"{STAGE_PREFIX}{proc.pid}-x"
    alive = tmp_path / f"{STAGE_PREFIX}{os.getppid()}-y"
    other = tmp_path / "unrelated"
    for d in (dead, alive, other):
        d.mkdir()
    assert remove_stale_staging(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and other.exists()
