"""Unchanged files are never fetched (issue 49 item 2): each document row records its file's source
stamp, and a run neither fetches nor converts a file whose stamp equals its rows'.

Real parts: moto's S3 server on loopback behind tests/s3_proxy.py (which counts each key's GETs), the
real engine (conftest's ``chunker``), real LanceDB, the real HTML converter (wrapped to count its
calls). The right answers: the files written here (which one changed) and the counts a sequential
read of them makes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.pipeline.accounting import PartitionReport
from latechunk_dagster.sources.converters import ConversionLimits, Converted
from latechunk_dagster.sources.converters.registry import HtmlConverter
from latechunk_dagster.sources.files import DocumentStore
from latechunk_dagster.sources.stamps import ShardItems, source_stamp
from latechunk_dagster.sources.storage import ObjectPath, ObjectStat
from tests.s3_proxy import S3Proxy, s3_client, s3_proxy, store_options
from tests.servers import ServerProcess, s3_bucket

boto3 = pytest.importorskip("boto3")

BUCKET = "stamps"


@pytest.fixture(autouse=True)
def _the_default_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module tests the margin rule: the default margin here (conftest sets 0 for the other modules)."""
    monkeypatch.setenv("LATECHUNK_STAMP_MARGIN_S", "2")


TOPICS = ["pumps", "owls", "tea", "lighthouses", "glaciers", "bridges", "ferns", "comets"]


class CountingHtml:
    """The built-in HTML converter (same name and version: same lineage), counting the files it converts."""

    name: ClassVar[str] = "html"
    suffixes: ClassVar[tuple[str, ...]] = (".html",)
    calls: ClassVar[list[str]] = []

    @property
    def version(self) -> str:
        return HtmlConverter().version

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        CountingHtml.calls.append(name)
        return HtmlConverter().convert(name, data, limits)


def page(topic: str, extra: str = "") -> bytes:
    return f"<html><body><main><h1>{topic}</h1><p>A page about {topic}.{extra}</p></main></body></html>".encode()


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    with s3_bucket(BUCKET) as served:
        yield served


@pytest.fixture
def proxy(s3) -> Iterator[S3Proxy]:  # noqa: ANN001
    with s3_proxy(s3[0].url) as p:
        yield p


@pytest.fixture
def tables(tmp_path: Path, chunker: LateChunker) -> tuple[Any, Any]:
    db = sink.connect(str(tmp_path / "db"))
    return (
        sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim)),
        sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
    )


def run(chunker: LateChunker, tables: tuple[Any, Any], uri: str, shard: str, **kw: Any) -> PartitionReport:
    """One run of ``shard`` from a fresh listing of the store at ``uri`` (as each orchestrator run makes),
    through the proxy (``kw["proxy"]``), converting in this process (the conversions are counted)."""
    CountingHtml.calls.clear()
    opts = store_options(kw.pop("proxy").url, "k", "s")
    store = DocumentStore.from_path(
        uri, storage_options=opts, converters=conv(), read_concurrency=kw.pop("reads", None)
    )
    items = store.iter_shard(shard, defer_conversion=True)
    assert isinstance(items, ShardItems)
    return materialize_partition(
        chunker, items, shard, Sentences(max_tokens=64), chunk_table=tables[0], rejected_table=tables[1],
        run_id=kw.pop("run_id", "r"), host_workers=0, **kw,
    )  # fmt: skip


def conv() -> dict[str, CountingHtml]:
    return {".html": CountingHtml()}


def texts(table: Any, doc_id: str) -> str:
    rows = table.search().where(f"doc_id = {sink.sql_string(doc_id)}").select(["text"]).limit(None).to_arrow()
    return " ".join(rows.column("text").to_pylist())


def test_one_changed_file_in_a_shard_is_one_get_and_one_conversion(s3, proxy: S3Proxy, chunker, tables) -> None:  # noqa: ANN001
    """8 pages in shard ``s``; one changes: the next run fetches that one (1 GET) and converts it (1
    conversion); the others are skipped, their rows untouched. A touched but identical file is fetched
    once, not re-encoded, and its stamp recorded: the run after fetches nothing. ``force`` reads all."""
    srv, _ = s3
    client = s3_client(srv.url)
    for topic in TOPICS:
        client.put_object(Bucket=BUCKET, Key=f"tree/s/{topic}.html", Body=page(topic))
    time.sleep(2.2)  # older than the stamp margin (S3's whole seconds): the stamps are trusted
    uri = f"s3://{BUCKET}/tree"

    proxy.reset()
    first = run(chunker, tables, uri, "s", proxy=proxy, run_id="r1")
    assert (first.documents_new, proxy.counts["get"], len(CountingHtml.calls)) == (8, 8, 8)
    stamped = tables[0].search().select(["doc_id", "source_stamp"]).limit(None).to_arrow().to_pylist()
    assert all(r["source_stamp"].startswith("object:") for r in stamped)

    client.put_object(Bucket=BUCKET, Key="tree/s/owls.html", Body=page("owls", " Owls hunt at dusk."))
    proxy.reset()
    second = run(chunker, tables, uri, "s", proxy=proxy, run_id="r2")
    assert dict(proxy.gets) == {"tree/s/owls.html": 1}
    assert [Path(c).name for c in CountingHtml.calls] == ["owls.html"]
    assert (second.documents_skipped, second.documents_reencoded, second.documents) == (7, 1, 8)
    assert "dusk" in texts(tables[0], "s/owls.html")
    assert {r["run_id"] for r in tables[0].search().where("doc_id = 's/tea.html'").limit(None).to_list()} == {"r1"}

    time.sleep(2.2)  # owls' stamp was unsure (written just before run 2): now it is old enough
    client.put_object(Bucket=BUCKET, Key="tree/s/tea.html", Body=page("tea"))  # touched: same bytes
    time.sleep(2.2)
    proxy.reset()
    third = run(chunker, tables, uri, "s", proxy=proxy, run_id="r3")
    assert sorted(proxy.gets) == ["tree/s/owls.html", "tree/s/tea.html"]
    assert (third.documents_skipped, third.documents_reencoded, third.tokens_encoded) == (8, 0, 0)

    proxy.reset()
    fourth = run(chunker, tables, uri, "s", proxy=proxy, run_id="r4")
    assert (proxy.counts["get"], CountingHtml.calls, fourth.documents_skipped) == (0, [], 8)

    proxy.reset()
    forced = run(chunker, tables, uri, "s", proxy=proxy, run_id="r5", force=True)
    assert (proxy.counts["get"], len(CountingHtml.calls), forced.documents_reencoded) == (8, 8, 8)


def test_a_same_second_same_size_replacement_is_not_missed(s3, proxy: S3Proxy, chunker, tables) -> None:  # noqa: ANN001
    """``a.html`` is replaced by a version of the same size in the same second (S3's listing: whole
    seconds, no ETag) just after the run read it (while it reads ``b.html``). Both versions list the
    same stamp; the run must not trust it, so the next run fetches ``a.html`` and stores the new text."""
    srv, _ = s3
    client = s3_client(srv.url)
    for attempt in range(4):  # the two PUTs must land in one second: try again when they straddle one
        prefix = f"same{attempt}"
        old, new = page("tea", " Green leaves."), page("tea", " Brown leaves.")
        assert len(old) == len(new)
        time.sleep(1 - time.time() % 1 + 0.01)  # at the start of a second
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/q/a.html", Body=old)
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/q/b.html", Body=page("ferns"))
        uri = f"s3://{BUCKET}/{prefix}"
        before = client.head_object(Bucket=BUCKET, Key=f"{prefix}/q/a.html")["LastModified"]

        def replace_a(key: str, n: int, prefix: str = prefix, new: bytes = new) -> None:
            if key == f"{prefix}/q/b.html" and n == 1:
                client.put_object(Bucket=BUCKET, Key=f"{prefix}/q/a.html", Body=new)

        proxy.on_get = replace_a
        first = run(chunker, tables, uri, "q", proxy=proxy, reads=1, run_id=f"first{attempt}")
        proxy.on_get = None
        after = client.head_object(Bucket=BUCKET, Key=f"{prefix}/q/a.html")["LastModified"]
        if before == after:
            break
        tables[0].delete("partition = 'q'")
    else:
        pytest.fail("the two PUTs never landed in one second")
    assert first.documents_new == 2 and "Green" in texts(tables[0], "q/a.html")
    proxy.reset()
    second = run(chunker, tables, uri, "q", proxy=proxy, reads=1, run_id="second")
    assert f"{prefix}/q/a.html" in proxy.gets
    assert "Brown" in texts(tables[0], "q/a.html") and "Green" not in texts(tables[0], "q/a.html")
    assert second.documents_reencoded == 1


def test_the_stamp_rule_trusts_only_times_older_than_the_margin(tmp_path: Path) -> None:
    """Hand-made listings: an object listed at second T is unsure for reads starting within 2 s of T
    (a same-size rewrite in that second lists the same), trusted after; a local file likewise by the
    newer of its mtime and ctime (which ``touch -d`` cannot set back)."""
    s, margin = 1_000_000_000, 2_000_000_000
    obj = ObjectPath.__new__(ObjectPath)  # the stamp needs only the type
    listed = ObjectStat(120, 50 * s)
    assert source_stamp(obj, listed, 50 * s + s // 2, margin) is None
    assert source_stamp(obj, listed, 52 * s, margin) is None
    assert source_stamp(obj, listed, 52 * s + 1, margin) == f"object:120:{50 * s}"
    assert source_stamp(obj, ObjectStat(None, 50 * s), 99 * s, margin) is None
    f = tmp_path / "a.txt"
    f.write_text("hello")
    os.utime(f, ns=(10 * s, 10 * s))  # an old mtime; the ctime is now
    st = os.stat(f)
    assert source_stamp(f, None, st.st_ctime_ns + margin // 2, margin) is None
    stamp = source_stamp(f, None, st.st_ctime_ns + margin + 1, margin)
    assert stamp == f"local:5:{10 * s}:{st.st_ctime_ns}:{st.st_ino}"


def test_local_tree_fingerprints_convert_nothing(tmp_path: Path) -> None:
    """A sensor tick's fingerprints of a local text tree read no file: no conversion, and one
    rewritten page changes its shard's fingerprint alone (issue 49 item 2, issue 47 kind 1)."""
    for shard, topics in {"a": TOPICS[:3], "b": TOPICS[3:]}.items():
        (tmp_path / shard).mkdir()
        for topic in topics:
            (tmp_path / shard / f"{topic}.html").write_bytes(page(topic))
        (tmp_path / shard / "notes.txt").write_text(f"Notes of {shard}.")
    store = DocumentStore.from_path(tmp_path, converters=conv())
    CountingHtml.calls.clear()
    before = store.fingerprints()
    assert CountingHtml.calls == [] and sorted(before) == ["a", "b"]
    assert before == {shard: store.shard_fingerprint(shard) for shard in ("a", "b")} == store.fingerprints()
    (tmp_path / "b" / "comets.html").write_bytes(page("comets", " Changed."))
    after = store.fingerprints()
    assert CountingHtml.calls == []
    assert after["a"] == before["a"] and after["b"] != before["b"]


def test_a_local_tree_converts_only_the_changed_file(tmp_path: Path, chunker, tables, monkeypatch) -> None:  # noqa: ANN001
    """A local tree (ns times: no margin needed here, ``LATECHUNK_STAMP_MARGIN_S=0``): one page of
    three rewritten, one text file touched with the same bytes: one conversion, nothing else re-encoded;
    a copy that keeps the old mtime (``cp -p``) is still seen (its ctime is new)."""
    monkeypatch.setenv("LATECHUNK_STAMP_MARGIN_S", "0")
    (tmp_path / "store" / "s").mkdir(parents=True)
    for topic in TOPICS[:3]:
        (tmp_path / "store" / "s" / f"{topic}.html").write_bytes(page(topic))
    (tmp_path / "store" / "s" / "notes.txt").write_text("Notes on pumps and owls.")

    def local_run(run_id: str, converter: CountingHtml | None = None) -> PartitionReport:
        CountingHtml.calls.clear()
        store = DocumentStore.from_path(tmp_path / "store", converters={".html": converter or CountingHtml()})
        items = store.iter_shard("s", defer_conversion=True)
        return materialize_partition(
            chunker, items, "s", Sentences(max_tokens=64), chunk_table=tables[0], rejected_table=tables[1],
            run_id=run_id, host_workers=0,
        )  # fmt: skip

    time.sleep(0.05)
    assert local_run("l1").documents_new == 4 and len(CountingHtml.calls) == 3
    owls = tmp_path / "store" / "s" / "owls.html"
    owls.write_bytes(page("owls", " Owls hunt at dusk."))
    notes = tmp_path / "store" / "s" / "notes.txt"
    notes.write_text("Notes on pumps and owls.")
    time.sleep(0.05)
    second = local_run("l2")
    assert [Path(c).name for c in CountingHtml.calls] == ["owls.html"]
    assert (second.documents_skipped, second.documents_reencoded) == (3, 1)
    assert "dusk" in texts(tables[0], "s/owls.html")
    third = local_run("l3")  # notes.txt's new stamp was written in run 2: nothing fetched, nothing converted
    assert (CountingHtml.calls, third.documents_skipped, third.documents_reencoded) == ([], 4, 0)
    st = os.stat(owls)
    owls.write_bytes(page("owls", " Owls hunt at dawn."))  # same size as the dusk version
    os.utime(owls, ns=(st.st_atime_ns, st.st_mtime_ns))  # the old mtime kept, as cp -p does
    time.sleep(0.05)
    local_run("l4")
    assert [Path(c).name for c in CountingHtml.calls] == ["owls.html"] and "dawn" in texts(tables[0], "s/owls.html")
    upgraded = local_run("l5", NewerHtml())  # another converter version: its files are read again, text is not
    assert sorted(Path(c).name for c in CountingHtml.calls) == ["owls.html", "pumps.html", "tea.html"]
    assert (upgraded.documents_reencoded, upgraded.documents_skipped) == (3, 1)


class NewerHtml(CountingHtml):
    """The counting HTML converter under another version (an upgrade: another lineage)."""

    @property
    def version(self) -> str:
        return HtmlConverter().version + " +test-upgrade"
