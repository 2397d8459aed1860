"""The LanceDB sink on an S3 API: moto's server on loopback, started and stopped by this module.

Rows are real (the shipped model through ``chunk_partition``); the right answers are the
row counts and chunk-id sets we wrote, and the object listing seen through boto3 (not LanceDB).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import pyarrow as pa
import pytest

from latechunk_dagster import FixedTokens, LateChunker, sink
from latechunk_dagster.pipeline.oneshot import chunk_partition
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import Document, text_sha256
from tests.servers import ServerProcess, s3_bucket

boto3 = pytest.importorskip("boto3")

BUCKET = "vectors"
URI = f"s3://{BUCKET}/db"


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """moto's S3 server, one bucket, and the storage options (and env, for ``search``) that reach it."""
    with s3_bucket(BUCKET) as served:
        yield served


def _client(url: str):  # noqa: ANN202 - boto3 client
    return boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )


def _docs(prefix: str, texts: list[str]) -> list[Document]:
    return [Document(f"{prefix}-{i}", t, text_sha256(t)) for i, t in enumerate(texts)]


A = [
    "Berlin is the capital of Germany. It has 3.8M people. The Spree flows through it.",
    "Paris is the capital of France. The Seine flows through Paris.",
]
B = [
    "Late chunking encodes the whole document once, then averages token states per chunk.",
    "Dagster orchestrates partitions; LanceDB stores one row per chunk with its vector.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
]


def _ids(table, partition: str) -> set[str]:  # noqa: ANN001
    where = f"partition = {sink.sql_string(partition)}"
    return set(table.search().where(where).select(["chunk_id"]).limit(10_000).to_arrow()["chunk_id"].to_pylist())


def test_partitions_on_s3_write_rewrite_search(s3, chunker: LateChunker) -> None:
    srv, options = s3
    strategy = FixedTokens(8)
    db = sink.connect(URI, storage_options=options)
    a = chunk_partition(chunker, _docs("a", A), "a", strategy, "run-1")
    b = chunk_partition(chunker, _docs("b", B), "b", strategy, "run-1")
    table = sink.open_or_create(db, "chunks", sink.chunk_schema(chunker.embedding_dim))
    wa = sink.replace_partition(table, "chunk_id", "a", a.chunks)
    wb = sink.replace_partition(table, "chunk_id", "b", b.chunks)
    assert (wa.inserted, wb.inserted) == (a.chunks.num_rows, b.chunks.num_rows)
    assert _ids(table, "a") == set(a.chunks["chunk_id"].to_pylist())
    assert _ids(table, "b") == set(b.chunks["chunk_id"].to_pylist())

    # the table lives in the bucket (seen through boto3, not LanceDB)
    keys = [o["Key"] for o in _client(srv.url).list_objects_v2(Bucket=BUCKET, Prefix="db/")["Contents"]]
    assert any(k.startswith("db/chunks.lance/_versions/") for k in keys)
    assert any(k.startswith("db/chunks.lance/data/") for k in keys)

    # re-write partition a with one document fewer: a is replaced whole, b untouched
    a2 = chunk_partition(chunker, _docs("a", A[:1]), "a", strategy, "run-2")
    before_b = table.search().where("partition = 'b'").select(["chunk_id", "run_id"]).limit(1000).to_arrow()
    w = sink.replace_partition(table, "chunk_id", "a", a2.chunks)
    assert w.deleted == a.chunks.num_rows - a2.chunks.num_rows
    reopened = sink.connect(URI, storage_options=options).open_table("chunks")
    assert _ids(reopened, "a") == set(a2.chunks["chunk_id"].to_pylist())
    assert reopened.count_rows() == a2.chunks.num_rows + b.chunks.num_rows
    after_b = reopened.search().where("partition = 'b'").select(["chunk_id", "run_id"]).limit(1000).to_arrow()
    assert after_b.sort_by("chunk_id").equals(before_b.sort_by("chunk_id"))

    # search against the bucket (credentials and endpoint from the AWS_* environment)
    hits = search("Which river flows through Berlin?", chunker=chunker, uri=URI, table_name="chunks", k=3)
    assert hits[0].doc_id == "a-0"
    hits = search(
        "plants making sugar from light", chunker=chunker, uri=URI, table_name="chunks", k=1, where="partition = 'b'"
    )
    assert hits[0].doc_id == "b-2"


def test_emulator_enforces_conditional_put(s3) -> None:
    """Lance commits a version on S3 with ``PUT`` + ``If-None-Match: *`` (lance PR #3483); the emulator must refuse
    the second put of one key, or concurrent-writer tests on it would prove nothing."""
    from botocore.exceptions import ClientError

    srv, _ = s3
    c = _client(srv.url)
    c.put_object(Bucket=BUCKET, Key="cond/1.manifest", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        c.put_object(Bucket=BUCKET, Key="cond/1.manifest", Body=b"second", IfNoneMatch="*")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert c.get_object(Bucket=BUCKET, Key="cond/1.manifest")["Body"].read() == b"first"


def _write_partition(uri: str, options: dict, partition: str, rows: pa.Table, ready: Any) -> tuple[int, int]:
    from latechunk_dagster import sink as s

    table = s.connect(uri, storage_options=options).open_table("race")
    ready.wait(120)  # every process has its table open: all commit at about the same moment
    r = s.replace_partition(table, "chunk_id", partition, rows)
    return r.inserted, r.version


def test_four_processes_write_different_partitions_on_s3(s3, chunker: LateChunker) -> None:
    _, options = s3
    db = sink.connect(URI, storage_options=options)
    table = sink.open_or_create(db, "race", sink.chunk_schema(chunker.embedding_dim))
    parts = {
        f"p{k}": chunk_partition(chunker, _docs(f"p{k}", B), f"p{k}", FixedTokens(4 + k), "r").chunks for k in range(4)
    }
    spawn = get_context("spawn")
    with spawn.Manager() as manager, ProcessPoolExecutor(4, mp_context=spawn) as pool:
        ready = manager.Barrier(4)
        futs = [pool.submit(_write_partition, URI, options, p, rows, ready) for p, rows in parts.items()]
        results = [f.result(timeout=180) for f in futs]
    assert [r[0] for r in results] == [rows.num_rows for rows in parts.values()]
    assert len({r[1] for r in results}) == 4, "each write is its own table version"
    table = sink.connect(URI, storage_options=options).open_table("race")
    assert table.count_rows() == sum(rows.num_rows for rows in parts.values())
    for p, rows in parts.items():
        assert _ids(table, p) == set(rows["chunk_id"].to_pylist())


def test_pipeline_on_s3_materializes_rematerializes_and_searches(s3, chunker: LateChunker, tmp_path) -> None:
    """The Dagster pipeline with ``LanceDBResource(uri="s3://...", storage_options=...)``: a real run
    writes two partitions into the bucket, an edited document is re-encoded alone, search finds it."""
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.sources.files import DocumentStore
    from tests.conftest import session_engine_resource

    _, options = s3
    store = tmp_path / "store"
    for shard, texts in (("cities", A), ("science", B)):
        (store / shard).mkdir(parents=True)
        for i, text in enumerate(texts):
            (store / shard / f"{i}.txt").write_text(text)
    lancedb = LanceDBResource(uri=f"s3://{BUCKET}/pipeline", storage_options=options)
    table = late_chunk_assets(table_name="chunks_s3", index=False, parity_check=False, job_name="chunk")
    defs = table.to_definitions(
        resources={
            "engine": session_engine_resource(chunker),
            "lancedb": lancedb,
            "store": DocumentStoreResource(path=str(store)),
        }
    )
    tags = {"dagster/asset_partition_range_start": "cities", "dagster/asset_partition_range_end": "science"}
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), table.partitions_def)
        first = defs.resolve_job_def("chunk").execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        assert first.success and all(c.passed for c in first.get_asset_check_evaluations())
        (store / "cities" / "1.txt").write_text("Rome is the capital of Italy. The Tiber flows through Rome.")
        second = defs.resolve_job_def("chunk").execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        assert second.success and all(c.passed for c in second.get_asset_check_evaluations())
    md = {
        m.partition: m.event_specific_data.materialization.metadata for m in second.get_asset_materialization_events()
    }
    assert md["cities"]["documents_reencoded"].value == 1 and md["cities"]["documents_skipped"].value == 1
    assert md["science"]["documents_skipped"].value == len(B) and md["science"]["tokens_encoded"].value == 0
    with lancedb.get_connection() as db:
        rows = db.open_table("chunks_s3").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == {
        "cities/0.txt",
        "cities/1.txt",
        "science/0.txt",
        "science/1.txt",
        "science/2.txt",
    }
    hits = search(
        "Which river flows through Rome?",
        chunker=chunker,
        uri=lancedb.uri,
        table_name="chunks_s3",
        k=1,
        connect_kwargs=lancedb.connect_kwargs(),
    )
    assert hits[0].doc_id == "cities/1.txt"
