"""Generations in real Airflow DAG runs (issue 36): shards mapped, checks, then the promote task.

A first run writes generation 1 of a definition under generations; a second run with another chunk
size writes generation 2 beside it (readers still on 1 while the shard tasks run), and its promote
task switches readers in one commit after the checks; ``latechunk rollback`` switches back.
Airflow, XCom and LanceDB are real; the operators encode with the test module's vLLM engine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from latechunk_dagster import LateChunker, sink
from latechunk_dagster.sink import generations as gens
from tests import airflow_env  # sets AIRFLOW_HOME: none of the imports above imports airflow
from tests.test_airflow import load_dag_file, run, set_lancedb_connection, states, xcoms
from tests.test_pipeline import DOCS, write_store

DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG, Param

from latechunk_dagster.airflow.operators import (
    LateChunkChecksOperator, LateChunkPromoteOperator, LateChunkShardOperator, ListShardsOperator,
)

with DAG(
    dag_id="latechunk_generations_test",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={"store_path": Param("", type="string"), "model": Param("", type="string"),
            "chunk_size": Param(12, type="integer")},
    render_template_as_native_obj=True,
) as dag:
    shards = ListShardsOperator(task_id="list_shards", store_path="{{ params.store_path }}", table_name="kb")
    chunk = LateChunkShardOperator.partial(
        task_id="late_chunk", store_path="{{ params.store_path }}", model="{{ params.model }}", table_name="kb",
        strategy="fixed_tokens", strategy_params={"chunk_size": "{{ params.chunk_size }}"},
    ).expand(shard=shards.output)
    checks = LateChunkChecksOperator(
        task_id="checks", store_path="{{ params.store_path }}", table_name="kb", results=chunk.output
    )
    promote = LateChunkPromoteOperator(task_id="promote", table_name="kb", results=chunk.output)
    chunk >> checks >> promote
"""


def _hybrid(chunker: LateChunker, db_dir: Path) -> set[str]:
    """The chunk ids a hybrid search of the served generation finds (raises without its full-text index)."""
    from latechunk_dagster.sink.search import search

    hits = search("the", chunker=chunker, uri=str(db_dir), table_name="kb", k=3, mode="hybrid")
    assert hits
    return {h.chunk_id for h in hits}


def test_a_second_chunk_size_is_built_beside_and_promoted_after_the_checks(
    tmp_path: Path, chunker: LateChunker, minilm_dir: Path
) -> None:
    from latechunk_dagster.airflow.operators.generations import promote_after_shards
    from latechunk_dagster.app.cli import main as cli_main

    airflow_env.init_db()
    store, db_dir = write_store(tmp_path / "store", DOCS), tmp_path / "lancedb"
    set_lancedb_connection(db_dir)
    db = sink.connect(str(db_dir))
    gens.enable_generations(db, "kb", sink.REJECTED_TABLE)  # what `latechunk generations --enable` does
    dag_file = airflow_env.DAGS / "latechunk_generations_test_dag.py"
    dag_file.write_text(DAG_FILE)
    conf: dict[str, Any] = {"store_path": str(store), "model": str(minilm_dir)}
    try:
        module = load_dag_file(dag_file, "generations_dag_under_test")
        first = run(module.dag, chunker, **conf, chunk_size=12)
        assert str(first.state) == "success", states(first)
        [out] = xcoms(first, "promote").values()
        # the first generation is served at once
        assert out == {"generation": 1, "previous": 1, "promoted": False, "dropped": []}
        rows_1 = sink.connect(str(db_dir)).open_table("kb").count_rows()

        second = run(module.dag, chunker, **conf, chunk_size=20)
        assert str(second.state) == "success", states(second)
        results = list(xcoms(second, "late_chunk").values())
        assert {r["generation"] for r in results} == {2} and {r["table"] for r in results} == {"kb__g2"}
        for r in results:  # each shard's commit is tagged with its run: the tag reads that version back
            entry = r["granularities"][""]
            if entry["tag"]:
                table = db.open_table("kb__g2")
                assert table.tags.list()[entry["tag"]]["version"] == entry["version"]
        [out] = xcoms(second, "promote").values()
        assert out == {"generation": 2, "previous": 1, "promoted": True, "dropped": []}
        assert gens.current_table(db, "kb") == "kb__g2"
        # the promote task indexed generation 2 before serving it (no index task in this DAG): hybrid answers
        assert _hybrid(chunker, db_dir) <= set(db.open_table("kb__g2").to_arrow().column("chunk_id").to_pylist())
        assert db.open_table("kb").count_rows() == rows_1  # generation 1 untouched, kept for rollback
        assert db.open_table("kb__g2").count_rows() == sum(r["partition_rows"] for r in results)
        [checks] = xcoms(second, "checks").values()
        assert all(c["passed"] for c in checks.values())  # on generation 2's tables

        log_version = db.open_table(gens.log_table_name("kb")).version
        assert cli_main(["rollback", "--uri", str(db_dir), "--table", "kb"]) == 0
        assert db.open_table(gens.log_table_name("kb")).version == log_version + 1
        assert gens.current_table(db, "kb") == "kb"
        assert _hybrid(chunker, db_dir) <= set(db.open_table("kb").to_arrow().column("chunk_id").to_pylist())
        with pytest.raises(ValueError, match="shards not written into it"):
            gens.writing_tables(db, "kb", sink.REJECTED_TABLE, "another-key")  # opens generation 3, empty
            promote_after_shards(db, "kb", [*results, None])
    finally:
        dag_file.unlink()
        sys.modules.pop("generations_dag_under_test", None)
        os.environ.pop("AIRFLOW_CONN_LANCEDB_DEFAULT", None)
