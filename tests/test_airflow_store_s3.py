"""An Airflow run (``dag.test()``, in process, real engine) over a document store in a moto S3 bucket,
its credentials from an ``aws`` connection (login/password, ``endpoint_url`` in extra).

The right answers: the documents uploaded here, the rows LanceDB holds after the run, and the list
task's failure with a listing cut at its second page (tests/s3_proxy.py), which deletes no row.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from latechunk_dagster import LateChunker, sink
from tests import airflow_env  # sets AIRFLOW_HOME: none of the imports above imports airflow
from tests.s3_proxy import S3Proxy, s3_proxy
from tests.servers import s3_bucket
from tests.test_airflow import load_dag_file, run, set_lancedb_connection, states, xcoms
from tests.test_store_s3 import KEY_ID, SECRET, _upload

BUCKET = "airdocs"
DOCS = {
    "rivers/spree.txt": "Berlin is the capital of Germany. The Spree flows through it.",
    "rivers/seine.md": "# Paris\n\nThe Seine flows through Paris.",
    "plants/sugar.txt": "Photosynthesis turns light, water and carbon dioxide into sugar.",
}

DAG_SOURCE = """
from datetime import datetime

from airflow.sdk import DAG, Param

from latechunk_dagster.airflow.operators.latechunk import (
    LateChunkChecksOperator, LateChunkShardOperator, ListShardsOperator,
)

with DAG(dag_id="latechunk_s3_store", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         params={"store_path": Param("", type="string"), "model": Param("", type="string")}) as dag:
    shards = ListShardsOperator(task_id="list_shards", store_path="{{ params.store_path }}", table_name="chunks",
                                store_conn_id="docs_s3")
    chunk = LateChunkShardOperator.partial(
        task_id="late_chunk", store_path="{{ params.store_path }}", model="{{ params.model }}", table_name="chunks",
        strategy="sentences", store_conn_id="docs_s3",
    ).expand(shard=shards.output)
    LateChunkChecksOperator(task_id="checks", store_path="{{ params.store_path }}", table_name="chunks",
                            results=chunk.output, store_conn_id="docs_s3")
"""


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Any, S3Proxy]]:
    with s3_bucket(BUCKET) as (srv, _), s3_proxy(srv.url) as proxy:
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT"):  # only the connection's keys
            os.environ.pop(k, None)
        yield srv, proxy


@pytest.fixture(scope="module")
def dag(tmp_path_factory, served) -> Iterator[Any]:
    _, proxy = served
    airflow_env.init_db()
    source = tmp_path_factory.mktemp("dag") / "latechunk_s3_store.py"
    source.write_text(DAG_SOURCE)
    extra = {"endpoint_url": proxy.url, "region_name": "us-east-1"}
    conn = {"conn_type": "aws", "login": KEY_ID, "password": SECRET, "extra": extra}
    os.environ["AIRFLOW_CONN_DOCS_S3"] = json.dumps(conn)
    yield load_dag_file(source, "latechunk_s3_store_under_test").dag
    os.environ.pop("AIRFLOW_CONN_DOCS_S3", None)
    sys.modules.pop("latechunk_s3_store_under_test", None)


def test_airflow_materializes_a_store_in_a_bucket_and_a_half_listing_deletes_nothing(
    dag, served, tmp_path: Path, chunker: LateChunker, minilm_dir: Path
) -> None:
    srv, proxy = served
    _upload(srv.url, "store", DOCS, bucket=BUCKET)
    db = tmp_path / "lancedb"
    set_lancedb_connection(db)
    conf = {"store_path": f"s3://{BUCKET}/store", "model": str(minilm_dir)}
    dr = run(dag, chunker, **conf)
    assert str(dr.state) == "success", states(dr)
    rows = sink.connect(str(db)).open_table("chunks").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == set(DOCS)
    assert set(rows.column("partition").to_pylist()) == {"rivers", "plants"}
    [checks] = xcoms(dr, "checks").values()
    assert all(c["passed"] for c in checks.values())
    shown = json.dumps([xcoms(dr, t) for t in ("list_shards", "late_chunk", "checks")], default=str)
    shown += str(rows.drop_columns(["vector"]).to_pylist())
    assert "rivers/spree.txt" in shown and SECRET not in shown and KEY_ID not in shown

    # the listing fails at its second page (pages of one key): the list task fails, no row is deleted
    proxy.page_size, proxy.fail_page, proxy.list_requests = 1, 2, 0
    try:
        dr = run(dag, chunker, **conf)
    finally:
        proxy.page_size = proxy.fail_page = None
    assert str(dr.state) == "failed" and states(dr)[("list_shards", -1)] == "failed"
    assert sink.connect(str(db)).open_table("chunks").to_arrow().sort_by("chunk_id").equals(rows.sort_by("chunk_id"))


def test_a_store_connection_in_the_amazon_form_becomes_storage_options() -> None:
    from airflow.models.connection import Connection

    from latechunk_dagster.airflow.hooks.store import storage_options_from_connection

    extra = {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1", "aws_session_token": "tok"}
    conn = Connection(conn_id="s", conn_type="aws", login=KEY_ID, password=SECRET, extra=json.dumps(extra))
    assert storage_options_from_connection(conn) == {
        "aws_access_key_id": KEY_ID,
        "aws_secret_access_key": SECRET,
        "aws_session_token": "tok",
        "aws_region": "eu-west-1",
        "aws_endpoint": "http://127.0.0.1:9000",
        "allow_http": "true",
    }
    gcs = Connection(conn_id="g", conn_type="aws", extra=json.dumps({"storage_options": '{"google_endpoint": "x"}'}))
    assert storage_options_from_connection(gcs) == {"google_endpoint": "x"}
    typo = Connection(conn_id="t", conn_type="aws", extra=json.dumps({"endpoint": "x"}))
    with pytest.raises(ValueError, match="unknown extra"):
        storage_options_from_connection(typo)
