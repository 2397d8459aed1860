"""Both fronts run one shard job (issue 35): the same table URI and the same transformers engine.

Before the shard job, Dagster's summary kept a database URI's trailing ``/`` (``db//chunks``) where
Airflow's stripped it, and Airflow could not give the transformers engine its ``device`` or its
padded tokens per forward pass. The expected values here are written from the database path and
the settings given, not from the code under test: a real Dagster run (the test module's vLLM
engine), a real Airflow hook on a real connection, and real transformers engines on the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latechunk_dagster import FixedTokens, LateChunker
from tests import airflow_env  # sets AIRFLOW_HOME before airflow is imported
from tests.conftest import session_engine_resource
from tests.test_pipeline import write_store

DOCS = {
    "alpha/acme.txt": "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day.",
    "alpha/owls.txt": "Owls hunt at night. Their feathers make their flight almost silent.",
}


def dagster_summary(chunker: LateChunker, store: Path, uri: str) -> tuple[dict, dict]:
    """A real Dagster run of partition ``alpha``: its partition metadata and its run metadata, as values."""
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.sources.files import DocumentStore

    table = late_chunk_assets(index=False, job_name="chunk", strategy=FixedTokens(chunk_size=16), parity_check=False)
    defs = table.to_definitions(
        resources={
            "engine": session_engine_resource(chunker),
            "lancedb": LanceDBResource(uri=uri),
            "store": DocumentStoreResource(path=str(store)),
        }
    )
    with dg.instance_for_test() as instance:
        sync_partitions(instance, DocumentStore.from_path(store), table.partitions_def)
        result = defs.resolve_job_def("chunk").execute_in_process(instance=instance, partition_key="alpha")
        assert result.success
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=table.chunk_keys[0]), limit=5).records
        by_partition = [r for r in records if r.asset_materialization.partition == "alpha"]
        metadata = [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in by_partition]
    partition = next(m for m in metadata if "documents_in" in m)
    run = next(m for m in metadata if "dagster/uri" in m)
    return partition, run


def test_both_fronts_name_the_table_by_one_uri(
    chunker: LateChunker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
    from latechunk_dagster.airflow.tasks import chunk_shard

    assert airflow_env.HOME.exists()
    store = write_store(tmp_path / "store", DOCS)
    expected = {}
    for front in ("airflow", "dagster"):
        db_dir = tmp_path / front
        expected[front] = f"{db_dir}/chunks"  # one "/" between the database and the table
        uri = f"{db_dir}/"  # as a user may write it
        if front == "airflow":
            monkeypatch.setenv("AIRFLOW_CONN_VECTORS", json.dumps({"conn_type": "lancedb", "host": uri}))
            summary = chunk_shard(
                chunker,
                LanceDBHook("vectors").get_settings(),
                str(store),
                "alpha",
                FixedTokens(chunk_size=16),
                table_name="chunks",
                rejected_table_name="rejected_documents",
                run_id="airflow-run",
            )
            assert summary["table_uri"] == expected[front]
            assert summary["granularities"][""]["table_uri"] == expected[front]
        else:
            partition, run = dagster_summary(chunker, store, uri)
            assert partition["table_uri"] == expected[front]
            assert run["dagster/uri"] == expected[front]
            assert run["dagster/row_count"] == partition["partition_rows"] > 0
            assert [c.name for c in run["dagster/column_schema"].columns][:2] == ["chunk_id", "doc_id"]


def test_both_fronts_start_the_transformers_engine_with_the_same_settings(minilm_dir: Path) -> None:
    from latechunk_dagster.airflow.engine import task_settings
    from latechunk_dagster.integration.resources import TransformersEngineResource

    settings = {"engine": "transformers", "device": "cpu", "forward_tokens": 512, "batch_tokens": 4096}
    spec, shard = task_settings(settings, model=str(minilm_dir))
    resource = TransformersEngineResource(model=str(minilm_dir), device="cpu", batch_tokens=512)
    assert spec.transformers == resource.transformers_settings()
    assert shard.batch_tokens == 4096  # the shard run's document tokens per engine call, a setting of its own
    with spec.start() as airflow_chunker, resource._start() as dagster_chunker:
        for chunker in (airflow_chunker, dagster_chunker):
            assert chunker.settings.engine == "transformers"
            assert chunker.engine.batch_tokens == 512 and chunker.engine.device.type == "cpu"
        text = "Owls hunt at night. Their feathers make their flight almost silent."
        [a] = airflow_chunker.chunk([text], FixedTokens(chunk_size=8))
        [d] = dagster_chunker.chunk([text], FixedTokens(chunk_size=8))
        assert a.vectors.tobytes() == d.vectors.tobytes()


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"device": "cpu"}, "device='cpu'"),
        ({"forward_tokens": 512}, "forward_tokens=512"),
        ({"engine": "transformers", "forward_tokens": 0}, "forward_tokens must be an integer >= 1"),
    ],
)
def test_transformers_settings_are_refused_where_they_do_not_apply(settings: dict, named: str) -> None:
    from latechunk_dagster.airflow.engine import task_settings

    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        task_settings(settings, model="/models/m")


def test_operators_hold_one_hook_and_on_kill_stops_only_the_engine_they_started(minilm_dir: Path) -> None:
    from latechunk_dagster.airflow.engine import open_chunker, use_chunker
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
    from latechunk_dagster.airflow.operators import (
        LateChunkChecksOperator,
        LateChunkIndexOperator,
        LateChunkPromoteOperator,
        LateChunkShardOperator,
        ListShardsOperator,
    )

    ops = [
        ListShardsOperator(task_id="l", store_path="s", lancedb_conn_id="vectors"),
        LateChunkChecksOperator(task_id="c", store_path="s", lancedb_conn_id="vectors"),
        LateChunkIndexOperator(task_id="i", lancedb_conn_id="vectors"),
        LateChunkPromoteOperator(task_id="p", lancedb_conn_id="vectors"),
    ]
    settings = {"engine": "transformers", "device": "cpu"}
    shard = LateChunkShardOperator(
        task_id="t", store_path="s", shard="a", model=str(minilm_dir), settings=settings, lancedb_conn_id="vectors"
    )
    for op in [*ops, shard]:
        assert isinstance(op.hook, LanceDBHook) and op.hook is op.hook and op.hook.lancedb_conn_id == "vectors"
    shard.on_kill()  # nothing started: nothing to stop
    started = shard.engine_spec().start()
    shard._engine = started  # what execute records while its engine runs
    shard.on_kill()
    assert started.engine is None  # closed: the engine's processes and memory are released
    with LateChunker(minilm_dir, engine="transformers") as handed, use_chunker(handed):
        with open_chunker(shard.engine_spec()) as chunker:
            assert chunker is handed  # execute records no engine of its own for a handed-over chunker
        shard.on_kill()
        assert handed.engine is not None
