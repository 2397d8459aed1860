"""Scale-out with Dagster's own machinery: a backfill fanned out by the daemon over run processes,
two vLLM server processes and one LanceDB table on moto's S3, with a server killed and a run
killed mid-commit.

Everything is real and on loopback: the backfill is launched as the UI launches it (the
``launchPartitionBackfill`` GraphQL mutation of a running ``dagster-webserver``), the daemon's
backfill loop turns it into one run per partition (``BackfillPolicy.multi_run(1)``), the queued
run coordinator lets at most 3 run at once, ``dagster-daemon`` launches each as its own process
(its step in a child process, Dagster's multiprocess executor) and retries a failed run (run
retries), every step talks to both vLLM servers through ``VLLMServerEngineResource``, and all
write to one table on the S3 emulator. The right answers come from outside the fan-out: the same
partitions materialized in this process, one after another, on the surviving server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import httpx
import lancedb
import numpy as np
import pyarrow as pa
import pytest
from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES, BulkActionStatus
from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

from latechunk_dagster import sink
from latechunk_dagster.pipeline.partition import TEST_KILL_ENV, TEST_KILL_ONCE_ENV
from tests.fanout_defs import SPEC_ENV, build
from tests.servers import ServerProcess, s3_bucket, start_dagster_webserver, start_vllm_server
from tests.tiny_models import build_tiny_bert

ROOT = Path(__file__).resolve().parents[1]
#: one more partition than runs at once, so the queued run coordinator holds one back (six took
#: 7 process-heavy runs to prove the same on two cores)
PARTITIONS = [f"shard{i}" for i in range(4)]
KILLED = "shard1"  #: its first run is SIGKILLed inside the LanceDB commit (its retry overlaps the others)
TOPICS = ["pumps", "owls", "tea", "harbours", "glaciers", "violins"]
MAX_CONCURRENT_RUNS = 3
DEADLINE_S = 1200
#: ``dagster-daemon run`` with the backfill daemon's loop every 2 s instead of Dagster's fixed 30 s
#: (``DEFAULT_DAEMON_INTERVAL_SECONDS``, which no setting changes): the backfill's runs are queued,
#: and the backfill marked complete, within 2 s instead of up to 30 s each; nothing else differs.
DAEMON = (
    "import sys; import dagster._daemon.controller as c; c.DEFAULT_DAEMON_INTERVAL_SECONDS = 2; "
    "from dagster._daemon.cli import main; sys.argv[0] = 'dagster-daemon'; sys.exit(main())"
)

INSTANCE_YAML = f"""
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: {MAX_CONCURRENT_RUNS}
    dequeue_interval_seconds: 1
run_retries:
  enabled: true
  max_retries: 1
telemetry:
  enabled: false
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny") / "model", minilm_dir)


def _write_store(root: Path) -> None:
    for p, part in enumerate(PARTITIONS):
        (root / part).mkdir(parents=True)
        for i in range(4):
            text = " ".join(
                f"Shard {p} note {j} on {TOPICS[(p + i + j) % len(TOPICS)]}: unit {i} is checked every {j + 2} days."
                for j in range(2 + (p + i) % 3)
            )
            (root / part / f"doc{i}.txt").write_text(text)


def _partition(run: dg.DagsterRun) -> str:
    """The one partition a backfill run materializes (its partition range of one key)."""
    start, end = run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]
    assert start == end, run.tags
    return start


def _runs(instance: dg.DagsterInstance) -> list:
    return list(instance.get_run_records(filters=RunsFilter()))


def _wait_for(what: str, done, daemon: subprocess.Popen, log: Path, deadline: float) -> None:  # noqa: ANN001
    while not done():
        if daemon.poll() is not None:
            raise AssertionError(f"dagster-daemon exited {daemon.returncode}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")
        time.sleep(1)


LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
  }
}
"""


def _launch_backfill(webserver: ServerProcess, asset_path: list[str]) -> str:
    """The UI's backfill of ``PARTITIONS`` of one asset through the webserver's GraphQL API; its id."""
    params = {"partitionNames": PARTITIONS, "assetSelection": [{"path": asset_path}]}
    body = {"query": LAUNCH_BACKFILL, "variables": {"params": params}}
    resp = httpx.post(f"{webserver.url}/graphql", json=body, timeout=120)
    answer = resp.json()["data"]["launchPartitionBackfill"]
    assert answer["__typename"] == "LaunchBackfillSuccess", answer
    return answer["backfillId"]


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def _by_chunk(rows: pa.Table) -> dict[str, tuple]:
    cols = [rows.column(c).to_pylist() for c in ("chunk_id", "partition", "token_start", "token_end", "vector")]
    return {cid: (p, ts, te, np.asarray(v)) for cid, p, ts, te, v in zip(*cols)}


def test_a_daemon_backfill_over_two_servers_onto_s3_survives_a_dead_server_and_a_killed_run(
    tmp_path: Path, tiny: Path
) -> None:
    with ThreadPoolExecutor(2) as pool:  # both servers start at once
        servers = list(pool.map(lambda _: start_vllm_server(tiny, max_model_len=128), range(2)))
    home, store, log = tmp_path / "home", tmp_path / "store", tmp_path / "daemon.log"
    home.mkdir()
    _write_store(store)
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    workspace = home / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_file:\n"
        f"      relative_path: {ROOT / 'tests' / 'fanout_defs.py'}\n"
        f"      working_directory: {ROOT}\n      location_name: fanout\n"
    )
    try:
        with s3_bucket("fanout") as (_, options):
            spec = {
                "servers": [s.url for s in servers],
                "model": str(tiny),
                "db": "s3://fanout/db",
                "storage_options": options,
                "store": str(store),
                "partitions": PARTITIONS,
            }
            table, _ = build(spec)
            job = table.jobs[0].name
            env = {
                **os.environ,
                "DAGSTER_HOME": str(home),
                "PYTHONPATH": str(ROOT),
                SPEC_ENV: json.dumps(spec),
                TEST_KILL_ENV: f"during_commit@{KILLED}",
                TEST_KILL_ONCE_ENV: str(home / "killed-once"),
            }
            # the instance's SQLite storage is created here, before two processes would race to create it
            instance = dg.DagsterInstance.from_config(str(home))
            with open(log, "wb") as fh:
                daemon = subprocess.Popen(
                    [sys.executable, "-c", DAEMON, "run", "-w", str(workspace)],
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            webserver = start_dagster_webserver(workspace, env)
            try:
                t0 = time.monotonic()
                deadline = t0 + DEADLINE_S
                backfill_id = _launch_backfill(webserver, list(table.chunk_asset.key.path))
                # fault (a): one server dies once the first run has succeeded; the others go on without it
                _wait_for(
                    "a first successful run",
                    lambda: any(r.dagster_run.status == DagsterRunStatus.SUCCESS for r in _runs(instance)),
                    daemon,
                    log,
                    deadline,
                )
                os.killpg(servers[1].proc.pid, signal.SIGKILL)
                servers[1].proc.wait(30)

                def finished() -> bool:
                    backfill = instance.get_backfill(backfill_id)
                    return backfill is not None and backfill.status in BULK_ACTION_TERMINAL_STATUSES

                _wait_for("the backfill to end", finished, daemon, log, deadline)
                fanout_s = time.monotonic() - t0
                assert instance.get_backfill(backfill_id).status == BulkActionStatus.COMPLETED_SUCCESS
            finally:
                webserver.stop(20)
                os.killpg(daemon.pid, signal.SIGTERM)
                try:
                    daemon.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(daemon.pid, signal.SIGKILL)

            runs = _runs(instance)
            assert {r.dagster_run.tags.get("dagster/backfill") for r in runs} == {backfill_id}
            by_partition: dict[str, list] = {}
            for r in runs:
                by_partition.setdefault(_partition(r.dagster_run), []).append(r)
            # one run per partition, but the killed one: it failed and Dagster's run retry re-ran it
            assert {p: len(v) for p, v in by_partition.items()} == {p: 2 if p == KILLED else 1 for p in PARTITIONS}
            (failed,) = [r for r in by_partition[KILLED] if r.dagster_run.status == DagsterRunStatus.FAILURE]
            (retry,) = [r for r in by_partition[KILLED] if r.dagster_run.is_success]
            assert retry.dagster_run.tags.get("dagster/parent_run_id") == failed.dagster_run.run_id
            winners = {
                p: next(r for r in v if r.dagster_run.is_success).dagster_run.run_id for p, v in by_partition.items()
            }
            # the runs overlapped in time (from the run records), at most MAX_CONCURRENT_RUNS at once
            spans = [(r.start_time, r.end_time) for r in runs if r.start_time and r.end_time]
            overlap = _max_overlap(spans)
            assert 2 <= overlap <= MAX_CONCURRENT_RUNS, spans
            # every asset check of every successful run passed
            for p, run_id in winners.items():
                evaluations = [
                    e.dagster_event.event_specific_data
                    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
                ]
                assert len(evaluations) >= 5 and all(e.passed for e in evaluations), (p, evaluations)
            # every partition's rows exactly once, from one run each: the winning run of the partition
            rows = lancedb.connect(spec["db"], storage_options=options).open_table(sink.CHUNK_TABLE).to_arrow()
            ids = rows.column("chunk_id").to_pylist()
            assert len(ids) == len(set(ids))
            for p in PARTITIONS:
                mine = rows.filter(pa.compute.equal(rows.column("partition"), p))
                assert set(mine.column("run_id").to_pylist()) == {winners[p]}, p

        # the right answer: the same partitions in this process, one after another, on the surviving server
        ref_table, ref_defs = build({**spec, "servers": [servers[0].url], "db": str(tmp_path / "ref")})
        t1 = time.monotonic()
        with dg.DagsterInstance.ephemeral() as ephemeral:
            for p in PARTITIONS:
                result = ref_defs.resolve_job_def(job).execute_in_process(partition_key=p, instance=ephemeral)
                assert result.success
        one_s = time.monotonic() - t1
        want = _by_chunk(lancedb.connect(str(tmp_path / "ref")).open_table(sink.CHUNK_TABLE).to_arrow())
        got = _by_chunk(rows)
        assert set(got) == set(want) and len(got) > len(PARTITIONS) * 4  # more chunks than documents
        for cid, (p, ts, te, v) in want.items():
            gp, gts, gte, gv = got[cid]
            assert (gp, gts, gte) == (p, ts, te)
            np.testing.assert_allclose(gv, v, atol=1e-5, rtol=0)
        print(
            f"fan-out: {len(runs)} runs ({overlap} at once at most) in {fanout_s:.0f} s; the same "
            f"{len(PARTITIONS)} partitions in one process: {one_s:.0f} s (ratio {fanout_s / one_s:.2f})"
        )
    finally:
        for s in servers:
            s.stop(10)
