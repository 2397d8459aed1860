"""Real Airflow DAG runs (``dag.test()``, in process) of the example DAG with the real vLLM engine.

The operators encode with the test module's engine (``use_chunker``: one in-process vLLM engine
per process); Airflow, its metadata database (sqlite in a temp AIRFLOW_HOME), XCom, asset events
and LanceDB are real. The rows are compared with what the Dagster asset writes for the same store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, sink
from latechunk_dagster.airflow.engine import use_chunker
from tests import airflow_env  # sets AIRFLOW_HOME: none of the imports above imports airflow
from tests.conftest import SHARED_ENGINE, session_engine_resource
from tests.test_pipeline import DOCS, write_store

EXAMPLE = Path(__file__).resolve().parents[1] / "latechunk_dagster/airflow/example_dags/example_late_chunk.py"
#: What the Dagster asset and the Airflow task must write alike (everything but lineage of the run).
SAME = [
    "chunk_id",
    "doc_id",
    "partition",
    "chunk_index",
    "token_start",
    "token_end",
    "char_start",
    "char_end",
    "doc_tokens",
    "text",
    "doc_sha256",
    "vector_config",
    "strategy",
    "strategy_params",
    "model_sha256",
    "head",
]


def load_dag_file(path: Path, name: str) -> ModuleType:
    """Copy ``path`` into the dags folder (``dag.test()`` needs the DAG in a bundle) and import it."""
    target = airflow_env.DAGS / path.name
    if path != target:
        shutil.copy(path, target)
    spec = importlib.util.spec_from_file_location(name, target)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def set_lancedb_connection(db: Path) -> None:
    os.environ["AIRFLOW_CONN_LANCEDB_DEFAULT"] = json.dumps({"conn_type": "lancedb", "host": str(db)})


def run(dag: Any, chunker: LateChunker, **conf: Any) -> Any:
    """One ``dag.test()`` run with the shared engine; the finished DagRun."""
    with use_chunker(chunker):
        return dag.test(run_conf=conf)


def states(dr: Any) -> dict[tuple[str, int], str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {(ti.task_id, ti.map_index): str(ti.state) for ti in dr.get_task_instances(session=session)}


def try_numbers(dr: Any) -> dict[tuple[str, int], int]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {(ti.task_id, ti.map_index): ti.try_number for ti in dr.get_task_instances(session=session)}


def xcoms(dr: Any, task_id: str) -> dict[int, Any]:
    """The task's return values by map index."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            XComModel.get_many(run_id=dr.run_id, dag_ids=dr.dag_id, task_ids=task_id, key="return_value")
        ).all()
        return {r.map_index: XComModel.deserialize_value(r) for r in rows}


def by_partition(dr: Any) -> dict[str, dict[str, Any]]:
    return {v["partition"]: v for v in xcoms(dr, "late_chunk").values()}


@contextlib.contextmanager
def own_store(env: dict[str, Any], tmp_path: Path, docs: dict[str, str]) -> Iterator[tuple[Path, Path, dict]]:
    """A store of ``docs`` and a LanceDB directory of this test's own (the connection points at it
    until the block ends). Yields ``(store, table directory, the DAG's run conf)``."""
    store, db = write_store(tmp_path / "store", docs), tmp_path / "lancedb"
    set_lancedb_connection(db)
    try:
        yield store, db, {**env["conf"], "store_path": str(store)}
    finally:
        set_lancedb_connection(env["db"])


def table(db: Path, name: str = "chunks") -> pa.Table:
    return sink.connect(str(db)).open_table(name).to_arrow().sort_by("chunk_id")


@pytest.fixture(scope="module")
def env(tmp_path_factory, chunker: LateChunker, minilm_dir: Path) -> Iterator[dict[str, Any]]:
    airflow_env.init_db()
    root = tmp_path_factory.mktemp("airflow")
    store, db = write_store(root / "store", DOCS), root / "lancedb"
    set_lancedb_connection(db)
    module = load_dag_file(EXAMPLE, "example_late_chunk_under_test")
    conf = {"store_path": str(store), "model": str(minilm_dir)}
    first = run(module.dag, chunker, **conf)
    yield {"root": root, "store": store, "db": db, "dag": module.dag, "conf": conf, "first": first}
    os.environ.pop("AIRFLOW_CONN_LANCEDB_DEFAULT", None)
    sys.modules.pop("example_late_chunk_under_test", None)


def test_every_shard_materialized_and_checks_pass(env) -> None:
    dr = env["first"]
    assert str(dr.state) == "success", states(dr)
    got = states(dr)
    assert got[("list_shards", -1)] == "success"
    assert sorted(k for k in got if k[0] == "late_chunk") == [("late_chunk", 0), ("late_chunk", 1), ("late_chunk", 2)]
    assert set(got.values()) == {"success"}
    results = by_partition(dr)
    assert sorted(results) == ["alpha", "beta", "gamma"]
    alpha = results["alpha"]
    assert alpha["documents_in"] == 3 and alpha["documents_rejected"] == 1 and alpha["documents_skipped"] == 0
    assert alpha["rejected_reasons"] == {"empty_text": 1}
    assert alpha["table_uri"] == f"{env['db']}/chunks" and alpha["version"] >= 1
    assert "vector" not in json.dumps(results)  # a small summary: no vectors through XCom
    rows = table(env["db"])
    assert rows.num_rows == sum(r["partition_rows"] for r in results.values())
    assert set(rows.column("doc_id").to_pylist()) == set(DOCS) - {"alpha/empty.txt"}
    # the bad document is recorded as rejected, the other documents of its shard are written
    rejected = sink.connect(str(env["db"])).open_table("rejected_documents").to_arrow().to_pylist()
    assert [(r["doc_id"], r["partition"], r["reason"]) for r in rejected] == [
        ("alpha/empty.txt", "alpha", "empty_text")
    ]
    [checks] = xcoms(dr, "checks").values()
    assert list(checks) == [
        "vectors_valid",
        "spans_tile",
        "unique_chunk_ids",
        "documents_accounted",
        "row_count_matches",
    ]
    assert all(c["passed"] for c in checks.values())
    [index] = xcoms(dr, "index").values()
    assert index["rows"] == rows.num_rows and index["recall_ok"] is True


def test_rows_identical_to_the_dagster_asset(env, tmp_path: Path, chunker: LateChunker) -> None:
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.sources.files import DocumentStore

    SHARED_ENGINE["chunker"] = chunker
    tables = late_chunk_assets(index=False, parity_check=False, job_name="chunk")
    dagster_db = tmp_path / "dagster_lancedb"
    defs = tables.to_definitions(
        resources={
            "engine": session_engine_resource(chunker),
            "lancedb": LanceDBResource(uri=str(dagster_db)),
            "store": DocumentStoreResource(path=str(env["store"])),
        }
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(env["store"]), tables.partitions_def)
        result = defs.resolve_job_def("chunk").execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": "alpha", "dagster/asset_partition_range_end": "gamma"},
        )
        assert result.success
    # one shard run, one set of names (issue 28, 1): each partition's metadata holds exactly the
    # summary keys Airflow's task returns, besides the run-level keys of the asset's materialization
    from latechunk_dagster.pipeline.shard import GRANULARITY_KEYS, SUMMARY_KEYS

    run_level = {"dagster/row_count", "dagster/uri", "dagster/column_schema", "version", "model", "model_sha256"}
    run_level |= {"strategy", "engine_path", "engine", "vllm_version", "code_version"}
    airflow_keys = {tuple(sorted(r)) for r in xcoms(env["first"], "late_chunk").values()}
    assert airflow_keys == {tuple(sorted(SUMMARY_KEYS))}
    # one strategy: the one granularity "" repeats the top-level values (several granularities:
    # tests/test_airflow_granularities.py compares them with Dagster's granularity assets)
    for r in xcoms(env["first"], "late_chunk").values():
        [(name, mine)] = r["granularities"].items()
        assert name == "" and tuple(mine) == GRANULARITY_KEYS
        assert all(mine[k] == r[k] for k in GRANULARITY_KEYS), mine
    for event in result.get_asset_materialization_events():
        metadata = event.event_specific_data.materialization.metadata
        published = set(metadata) - {k for k in metadata if k.startswith("run_") and k != "run_id"}
        assert published - run_level == set(SUMMARY_KEYS) - run_level, event.partition
        assert set(SUMMARY_KEYS) <= set(metadata)
    ours, theirs = table(env["db"]), table(dagster_db)
    assert ours.num_rows == theirs.num_rows > 0
    for column in SAME:
        assert ours.column(column).to_pylist() == theirs.column(column).to_pylist(), column
    # shape: [n_rows, 384]; bit for bit the same vectors
    a = np.stack(ours.column("vector").to_numpy(zero_copy_only=False))
    b = np.stack(theirs.column("vector").to_numpy(zero_copy_only=False))
    assert a.shape == b.shape and np.array_equal(a, b)


def test_lineage_run_id_and_asset_events(env) -> None:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dr = env["first"]
    index_of = {v["partition"]: k for k, v in xcoms(dr, "late_chunk").items()}
    rows = table(env["db"]).select(["partition", "run_id"]).to_pylist()
    assert {(r["partition"], r["run_id"]) for r in rows} == {(p, f"{dr.run_id}#{i}") for p, i in index_of.items()}
    with create_session() as session:
        events = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == "lancedb://lancedb_default/chunks", AssetEvent.source_run_id == dr.run_id)
        ).all()
        got = {(e.partition_key, e.source_map_index, e.extra["version"], e.extra["table_uri"]) for e in events}
    results = by_partition(dr)
    assert got == {(p, index_of[p], results[p]["version"], f"{env['db']}/chunks") for p in results}


def test_second_run_encodes_nothing(env, chunker: LateChunker) -> None:
    before = table(env["db"])
    dr = run(env["dag"], chunker, **env["conf"])
    assert str(dr.state) == "success", states(dr)
    results = by_partition(dr)
    assert {p: r["tokens_encoded"] for p, r in results.items()} == {"alpha": 0, "beta": 0, "gamma": 0}
    assert {p: r["documents_reencoded"] for p, r in results.items()} == {"alpha": 1, "beta": 0, "gamma": 0}
    # alpha's rejected empty document has no rows, so it is tried again (and rejected again)
    assert results["alpha"]["documents_skipped"] == 2 and results["alpha"]["documents_rejected"] == 1
    after = table(env["db"])
    assert after.to_pylist() == before.to_pylist()  # skipped rows are not rewritten (run_id kept)


def test_edited_removed_and_added_documents(env, chunker: LateChunker) -> None:
    store = env["store"]
    edited = "Acme Corp. now builds valves in Delft. Its service team answers within an hour."
    (store / "alpha" / "acme.txt").write_text(edited)
    (store / "beta" / "owls.txt").unlink()
    (store / "gamma" / "coffee.txt").write_text("Coffee cherries are dried in the sun for about three weeks.")
    dr = run(env["dag"], chunker, **env["conf"])
    assert str(dr.state) == "success", states(dr)
    results = by_partition(dr)
    assert results["alpha"]["documents_reencoded"] == 2 and results["alpha"]["documents_skipped"] == 1
    assert results["beta"]["documents_deleted"] == 1 and results["beta"]["tokens_encoded"] == 0
    assert results["gamma"]["documents_new"] == 1 and results["gamma"]["documents_skipped"] == 1
    rows = table(env["db"]).to_pylist()
    docs = {r["doc_id"] for r in rows}
    assert "beta/owls.txt" not in docs and "gamma/coffee.txt" in docs
    acme = sorted((r for r in rows if r["doc_id"] == "alpha/acme.txt"), key=lambda r: r["chunk_index"])
    assert "".join(r["text"] for r in acme) == edited and acme[0]["run_id"].startswith(dr.run_id)
    [checks] = xcoms(dr, "checks").values()
    assert all(c["passed"] for c in checks.values())


def test_systemic_failure_fails_its_task_and_keeps_old_rows(env, tmp_path: Path, chunker: LateChunker) -> None:
    docs = {
        "good/one.txt": "The river floods every spring. Farmers plant after the water recedes.",
        "bad/a.txt": "Glass is made from sand, soda and lime melted at high heat.",
        "bad/b.txt": "Bronze is an alloy of copper and tin.",
    }
    with own_store(env, tmp_path, docs) as (store, db, conf):
        assert str(run(env["dag"], chunker, **conf).state) == "success"
        old = table(db).filter(pa.compute.equal(table(db).column("partition"), "bad"))
        assert old.num_rows >= 2
        (store / "bad" / "a.txt").write_text("   ")
        (store / "bad" / "b.txt").write_text("\n\n")
        (store / "good" / "one.txt").write_text("The river floods every spring and every autumn.")
        dr = run(env["dag"], chunker, **conf)
        assert str(dr.state) == "failed"
        got = states(dr)
        index_of = {s: i for i, s in enumerate(["bad", "good"])}
        assert got[("late_chunk", index_of["bad"])] == "failed"
        assert got[("late_chunk", index_of["good"])] == "success"
        assert got[("checks", -1)] == "upstream_failed" and got[("index", -1)] == "upstream_failed"
        assert try_numbers(dr)[("late_chunk", index_of["bad"])] == 1  # a systemic failure is not retried
        rows = table(db)
        kept = rows.filter(pa.compute.equal(rows.column("partition"), "bad"))
        assert kept.to_pylist() == old.to_pylist()  # the failed shard's old rows, untouched
        good = rows.filter(pa.compute.equal(rows.column("partition"), "good")).to_pylist()
        assert good[0]["text"].startswith("The river floods every spring and every autumn.")
        rejected = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
        assert [(r["doc_id"], r["partition"], r["reason"]) for r in rejected] == [("*", "bad", "systemic_failure")]


def test_readme_airflow_example_runs_as_written(
    env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunker: LateChunker, capfd: pytest.CaptureFixture[str]
) -> None:
    """The README's DAG file, run as written; its successful run logs no error line (issue 40.5:
    every run logged ``[error] XCom not found ... 404`` when the checks task read the mapped
    task's values one offset at a time, to the one past the end)."""
    from tests.doc_examples import example
    from tests.test_readme import write_store as write_readme_store

    project = tmp_path / "project"
    project.mkdir()
    write_readme_store(project)  # data/documents: shards pumps, owls
    monkeypatch.chdir(project)
    name, value = re.fullmatch(r"export (\w+)='(.*)'", example("airflow-connection").strip()).groups()
    monkeypatch.setenv(name, value)
    dag_file = airflow_env.DAGS / "latechunk_dag.py"
    dag_file.write_text(example("latechunk_dag.py"))
    try:
        module = load_dag_file(dag_file, "readme_latechunk_dag")
        capfd.readouterr()
        dr = run(module.dag, chunker)
        assert str(dr.state) == "success", states(dr)
        assert sorted(v["partition"] for v in xcoms(dr, "late_chunk").values()) == ["owls", "pumps"]
        logged = capfd.readouterr()
        errors = [line for line in (logged.out + logged.err).splitlines() if re.search(r"\[error|\bERROR\b", line)]
        assert errors == [] and "Pushing xcom" in logged.out + logged.err  # the run's log was read
    finally:
        dag_file.unlink()
        sys.modules.pop("readme_latechunk_dag", None)
    rows = sink.connect(str(project / "data" / "lancedb")).open_table("chunks_minilm").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == {"pumps/acme.txt", "owls/owl.md"}


def test_list_shards_names_an_undecodable_shard_and_lists_the_others(tmp_path: Path) -> None:
    """The issue-16 store (a Latin-1 shard name beside a good shard) through what the list operator
    runs (its task logger goes in as ``log``): the good shard is listed, the bad one is named in a
    warning, nothing raises."""
    import logging

    from latechunk_dagster.airflow.tasks import list_shards
    from tests.test_hostile_inputs import text_tree

    seen: list[str] = []
    log = logging.getLogger("test.list_shards")
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        assert list_shards(str(text_tree(tmp_path / "tree")), log).shards == ("good",)
    finally:
        log.removeHandler(handler)
    [warning] = [m for m in seen if "skipped:" in m]
    assert "caf\\xe9" in warning and "not valid UTF-8" in warning


def test_a_shard_that_left_the_store_has_its_rows_deleted(env, tmp_path: Path, chunker: LateChunker) -> None:
    """The example DAG (``ListShardsOperator(table_name=...)``) after a whole shard directory is
    removed: its chunk and rejection rows are deleted; the other shard's rows are untouched."""
    docs = {
        "stay/one.txt": "The river floods every spring. Farmers plant after the water recedes.",
        "leave/a.txt": "Glass is made from sand, soda and lime melted at high heat.",
        "leave/blank.txt": "   ",
    }
    with own_store(env, tmp_path, docs) as (store, db, conf):
        assert str(run(env["dag"], chunker, **conf).state) == "success"
        assert set(table(db).column("partition").to_pylist()) == {"stay", "leave"}
        stay = table(db).filter(pa.compute.equal(table(db).column("partition"), "stay"))
        rejected = sink.connect(str(db)).open_table("rejected_documents")
        assert [r["partition"] for r in rejected.to_arrow().to_pylist()] == ["leave"]
        shutil.rmtree(store / "leave")
        dr = run(env["dag"], chunker, **conf)
        assert str(dr.state) == "success", states(dr)
        assert table(db).to_pylist() == stay.to_pylist()
        assert sink.connect(str(db)).open_table("rejected_documents").count_rows() == 0
        [checks] = xcoms(dr, "checks").values()
        assert all(c["passed"] for c in checks.values())


def test_a_single_file_store_cut_mid_write_fails_the_listing_and_deletes_nothing(
    env, tmp_path: Path, chunker: LateChunker
) -> None:
    """Issue 27, 1: the example DAG over one JSONL file with a ``shard`` column; while the file is
    half rewritten (cut inside a line of shard b) the list task fails naming the file, and no row of
    any shard is deleted."""
    lines = [
        json.dumps({"id": f"{s}{i}", "text": f"Text {i} of shard {s}.", "shard": s}) for s in "abc" for i in (1, 2)
    ]
    whole = "".join(line + "\n" for line in lines)
    with own_store(env, tmp_path, {}) as (_, db, conf):
        path = tmp_path / "docs.jsonl"
        path.write_text(whole)
        conf = {**conf, "store_path": str(path)}
        assert str(run(env["dag"], chunker, **conf).state) == "success"
        before = table(db)
        assert set(before.column("partition").to_pylist()) == {"a", "b", "c"}
        path.write_text(whole[: whole.index('"b2"') + 6])
        dr = run(env["dag"], chunker, **conf)
        assert str(dr.state) == "failed" and states(dr)[("list_shards", -1)] == "failed"
        assert table(db).to_pylist() == before.to_pylist()


def test_more_shards_than_airflow_maps_fail_the_listing_naming_the_setting(
    env, tmp_path: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27, 11: a store of more shards than ``[core] max_map_length`` fails the list task with a
    line naming the setting (the mapped task would fail later with a vague one)."""
    from airflow.sdk.exceptions import AirflowFailException

    from latechunk_dagster.airflow.operators import ListShardsOperator

    store = write_store(tmp_path / "store", {f"s{i}/doc.txt": f"Document of shard {i}." for i in range(4)})
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "3")
    with pytest.raises(AirflowFailException, match=r"4 shards.*max_map_length = 3.*AIRFLOW__CORE__MAX_MAP_LENGTH"):
        ListShardsOperator(task_id="shards", store_path=str(store)).execute({})
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "4")
    assert ListShardsOperator(task_id="shards", store_path=str(store)).execute({}) == ["s0", "s1", "s2", "s3"]


def test_the_list_task_refuses_to_remove_most_partitions_and_names_them(env, tmp_path: Path) -> None:
    """Issue 40, 1: the list task pointed at another folder (complete, sharing no shard) would delete
    every row of the table; it fails (no retry) naming the partitions and their rows, and deletes
    nothing. ``max_delete="100%"`` (the user says so) removes them (on a copy of the table)."""
    from airflow.sdk.exceptions import AirflowFailException

    from latechunk_dagster.airflow.operators import ListShardsOperator

    other = write_store(tmp_path / "other", {"delta/doc.txt": "A different folder: notes about bicycles."})
    before = table(env["db"])
    known = sorted(set(before.column("partition").to_pylist()))
    assert len(known) >= 2
    named = ", ".join(repr(p) for p in known)
    with pytest.raises(AirflowFailException) as err:
        ListShardsOperator(task_id="list_shards", store_path=str(other), table_name="chunks").execute({})
    message = str(err.value)
    assert f"refusing to remove {len(known)} of {len(known)} known partitions at once" in message
    assert f"their shards are not in the store: {named} holding" in message
    assert f"{before.num_rows} chunks" in message and "ListShardsOperator(max_delete=1.0)" in message
    assert table(env["db"]).equals(before)
    copy = tmp_path / "lancedb"
    shutil.copytree(env["db"], copy)
    set_lancedb_connection(copy)
    try:
        told = ListShardsOperator(task_id="list_shards", store_path=str(other), table_name="chunks", max_delete="100%")
        assert told.execute({}) == ["delta"]
    finally:
        set_lancedb_connection(env["db"])
    assert table(copy).num_rows == 0 and table(env["db"]).equals(before)


HOST_WORKERS_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from latechunk_dagster.airflow.operators import LateChunkShardOperator

with DAG(dag_id="latechunk_host_workers", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    LateChunkShardOperator(
        task_id="late_chunk", store_path=STORE, shard="alpha", model=MODEL, strategy="sentences",
        settings={"host_workers": 1},
    )
"""


def test_host_workers_of_the_operator_reach_the_partition(env, tmp_path: Path, chunker: LateChunker) -> None:
    """``LateChunkShardOperator(settings={"host_workers": 1})``: the shard's host work runs in a worker process (the
    chunker's pool of one), and its rows equal the example DAG's in-process rows; -1 is refused."""
    from latechunk_dagster.airflow.operators import LateChunkShardOperator
    from latechunk_dagster.pipeline import hostpool

    hostpool.shutdown_host_pools()
    dag_file = airflow_env.DAGS / "latechunk_host_workers.py"
    model = env["conf"]["model"]
    dag_file.write_text(f"STORE = {str(env['store'])!r}\nMODEL = {model!r}\n" + HOST_WORKERS_DAG)
    db = tmp_path / "lancedb"
    set_lancedb_connection(db)
    try:
        module = load_dag_file(dag_file, "host_workers_dag_under_test")
        dr = run(module.dag, chunker)
        assert str(dr.state) == "success", states(dr)
        assert 1 in hostpool._POOLS.get(chunker, {})
    finally:
        hostpool.shutdown_host_pools()
        set_lancedb_connection(env["db"])
        dag_file.unlink()
        sys.modules.pop("host_workers_dag_under_test", None)
    want = table(env["db"]).filter(pa.compute.equal(table(env["db"]).column("partition"), "alpha"))
    got = table(db)
    assert got.select(SAME).to_pylist() == want.select(SAME).to_pylist()  # vectors aside: within 1e-6 below
    np.testing.assert_allclose(
        np.array(got.column("vector").to_pylist()), np.array(want.column("vector").to_pylist()), atol=1e-6
    )
    with pytest.raises(ValueError, match=r"host_workers=-1: expected an integer >= 0"):
        LateChunkShardOperator(task_id="bad", store_path="s", shard="a", settings={"host_workers": -1})


LIGHT_ENGINE_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from latechunk_dagster.airflow.operators import LateChunkShardOperator

with DAG(dag_id="latechunk_light_engine", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    LateChunkShardOperator(
        task_id="late_chunk", store_path=STORE, shard="alpha", model=MODEL, strategy="sentences",
        settings={"engine": "transformers"},
    )
"""


def test_the_operator_encodes_on_the_transformers_engine(env, tmp_path: Path, chunker: LateChunker) -> None:
    """``LateChunkShardOperator(settings={"engine": "transformers"})`` (issue 30): the task starts the light engine
    itself (this process holds a live in-process vLLM engine, beside which no other vLLM engine could
    start); its rows are the example DAG's vLLM rows within 1e-6 and name the engine, and their
    ``vector_config`` differs (a switch of engine re-encodes). vLLM settings given to it, and a
    shared chunker of the other engine, are refused by name."""
    import transformers

    from latechunk_dagster.airflow.engine import EngineSpec, open_chunker
    from latechunk_dagster.airflow.operators import LateChunkShardOperator

    dag_file = airflow_env.DAGS / "latechunk_light_engine.py"
    dag_file.write_text(f"STORE = {str(env['store'])!r}\nMODEL = {env['conf']['model']!r}\n" + LIGHT_ENGINE_DAG)
    db = tmp_path / "lancedb"
    set_lancedb_connection(db)
    try:
        module = load_dag_file(dag_file, "light_engine_dag_under_test")
        dr = module.dag.test()  # no use_chunker: the task starts its own (transformers) engine
        assert str(dr.state) == "success", states(dr)
        assert [x["engine"] for x in xcoms(dr, "late_chunk").values()] == ["transformers"]
    finally:
        set_lancedb_connection(env["db"])
        dag_file.unlink()
        sys.modules.pop("light_engine_dag_under_test", None)
    want = table(env["db"]).filter(pa.compute.equal(table(env["db"]).column("partition"), "alpha"))
    got = table(db)
    same = [c for c in SAME if c != "vector_config"]
    assert got.select(same).to_pylist() == want.select(same).to_pylist()
    np.testing.assert_allclose(
        np.array(got.column("vector").to_pylist()), np.array(want.column("vector").to_pylist()), atol=1e-6
    )
    assert set(got.column("vllm_version").to_pylist()) == {f"transformers {transformers.__version__}"}
    assert set(got.column("vector_config").to_pylist()).isdisjoint(want.column("vector_config").to_pylist())
    with pytest.raises(ValueError, match=r"engine='transformers' .* takes no dtype='bfloat16', enforce_eager=True$"):
        LateChunkShardOperator(
            task_id="bad",
            store_path="s",
            shard="a",
            settings={"engine": "transformers", "dtype": "bfloat16", "enforce_eager": True},
        )
    with pytest.raises(ValueError, match=r"engine must be one of \['vllm', 'transformers'\], got 'vlm'"):
        LateChunkShardOperator(task_id="bad", store_path="s", shard="a", settings={"engine": "vlm"})
    spec = EngineSpec(model=env["conf"]["model"], engine="transformers")
    with use_chunker(chunker), pytest.raises(ValueError, match="shared chunker runs on the vllm engine, the task"):
        with open_chunker(spec):
            pass


def test_the_operator_takes_one_settings_dict_built_into_the_values_dagster_builds() -> None:
    """``LateChunkShardOperator(settings={...})``: each key reaches the setting it names (values set
    by hand, none a default), into the same values Dagster's engine resource and run config build;
    an unknown key is refused naming it (in ``__init__`` and in ``.partial`` at parse time), and a
    setting given as a keyword of its own (the operator's old signature) is refused by Airflow."""
    from latechunk_dagster.airflow.engine import SETTINGS_KEYS
    from latechunk_dagster.airflow.operators import LateChunkShardOperator
    from latechunk_dagster.integration.assets import ChunkingConfig
    from latechunk_dagster.integration.resources import VLLMEngineResource

    vllm = {"dtype": "float16", "gpu_memory_utilization": 0.2, "tensor_parallel_size": 2, "enforce_eager": True}
    vllm["engine_args"] = {"seed": 7}
    options = {"max_model_len": 256, "engine_path": "token_states", "prefix": "doc: ", "query_prefix": "q: "}
    options |= {"dimensions": 64, "window_overlap": 32, "allow_causal": True, "allow_non_mean_pooling": True}
    options |= {"trust_remote_code": True, "blend": 0.5}
    shard = {"batch_tokens": 4096, "force": True, "max_rejected_share": 0.25, "systemic_min_documents": 3}
    settings = {**vllm, **options, **shard, "host_workers": 2, "chunks_column": "own_chunks"}
    # every key but the engine's name and the transformers engine's own (tests/test_airflow_shard_job.py)
    light = {"engine", *SETTINGS_KEYS["transformers"]}
    assert sorted(settings) == sorted(k for keys in SETTINGS_KEYS.values() for k in keys if k not in light)

    op = LateChunkShardOperator(task_id="t", store_path="s", shard="a", model="/m", settings=settings)
    spec, got = op.engine_spec(), op.shard_settings()
    assert (spec.model, spec.vllm_conn_id, spec.engine) == ("/m", None, "vllm")
    assert spec.options.kwargs() == options
    assert (spec.vllm.dtype, spec.vllm.gpu_memory_utilization, spec.vllm.tensor_parallel_size) == ("float16", 0.2, 2)
    assert (spec.vllm.enforce_eager, dict(spec.vllm.engine_args)) == (True, {"seed": 7})
    assert (got.batch_tokens, got.force, got.max_rejected_share, got.systemic_min_documents) == (4096, True, 0.25, 3)
    assert (got.host_workers, got.chunks_column) == (2, "own_chunks")
    resource = VLLMEngineResource(model="/m", host_workers=2, **vllm, **options)
    assert spec.options == resource.chunker_options()
    assert spec.vllm == resource.vllm_settings()
    assert dataclasses.replace(got, chunks_column=None) == ChunkingConfig(**shard).shard_settings(resource.host_workers)

    with pytest.raises(ValueError, match=r"'bad': settings: unknown key 'dtyp' \(did you mean 'dtype'\?\)"):
        LateChunkShardOperator(task_id="bad", store_path="s", shard="a", settings={"dtyp": "float16"})
    with pytest.raises(ValueError, match=r"unknown key 'forse' \(did you mean 'force'\?\)"):
        LateChunkShardOperator.partial(task_id="bad", store_path="s", settings={"forse": True})
    with pytest.raises(ValueError, match=r"'bad': engine='transformers' .* takes no vllm_conn_id='vllm_default'$"):
        settings = {"engine": "transformers"}
        LateChunkShardOperator(task_id="bad", store_path="s", shard="a", vllm_conn_id="vllm_default", settings=settings)
    with pytest.raises(TypeError, match=r"'bad': settings must be a dict .* got list"):
        LateChunkShardOperator(task_id="bad", store_path="s", shard="a", settings=["force"])
    with pytest.raises(TypeError, match=r"Invalid arguments were passed to LateChunkShardOperator") as exc:
        LateChunkShardOperator(task_id="bad", store_path="s", shard="a", dtype="float16")
    assert "'dtype'" in str(exc.value)
