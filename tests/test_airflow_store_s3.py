"""An Airflow run (``dag.test()``, in process, real engine) over a document store in a moto S3 bucket,
its credentials from an ``aws`` connection (login/password, ``endpoint_url`` in extra).

The right answers: the documents uploaded here, the rows LanceDB holds after the run, and the list
task's failure with a listing cut at its second page (tests/s3_proxy.py), which deletes no row. For a
bucket of PDF, DOCX, PPTX, HTML, Markdown and text files: each document's converted text written by
hand (tests/test_converted_materialization.py), its own headings, and Dagster's rows for the same
bucket (the same chunks and ranges, bit-equal vectors).
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
from tests.document_files import html_page
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

#: the same DAG chunking by the documents' own Markdown sections (the strategy of
#: tests/test_converted_materialization.py, whose hand-written headings and texts are the answers)
SECTIONS_DAG_SOURCE = DAG_SOURCE.replace('dag_id="latechunk_s3_store"', 'dag_id="latechunk_s3_sections"').replace(
    'strategy="sentences",', 'strategy="markdown_sections", strategy_params={"max_tokens": 64},'
)


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


@pytest.fixture(scope="module")
def sections_dag(tmp_path_factory, dag) -> Iterator[Any]:  # noqa: ARG001 - dag: the database and connection
    source = tmp_path_factory.mktemp("dag") / "latechunk_s3_sections.py"
    source.write_text(SECTIONS_DAG_SOURCE)
    yield load_dag_file(source, "latechunk_s3_sections_under_test").dag
    sys.modules.pop("latechunk_s3_sections_under_test", None)


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


def _by_doc(db: Path) -> dict[str, list[dict]]:
    rows = sink.connect(str(db)).open_table("chunks").to_arrow()
    by_doc: dict[str, list[dict]] = {}
    for row in rows.sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")]).to_pylist():
        by_doc.setdefault(row["doc_id"], []).append(row)
    return by_doc


def _dagster_rows(proxy_url: str, db: Path, home: Path, chunker: LateChunker) -> None:
    """Dagster's run of tests/test_converted_materialization.py's table over the same bucket into ``db``."""
    import dagster as dg

    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from tests.conftest import session_engine_resource
    from tests.test_converted_materialization import TABLE
    from tests.test_store_s3 import _options

    store = DocumentStoreResource(path=f"s3://{BUCKET}/files", storage_options=_options(proxy_url))
    resources = {"engine": session_engine_resource(chunker), "lancedb": LanceDBResource(uri=str(db)), "store": store}
    defs = dg.Definitions(assets=TABLE.assets, asset_checks=TABLE.asset_checks, jobs=TABLE.jobs, resources=resources)
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        sync_partitions(instance, store.get_store(), TABLE.partitions_def)
        result = defs.resolve_job_def("chunk").execute_in_process(instance=instance, partition_key="docs")
    assert result.success


def test_airflow_materializes_a_bucket_of_document_files_as_dagster_does(
    sections_dag, served, tmp_path: Path, chunker: LateChunker, minilm_dir: Path
) -> None:
    """Issue 38's done-when for Airflow: PDF, DOCX, PPTX, HTML, Markdown and text objects, bad files
    among them, in a bucket: each document's rows carry its own headings, their ranges index its
    converted text (written by hand), the bad files are rejected alone by reason, and the rows are
    Dagster's for the same bucket, vectors bit for bit."""
    import numpy as np

    from tests.test_airflow import SAME
    from tests.test_converted_materialization import BAD, GOOD, HEADINGS

    srv, proxy = served
    _upload(srv.url, "files", {doc_id: data for doc_id, (data, _) in {**GOOD, **BAD}.items()}, bucket=BUCKET)
    db = tmp_path / "lancedb"
    set_lancedb_connection(db)
    dr = run(sections_dag, chunker, store_path=f"s3://{BUCKET}/files", model=str(minilm_dir))
    assert str(dr.state) == "success", states(dr)
    by_doc = _by_doc(db)
    assert sorted(by_doc) == sorted(GOOD)
    for doc_id, (_, text) in GOOD.items():
        chunks = by_doc[doc_id]
        assert [c["headings"] for c in chunks] == HEADINGS[doc_id], doc_id
        assert [text[c["char_start"] : c["char_end"]] for c in chunks] == [c["text"] for c in chunks], doc_id
        assert chunks[0]["char_start"] == 0 and chunks[-1]["char_end"] == len(text), doc_id
    assert [(c["page_start"], c["page_end"]) for c in by_doc["docs/report.pdf"]] == [(1, 1), (2, 2)]
    rejected = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
    assert {(r["doc_id"], r["reason"]) for r in rejected} == {(d, reason) for d, (_, reason) in BAD.items()}
    [checks] = xcoms(dr, "checks").values()
    assert all(c["passed"] for c in checks.values()), checks

    dagster_db = tmp_path / "dagster_lancedb"
    _dagster_rows(proxy.url, dagster_db, tmp_path / "home", chunker)
    ours = sink.connect(str(db)).open_table("chunks").to_arrow().sort_by("chunk_id")
    theirs = sink.connect(str(dagster_db)).open_table("chunks").to_arrow().sort_by("chunk_id")
    assert ours.num_rows == theirs.num_rows > 0
    for column in [*SAME, "headings", "converter", "page_start", "page_end"]:
        assert ours.column(column).to_pylist() == theirs.column(column).to_pylist(), column
    a = np.stack(ours.column("vector").to_numpy(zero_copy_only=False))
    b = np.stack(theirs.column("vector").to_numpy(zero_copy_only=False))
    assert a.shape == b.shape and np.array_equal(a, b)


#: the reported case (an HTML page whose sentence chunks were said not to index the hand-written
#: text) and the text forms a range fault could hide in: line ends CRLF, a trailing newline, a BOM.
#: doc_id -> (file bytes, the document's text written by hand)
RANGE_CASES: dict[str, tuple[bytes, str]] = {
    "docs/tea_short.html": (
        html_page("Tea", [(1, "Tea", "Green tea is steamed."), (2, "Storage", "Keep dry.")]).encode(),
        "# Tea\n\nGreen tea is steamed.\n\n## Storage\n\nKeep dry.",
    ),
    "docs/crlf.html": (
        b"<html><body>\r\n<h1>Tides</h1>\r\n<p>The moon\r\npulls the sea.</p>\r\n</body></html>\r\n",
        "# Tides\n\nThe moon\npulls the sea.",
    ),
    "docs/crlf.md": (b"# Tides\r\n\r\nThe moon pulls the sea.\r\n", "# Tides\r\n\r\nThe moon pulls the sea.\r\n"),
    "docs/bom.txt": (b"\xef\xbb\xbfSalt keeps fish.\n", "Salt keeps fish.\n"),
}


def test_sentence_chunks_of_converted_files_index_their_converted_text(
    dag, served, tmp_path: Path, chunker: LateChunker, minilm_dir: Path
) -> None:
    """The ``sentences`` DAG over the same files and :data:`RANGE_CASES`: every chunk's range indexes
    the hand-written text of its document, the HTML pages' included (one chunk of the whole page at
    128 tokens); the chunks cover the text but its trailing line break."""
    from tests.test_converted_materialization import BAD, GOOD

    srv, _ = served
    files = {doc_id: data for doc_id, (data, _) in {**GOOD, **BAD, **RANGE_CASES}.items()}
    _upload(srv.url, "ranges", files, bucket=BUCKET)
    db = tmp_path / "lancedb"
    set_lancedb_connection(db)
    dr = run(dag, chunker, store_path=f"s3://{BUCKET}/ranges", model=str(minilm_dir))
    assert str(dr.state) == "success", states(dr)
    by_doc = _by_doc(db)
    texts = {doc_id: text for doc_id, (_, text) in {**GOOD, **RANGE_CASES}.items()}
    assert sorted(by_doc) == sorted(texts)
    for doc_id, text in texts.items():
        chunks = by_doc[doc_id]
        assert [text[c["char_start"] : c["char_end"]] for c in chunks] == [c["text"] for c in chunks], doc_id
        assert chunks[0]["char_start"] == 0 and chunks[-1]["char_end"] == len(text.rstrip("\r\n")), doc_id
    for doc_id in ("docs/tea.html", "docs/tea_short.html", "docs/crlf.html"):
        assert [c["text"] for c in by_doc[doc_id]] == [texts[doc_id]], doc_id
