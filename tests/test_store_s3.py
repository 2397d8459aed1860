"""Document stores in an S3 bucket: moto's server on loopback, a counting proxy in front of it (tests/s3_proxy.py).

The right answers are the documents we uploaded (texts written here), the keys the proxy saw read,
and Dagster's own partitions: a listing that fails part-way, is throttled, is cut short or cannot
reach its endpoint deletes nothing (rclone's sync rule, ``sources/listing.py``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latechunk_dagster.sources.files import DocumentStore, IncompleteListingError
from latechunk_dagster.sources.storage import public_uri
from tests.s3_proxy import S3Proxy, s3_client, s3_proxy, store_options
from tests.servers import ServerProcess, free_port, s3_bucket

boto3 = pytest.importorskip("boto3")
dg = pytest.importorskip("dagster")

BUCKET = "docs"
#: credentials moto accepts as any others; they must never be seen outside the filesystem client
KEY_ID, SECRET = "AKIANEVERSHOWN0001", "s3cr3t-never-shown-0001"

TREE = {
    "alpha/a.txt": "Berlin is the capital of Germany. The Spree flows through it.",
    "alpha/b.md": "# Rivers\n\nThe Seine flows through Paris.",
    "beta/c.txt": "\ufeffPhotosynthesis turns light into sugar.",  # a BOM: not text
    "top.txt": "A file at the top is shard _root.",
    ".hidden/x.txt": "hidden: not read",
    "alpha/.DS_Store": "hidden: not read",
    "beta/d.jsonl.xz": "a compressed file no reader takes: skipped by name",
}
#: what the tree's documents are (hand-written from TREE: BOM removed, hidden files left out)
EXPECTED = {
    "alpha": {"alpha/a.txt": TREE["alpha/a.txt"], "alpha/b.md": TREE["alpha/b.md"]},
    "beta": {"beta/c.txt": "Photosynthesis turns light into sugar."},
    "_root": {"top.txt": TREE["top.txt"]},
}


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    with s3_bucket(BUCKET) as served:
        yield served


@pytest.fixture
def proxy(s3) -> Iterator[S3Proxy]:
    srv, _ = s3
    with s3_proxy(srv.url) as p:
        yield p


def _options(url: str) -> dict[str, str]:
    """LanceDB-form storage options that reach ``url`` with the never-shown credentials."""
    return store_options(url, KEY_ID, SECRET)


_client = s3_client


def _upload(url: str, prefix: str, files: dict[str, str | bytes], bucket: str = BUCKET) -> None:
    c = _client(url)
    for name, body in files.items():
        c.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=body.encode() if isinstance(body, str) else body)


def _documents(store: DocumentStore) -> dict[str, dict[str, str]]:
    return {s: {d.doc_id: d.text for d in store.read_shard(s)} for s in store.shards()}


def test_text_tree_in_a_bucket_reads_as_on_disk(s3, tmp_path: Path) -> None:
    srv, _ = s3
    _upload(srv.url, "tree", TREE)
    store = DocumentStore.from_path(f"s3://{BUCKET}/tree/", storage_options=_options(srv.url))
    assert (store.kind, store.uri) == ("text", "s3://docs/tree")
    assert _documents(store) == EXPECTED
    [skipped] = store.bad_shards()
    assert (skipped.where, skipped.reason) == ("s3://docs/tree/beta/d.jsonl.xz", "other_kind")
    assert store.listing().held == {"beta"} and store.listing().complete
    # the same tree on disk: the same documents, the same document hashes
    for name, text in TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    local = DocumentStore.from_path(tmp_path)
    for shard in EXPECTED:
        assert store.read_shard(shard) == local.read_shard(shard)


def test_table_stores_in_a_bucket(s3, proxy: S3Proxy) -> None:
    srv, _ = s3
    lines = [{"id": 1, "text": "one", "shard": "x"}, {"id": "2", "text": "two", "shard": "y"}, "not json"]
    body = "\n".join(json.dumps(r) if isinstance(r, dict) else r for r in lines) + "\n"
    _upload(srv.url, "tables", {"jan.jsonl": body, "feb/week1.jsonl": '{"id": "a", "text": "alpha"}\n'})
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ["p", "q"], "text": ["pee", "queue"], "shard": ["s1", "s2"]}), buf)
    _upload(srv.url, "single", {"corpus.parquet": buf.getvalue()})
    jsonl = DocumentStore.from_path(f"s3://{BUCKET}/tables", storage_options=_options(srv.url))
    assert (jsonl.kind, jsonl.shards()) == ("jsonl", ["feb/week1", "jan"])
    docs, rejected = jsonl.read_shard_with_rejections("jan")
    assert [(d.doc_id, d.text) for d in docs] == [("1", "one"), ("2", "two")]
    assert [(r.where, r.reason) for r in rejected] == [("s3://docs/tables/jan.jsonl: row 3", "invalid_json")]
    counted = DocumentStore.from_path(f"s3://{BUCKET}/tables", storage_options=_options(proxy.url))
    proxy.reset()
    assert counted.count_shards(["jan"]) == {"jan": None}  # newlines are not counted by downloading
    for _, items in counted.iter_shards(counted.shards()):
        list(items)
    assert dict(proxy.gets) == {"tables/jan.jsonl": 1, "tables/feb/week1.jsonl": 1}  # each object read once
    single = DocumentStore.from_path(f"s3://{BUCKET}/single/corpus.parquet", storage_options=_options(srv.url))
    assert (single.kind, single.shards()) == ("parquet", ["s1", "s2"])
    assert [(d.doc_id, d.text) for d in single.read_shard("s2")] == [("q", "queue")]
    assert single.count_shards(["s1"]) == {"s1": None}  # a shard column: unknown without a scan


def test_fingerprints_come_from_the_listing_and_a_run_reads_each_object_once(s3, proxy: S3Proxy) -> None:
    srv, _ = s3
    _upload(srv.url, "fp", {k: v for k, v in TREE.items() if not k.startswith(".")})
    store = DocumentStore.from_path(f"s3://{BUCKET}/fp", storage_options=_options(proxy.url))
    proxy.reset()
    before = store.fingerprints()
    assert set(before) == {"alpha", "beta", "_root"}
    assert proxy.counts["get"] == 0  # from the listing made when the store was opened; nothing downloaded
    assert store.fingerprints() == before  # unchanged: the same, from a new listing, still no read
    assert proxy.counts["get"] == 0 and proxy.counts["list"] >= 1
    assert store.shard_fingerprint("beta") == before["beta"]
    proxy.reset()
    assert store.listing().fingerprints == before  # the listing carries them: a tick lists once
    assert proxy.counts["get"] == 0
    _upload(srv.url, "fp", {"alpha/b.md": "# Rivers\n\nThe Tiber flows through Rome."})  # rewritten
    after = store.fingerprints()
    assert after["alpha"] != before["alpha"]
    assert {k: after[k] for k in ("beta", "_root")} == {k: before[k] for k in ("beta", "_root")}
    assert proxy.counts["get"] == 0
    proxy.reset()
    for _, items in store.iter_shards(store.shards()):
        list(items)
    # every document object read exactly once; the skipped .jsonl.gz not at all
    assert dict(proxy.gets) == {f"fp/{k}": 1 for k in ("alpha/a.txt", "alpha/b.md", "beta/c.txt", "top.txt")}


def _five_shards(url: str, prefix: str) -> None:
    _upload(url, prefix, {f"s{i}/doc.txt": f"Document number {i} of five." for i in range(5)})


@pytest.mark.parametrize("fault", ["error", "throttle", "cut"])
def test_a_listing_that_fails_halfway_deletes_nothing(s3, proxy: S3Proxy, fault: str, tmp_path: Path) -> None:
    """Pages of two keys; the second page fails (a 500, throttling past the retries, a body cut off):
    the listing is a gap, so neither Dagster's partition sync nor the store sensor removes a partition."""
    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions

    srv, _ = s3
    prefix = f"half-{fault}"
    _five_shards(srv.url, prefix)
    proxy.page_size = 2
    uri, options = f"s3://{BUCKET}/{prefix}", _options(proxy.url)
    table = late_chunk_assets(table_name=f"chunks_{fault}", index=False, parity_check=False, job_name="chunk")
    pname = table.partitions_def.name
    resources = {
        "store": DocumentStoreResource(path=uri, storage_options=options),
        "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
    }
    [sensor] = [s for s in table.sensors if s.name.endswith("store_sensor")]
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        store = DocumentStore.from_path(uri, storage_options=options)
        assert sync_partitions(instance, store, table.partitions_def) == ([f"s{i}" for i in range(5)], [])
        assert proxy.list_requests >= 3  # five keys in pages of two
        proxy.reset()
        proxy.fault, proxy.fail_page = fault, 2
        listing = store.listing()
        assert not listing.complete and listing.shards == ()
        assert listing.removed([f"s{i}" for i in range(5)]) == []
        assert "cannot be listed" in listing.gaps[0].detail and SECRET not in listing.gaps[0].detail
        with pytest.raises(IncompleteListingError):
            sync_partitions(instance, store, table.partitions_def)
        proxy.reset()
        with pytest.raises(IncompleteListingError, match="s3://docs/half-"):
            DocumentStore.from_path(uri, storage_options=options)
        proxy.reset()
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            tick = sensor(ctx)
        assert isinstance(tick, dg.SkipReason) and "no partition is added or removed" in str(tick.skip_message)
        assert instance.get_dynamic_partitions(pname) == [f"s{i}" for i in range(5)]
        assert proxy.counts["get"] == 0


def test_an_unreachable_endpoint_deletes_nothing(s3, tmp_path: Path) -> None:
    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource

    srv, _ = s3
    _five_shards(srv.url, "gone")
    table = late_chunk_assets(table_name="chunks_gone", index=False, parity_check=False, job_name="chunk")
    [sensor] = [s for s in table.sensors if s.name.endswith("store_sensor")]
    dead = _options(f"http://127.0.0.1:{free_port()}")
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions(table.partitions_def.name, ["s0", "s1", "old"])
        with pytest.raises(IncompleteListingError, match=r"s3://docs/gone: cannot be reached") as err:
            DocumentStore.from_path(f"s3://{BUCKET}/gone", storage_options=dead)
        assert SECRET not in str(err.value) and KEY_ID not in str(err.value)
        resources = {
            "store": DocumentStoreResource(path=f"s3://{BUCKET}/gone", storage_options=dead),
            "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
        }
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            tick = sensor(ctx)
        assert isinstance(tick, dg.SkipReason)
        assert instance.get_dynamic_partitions(table.partitions_def.name) == ["s0", "s1", "old"]


def test_credentials_stay_out_of_the_store_and_its_messages(s3, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in the URI (pyarrow's form) or from the AWS_* chain: the store's uri, repr and rows
    name the bucket and key only."""
    srv, _ = s3
    _upload(srv.url, "cred", {"a/doc.txt": "Hello.", "a/bad.txt": "\ufeff".encode("utf-16")})
    monkeypatch.setenv("AWS_ENDPOINT_URL", srv.url)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    store = DocumentStore.from_path(f"s3://{KEY_ID}:{SECRET}@{BUCKET}/cred")
    assert (
        store.uri == "s3://docs/cred"
        and public_uri(f"s3://{KEY_ID}:{SECRET}@docs/x?secret_key={SECRET}") == "s3://docs/x"
    )
    docs, rejected = store.read_shard_with_rejections("a")
    assert [d.doc_id for d in docs] == ["a/doc.txt"] and [r.reason for r in rejected] == ["bad_encoding"]
    shown = repr(store) + json.dumps([r.__dict__ for r in rejected]) + str(store.listing())
    assert SECRET not in shown and KEY_ID not in shown
    # the standard chain alone (AWS_* variables, AWS_ENDPOINT_URL): no options, no URI credentials
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    assert DocumentStore.from_path(f"s3://{BUCKET}/cred").shards() == ["a"]


def test_bad_storage_options_are_refused_by_name(s3, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, _ = s3
    monkeypatch.delenv("AWS_ALLOW_HTTP")  # set by the moto fixture
    with pytest.raises(ValueError, match="unknown key 'aws_secret'") as err:
        DocumentStore.from_path(f"s3://{BUCKET}/x", storage_options={"aws_secret": SECRET})
    assert SECRET not in str(err.value)
    with pytest.raises(ValueError, match="'azure_storage_account_key' is a azure setting"):
        DocumentStore.from_path(f"s3://{BUCKET}/x", storage_options={"azure_storage_account_key": "k"})
    with pytest.raises(ValueError, match="allow_http"):
        DocumentStore.from_path(f"s3://{BUCKET}/x", storage_options={"aws_endpoint": srv.url})
    with pytest.raises(ValueError, match="'soon' is not a duration"):
        DocumentStore.from_path(f"s3://{BUCKET}/x", storage_options={**_options(srv.url), "timeout": "soon"})
    with pytest.raises(ValueError, match="not the local path"):
        DocumentStore.from_path("/tmp", storage_options={"aws_region": "us-east-1"})
    with pytest.raises(FileNotFoundError, match="document store not found: s3://docs/nothing-here"):
        DocumentStore.from_path(f"s3://{BUCKET}/nothing-here", storage_options=_options(srv.url))


def test_dagster_materializes_a_store_in_a_bucket(s3, proxy: S3Proxy, chunker, tmp_path) -> None:  # noqa: ANN001
    """A real run over a store in the bucket (credentials in storage_options): rows for every document,
    an edited object re-encoded alone, a sensor tick that reads no object, and the credentials in no
    event of the run, no row and no metadata."""
    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from tests.conftest import session_engine_resource

    srv, _ = s3
    _upload(srv.url, "run", {k: v for k, v in TREE.items() if not k.startswith(".")})
    uri = f"s3://{BUCKET}/run"
    store_resource = DocumentStoreResource(path=uri, storage_options=_options(proxy.url))
    lancedb = LanceDBResource(uri=str(tmp_path / "db"))
    table = late_chunk_assets(table_name="chunks", index=False, parity_check=False, job_name="chunk")
    defs = table.to_definitions(
        resources={"engine": session_engine_resource(chunker), "lancedb": lancedb, "store": store_resource}
    )
    [sensor] = [s for s in table.sensors if s.name.endswith("store_sensor")]
    both = {"store": store_resource, "lancedb": lancedb}
    tags = {"dagster/asset_partition_range_start": "_root", "dagster/asset_partition_range_end": "beta"}
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        proxy.reset()
        with dg.build_sensor_context(instance=instance, resources=both) as ctx:
            tick = sensor(ctx)
        assert proxy.counts["get"] == 0  # the tick listed the bucket, read no object
        [add] = tick.dynamic_partitions_requests
        assert sorted(add.partition_keys) == ["_root", "alpha", "beta"]
        sync_partitions(instance, store_resource.get_store(), table.partitions_def)
        first = defs.resolve_job_def("chunk").execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        assert first.success and all(c.passed for c in first.get_asset_check_evaluations())
        _upload(srv.url, "run", {"alpha/b.md": "# Rivers\n\nThe Tiber flows through Rome."})
        proxy.reset()
        with dg.build_sensor_context(instance=instance, cursor=tick.cursor, resources=both) as ctx:
            again = sensor(ctx)
        assert [r.partition_key for r in again.run_requests] == ["alpha"] and proxy.counts["get"] == 0
        second = defs.resolve_job_def("chunk").execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        assert second.success
        events = [str(e) for run in (first, second) for e in instance.all_logs(run.run_id)]
    mats = second.get_asset_materialization_events()
    md = {e.partition: e.event_specific_data.materialization.metadata for e in mats}
    assert md["alpha"]["documents_reencoded"].value == 1 and md["alpha"]["documents_skipped"].value == 1
    assert md["beta"]["documents_skipped"].value == 1
    with lancedb.get_connection() as db:
        rows = db.open_table("chunks").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == {d for docs in EXPECTED.values() for d in docs}
    assert "Tiber" in "".join(rows.filter(pa.compute.equal(rows["doc_id"], "alpha/b.md"))["text"].to_pylist())
    shown = "\n".join(events) + str(rows.drop_columns(["vector"]).to_pylist()) + str(md)
    assert "alpha/b.md" in shown and "chunk_vectors" in shown  # the runs' events and rows are all here...
    assert SECRET not in shown and KEY_ID not in shown  # ...and the credentials in none of them


def test_cli_sync_partitions_over_a_bucket_and_an_unreachable_one(s3, tmp_path: Path) -> None:
    """``LATECHUNK_DOCUMENT_STORE=s3://...`` with the AWS_* chain (AWS_ENDPOINT_URL): the shards become
    partitions; with the endpoint unreachable the command fails in one line and removes nothing."""
    from tests.test_cli import run_cli

    srv, _ = s3
    _five_shards(srv.url, "cli")
    env = {"LATECHUNK_DOCUMENT_STORE": f"s3://{BUCKET}/cli", "AWS_ENDPOINT_URL": srv.url, "AWS_ALLOW_HTTP": "true"}
    out = run_cli(["sync-partitions"], tmp_path / "home", **env)
    assert out.returncode == 0, out.stderr
    assert "added ['s0', 's1', 's2', 's3', 's4']" in out.stdout
    dead = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    out = run_cli(["sync-partitions"], tmp_path / "home", **dead)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "latechunk sync-partitions: error: s3://docs/cli: cannot be reached" in out.stderr
    out = run_cli(["sync-partitions"], tmp_path / "home", **env)
    assert out.returncode == 0 and "added none; removed none" in out.stdout  # all five still partitions


def test_document_files_in_a_bucket_are_converted_as_on_disk(s3, chunker, tmp_path: Path) -> None:  # noqa: ANN001
    """PDF, DOCX, PPTX, HTML, Markdown and text objects in a bucket, bad files among them (issue 38's
    done-when): a real Dagster run writes each document's hand-checked converted text (its own
    headings, ranges into that text, PDF pages, the converter in the lineage) and rejects each bad
    object alone, by name and reason, with its neighbours written; no credential in any row."""
    from latechunk_dagster import sink
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from tests.conftest import session_engine_resource
    from tests.test_converted_materialization import BAD, GOOD, HEADINGS, TABLE

    srv, _ = s3
    _upload(srv.url, "files", {doc_id: data for doc_id, (data, _) in {**GOOD, **BAD}.items()})
    store = DocumentStoreResource(path=f"s3://{BUCKET}/files", storage_options=_options(srv.url))
    db = tmp_path / "db"
    defs = dg.Definitions(
        assets=TABLE.assets,
        asset_checks=TABLE.asset_checks,
        jobs=TABLE.jobs,
        resources={
            "engine": session_engine_resource(chunker),
            "lancedb": LanceDBResource(uri=str(db)),
            "store": store,
        },
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync_partitions(instance, store.get_store(), TABLE.partitions_def)
        result = defs.resolve_job_def("chunk").execute_in_process(
            instance=instance, partition_key="docs", raise_on_error=False
        )
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    conn = sink.connect(str(db))
    rows = conn.open_table("chunks").to_arrow().sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")])
    by_doc: dict[str, list[dict]] = {}
    for row in rows.to_pylist():
        by_doc.setdefault(row["doc_id"], []).append(row)
    assert sorted(by_doc) == sorted(GOOD)
    for doc_id, (_, text) in GOOD.items():
        assert [c["headings"] for c in by_doc[doc_id]] == HEADINGS[doc_id], doc_id
        assert all(text[c["char_start"] : c["char_end"]] == c["text"] for c in by_doc[doc_id]), doc_id
    assert [(c["page_start"], c["page_end"]) for c in by_doc["docs/report.pdf"]] == [(1, 1), (2, 2)]
    assert by_doc["docs/owls.docx"][0]["converter"].startswith("docx/2 python-docx ")
    rejected = conn.open_table("rejected_documents").to_arrow().to_pylist()
    assert {(r["doc_id"], r["reason"]) for r in rejected} == {(d, reason) for d, (_, reason) in BAD.items()}
    assert all(r["doc_id"] in r["detail"] for r in rejected)
    shown = str(rows.drop_columns(["vector"]).to_pylist()) + str(rejected)
    assert SECRET not in shown and KEY_ID not in shown


def test_a_partition_read_while_its_object_is_replaced_keeps_its_rows(s3, proxy: S3Proxy, chunker, tmp_path) -> None:  # noqa: ANN001
    """Issue 47 kind 2 end to end: a JSONL shard read in ranged GETs (1 KiB requests here, as 1 MiB ones
    read a larger object), replaced by a version with 5 documents removed and 5 added after its first
    GET. The run fails before its commit and the table keeps version 1's documents exactly (none of
    version 2's rows, none of version 1's lost); the next run writes version 2 whole."""
    import lancedb

    from latechunk_dagster import MarkdownSections, sink
    from latechunk_dagster.pipeline import SystemicFailureError, materialize_partition
    from latechunk_dagster.sources import storage

    srv, _ = s3

    def version(ids: range) -> bytes:
        rows = ({"id": f"d{i:02d}", "text": f"Document {i} is about rivers number {i}."} for i in ids)
        return b"".join(json.dumps(row).encode() + b"\n" for row in rows)

    old, new = version(range(0, 60)), version(range(5, 65))
    assert len(old) > 2 * 1024
    _upload(srv.url, "run-swap", {"shard.jsonl": old})
    db = lancedb.connect(str(tmp_path / "db"))
    chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    store = DocumentStore.from_path(f"s3://{BUCKET}/run-swap", storage_options=_options(proxy.url))

    def run(run_id: str) -> object:
        return materialize_partition(
            chunker, store.iter_shard("shard"), "shard", MarkdownSections(max_tokens=64),
            chunk_table=chunks, rejected_table=rejected, run_id=run_id,
        )  # fmt: skip

    def stored() -> set[str]:
        return set(chunks.to_arrow().column("doc_id").to_pylist())

    assert run("v1").documents_new == 60 and stored() == {f"d{i:02d}" for i in range(60)}
    storage.READ_BUFFER_BYTES, saved = 1024, storage.READ_BUFFER_BYTES
    try:
        proxy.on_get = lambda got, n: _upload(srv.url, "run-swap", {"shard.jsonl": new}) if n == 2 else None
        with pytest.raises(SystemicFailureError, match="replaced while it was read"):
            run("swap")
    finally:
        storage.READ_BUFFER_BYTES, proxy.on_get = saved, None
    assert stored() == {f"d{i:02d}" for i in range(60)}  # not a row lost, none of version 2's
    report = run("v2")
    assert (report.documents_deleted, report.documents_new, report.rejected) == (5, 5, 0)
    assert stored() == {f"d{i:02d}" for i in range(5, 65)}
