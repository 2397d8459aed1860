"""Object reads that are right (issue 47 kinds 2, 5, 6, 12; issue 49 items 1 and 4): moto's S3 server
on loopback behind the counting proxy of tests/s3_proxy.py, which also replaces an object between two
ranged GETs, adds latency, answers 503/500 or hangs.

The right answers are the documents uploaded here (texts written in this module), and the rows of a
sequential read of the same store on a local disk.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latechunk_dagster.sources.files import DocumentStore
from latechunk_dagster.sources.listing import INCOMPLETE_READS
from tests.s3_proxy import S3Proxy, s3_client, s3_proxy, store_options
from tests.servers import ServerProcess, s3_bucket

boto3 = pytest.importorskip("boto3")

BUCKET = "reads"
KEY_ID, SECRET = "AKIAREADSNEVERSHOWN1", "rEaDs/s3cr3t never+shown"


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    with s3_bucket(BUCKET) as served:
        yield served


@pytest.fixture
def proxy(s3) -> Iterator[S3Proxy]:  # noqa: ANN001
    srv, _ = s3
    with s3_proxy(srv.url) as p:
        yield p


def _options(url: str) -> dict[str, str]:
    """LanceDB-form storage options that reach ``url`` with the never-shown credentials."""
    return store_options(url, KEY_ID, SECRET)


_client = s3_client


def _put(url: str, key: str, body: bytes) -> None:
    _client(url).put_object(Bucket=BUCKET, Key=key, Body=body)


def _jsonl(ids: range) -> bytes:
    """One row per id, ~500 bytes each: 3,000 rows are ~1.5 MiB, read in two ranged GETs."""
    rows = ({"id": f"d{i:05d}", "text": f"Document {i}. " + "x" * 480} for i in ids)
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _parquet(ids: range) -> bytes:
    buf = io.BytesIO()
    texts = [f"Document {i}. " + "y" * 480 for i in ids]
    table = pa.table({"id": [f"d{i:05d}" for i in ids], "text": texts})
    pq.write_table(table, buf, row_group_size=500, compression="none", use_dictionary=False)
    return buf.getvalue()


def _replace_on_second_get(srv_url: str, key: str, body: bytes):  # noqa: ANN202 - the proxy's hook
    def hook(got: str, n: int) -> None:
        if got == key and n == 2:
            _put(srv_url, key, body)

    return hook


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_object_replaced_between_ranged_gets_is_not_read_as_either_version(s3, proxy: S3Proxy, kind: str) -> None:
    """Issue 47 kind 2's repro: a shard object over 1 MiB (read in 1 MiB ranged GETs), replaced by a
    version with 20 documents removed and 20 added after the first GET. The read must not hand on rows
    of two versions as the shard: it ends in an incomplete-read row, so the partition keeps its rows."""
    srv, _ = s3
    make = _jsonl if kind == "jsonl" else _parquet
    old, new = make(range(0, 3000)), make(range(20, 3020))
    assert len(old) > 1 << 20
    key = f"{kind}-swap/shard.{kind}"
    _put(srv.url, key, old)
    store = DocumentStore.from_path(f"s3://{BUCKET}/{kind}-swap", storage_options=_options(proxy.url))
    proxy.on_get = _replace_on_second_get(srv.url, key, new)
    docs, rejected = store.read_shard_with_rejections("shard")
    assert proxy.gets[key] >= 2  # the read did span two GETs, and the object was replaced between them
    row = rejected[-1]  # (the seam between the versions may be a bad row of its own before it)
    assert row.reason in INCOMPLETE_READS and row.where.startswith(f"s3://{BUCKET}/{key}")
    assert "replaced while it was read" in row.detail
    assert SECRET not in row.detail
    # the next read sees one version whole: the new one
    proxy.on_get = None
    docs, rejected = store.read_shard_with_rejections("shard")
    assert rejected == [] and [d.doc_id for d in docs] == [f"d{i:05d}" for i in range(20, 3020)]


@pytest.mark.parametrize("name", ["big.txt", "page.html"])
def test_a_text_or_document_file_replaced_while_read_is_read_again_whole(s3, proxy: S3Proxy, name: str) -> None:
    """A text-tree file replaced between the HEAD that sized it and its GET: the GET would return the
    first bytes of the new version cut to the old size. The file is read again, whole, at one version."""
    srv, _ = s3
    if name.endswith(".txt"):
        old, new = ("old words. " * 150_000).encode(), ("the new, longer version. " * 100_000).encode()
        expected = new.decode().strip()
    else:
        old = b"<html><body><p>Old page.</p></body></html>"
        new = b"<html><body><p>The new page, which is longer than the old one.</p></body></html>"
        expected = "The new page, which is longer than the old one."
    key = f"tree-swap-{name}/s/{name}"
    _put(srv.url, key, old)
    store = DocumentStore.from_path(f"s3://{BUCKET}/tree-swap-{name}", storage_options=_options(proxy.url))

    def hook(got: str, n: int) -> None:
        if got == key and n == 1:
            _put(srv.url, key, new)

    proxy.on_get = hook
    docs, rejected = store.read_shard_with_rejections("s")
    assert rejected == []
    [doc] = docs
    assert doc.text.strip() == expected


def test_keys_with_empty_or_dot_segments_are_skipped_by_name(s3, proxy: S3Proxy) -> None:
    """Issue 47 kind 6: keys ``a//b.txt`` and ``a/./c.txt`` would read as ``a/b.txt`` / ``a/c.txt``
    (which do not exist): they are skipped by their exact names, their shard is held, and the shard's
    other documents are read; nothing is an incomplete read."""
    srv, _ = s3
    for key, body in {
        "odd/a/ok.txt": b"A good document.",
        "odd/a//b.txt": b"Behind an empty segment.",
        "odd/a/./c.txt": b"Behind a dot segment.",
        "odd/e/fine.txt": b"Another shard.",
    }.items():
        _put(srv.url, key, body)
    store = DocumentStore.from_path(f"s3://{BUCKET}/odd", storage_options=_options(proxy.url))
    listing = store.listing()
    assert listing.complete and listing.shards == ("a", "e") and "a" in listing.held
    named = sorted((r.where, r.reason) for r in listing.skipped)
    assert named == [(f"s3://{BUCKET}/odd/a/./c.txt", "bad_key"), (f"s3://{BUCKET}/odd/a//b.txt", "bad_key")]
    docs, rejected = store.read_shard_with_rejections("a")
    assert [(d.doc_id, d.text) for d in docs] == [("a/ok.txt", "A good document.")] and rejected == []
    # a store URI whose own key has such a segment is refused by name, not read as another key
    for uri in (f"s3://{BUCKET}/odd/a//b.txt", f"s3://{BUCKET}/odd/./a"):
        with pytest.raises(ValueError, match=r"has an empty \('//'\), '\.' or '\.\.' segment"):
            DocumentStore.from_path(uri, storage_options=_options(proxy.url))


@pytest.mark.parametrize("secret", ["abc/def+ghi", "abc def/ghi"])
def test_a_secret_with_a_slash_or_space_in_the_uri_never_leaks(
    s3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, secret: str
) -> None:
    """Issue 47 kind 5: ``s3://AKIA...:<secret with / or space>@bucket/prefix``. The store opens (the
    credentials read as written), and no message, repr or row shows the secret: not when it opens, not
    when pyarrow cannot parse what it is given (its "Cannot parse URI" quotes the URI), not in the CLI."""
    from latechunk_dagster.core.redact import redact_url
    from tests.test_cli import run_cli

    srv, _ = s3
    _put(srv.url, "cred/a/doc.txt", b"Hello.")
    monkeypatch.setenv("AWS_ENDPOINT_URL", srv.url)
    store = DocumentStore.from_path(f"s3://{KEY_ID}:{secret}@{BUCKET}/cred")
    assert store.uri == f"s3://{BUCKET}/cred" and store.shards() == ["a"]
    assert [d.text for d in store.read_shard("a")] == ["Hello."]
    assert secret not in repr(store) + str(store.listing())
    # a URI pyarrow cannot parse at all (a space in the bucket): named without the secret, with the hint
    with pytest.raises(ValueError) as err:
        DocumentStore.from_path(f"s3://{KEY_ID}:{secret}@bad bucket/cred")
    shown = str(err.value)
    assert "percent-encoded" in shown and "storage_options" in shown and "bad bucket" in shown
    assert not any(part in shown for part in secret.replace("/", " ").split())
    # the one rule for any text quoting such a URI (pyarrow's message, a log line)
    quoted = f"Cannot parse URI: 's3://{KEY_ID}:{secret}@{BUCKET}/x' due to syntax error"
    assert redact_url(quoted) == f"Cannot parse URI: 's3://{KEY_ID}:[secure]@{BUCKET}/x' due to syntax error"
    if " " in secret:
        return  # the CLI (a process of its own) once, for the secret with a "/"
    # the CLI: `latechunk sync-partitions` over such a store
    env = {"LATECHUNK_DOCUMENT_STORE": f"s3://{KEY_ID}:{secret}@bad bucket/cli", "AWS_ENDPOINT_URL": srv.url}
    out = run_cli(["sync-partitions"], tmp_path / "home", **env)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "percent-encoded" in out.stderr
    assert not any(part in out.stdout + out.stderr for part in secret.replace("/", " ").split())


@pytest.mark.parametrize("spelling", ["my docs", "my%20docs"])
def test_a_prefix_with_a_space_opens_both_ways(s3, monkeypatch: pytest.MonkeyPatch, spelling: str) -> None:
    """Issue 47 kind 12: ``s3://reads/my docs`` and ``s3://reads/my%20docs`` name the prefix ``my docs``
    (the key percent-decoded, as pyarrow's from_uri and LanceDB read it), through the standard credential
    chain (AWS_* variables) and with storage_options alike."""
    srv, _ = s3
    _put(srv.url, "my docs/s/doc one.txt", b"A document under a prefix with a space.")
    expected = {"s/doc one.txt": "A document under a prefix with a space."}
    with_options = DocumentStore.from_path(f"s3://{BUCKET}/{spelling}", storage_options=_options(srv.url))
    monkeypatch.setenv("AWS_ENDPOINT_URL", srv.url)
    chain = DocumentStore.from_path(f"s3://{BUCKET}/{spelling}")
    for store in (with_options, chain):
        assert store.uri == f"s3://{BUCKET}/my docs" and store.shards() == ["s"]
        assert {d.doc_id: d.text for d in store.read_shard("s")} == expected


def _three_files(url: str, prefix: str) -> dict[str, str]:
    texts = {f"s/{i}.txt": f"Document {i} of three." for i in range(3)}
    for name, text in texts.items():
        _put(url, f"{prefix}/{name}", text.encode())
    return texts


def test_throttling_past_pyarrows_retries_is_retried_with_backoff(s3, proxy: S3Proxy) -> None:
    """Issue 49 item 4: seven 503 SlowDown answers in a row (pyarrow gives up on a request after 3):
    the files are tried again with backoff, and every document is read."""
    srv, _ = s3
    texts = _three_files(srv.url, "slow")
    store = DocumentStore.from_path(f"s3://{BUCKET}/slow", storage_options=_options(proxy.url))
    proxy.get_fault, proxy.get_faults = "throttle", 7
    docs, rejected = store.read_shard_with_rejections("s")
    assert proxy.faults_answered == 7 and rejected == []
    assert {d.doc_id: d.text for d in docs} == texts


@pytest.mark.parametrize("fault", ["throttle", "error", "hang"])
def test_a_file_that_keeps_failing_is_rejected_by_name_in_bounded_time(
    s3, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Issue 49 item 4: a store that answers 503 / 500 to every object request, or never answers:
    within the retry budget (LATECHUNK_READ_RETRY_SECONDS) plus one try, each file is one
    ``unreadable_file`` row naming it and the last error: an incomplete read, so the partition fails
    before its commit and keeps its rows. A single hang is outlasted (the request times out, the
    next try reads the file)."""
    import time

    srv, _ = s3
    texts = _three_files(srv.url, f"down-{fault}")
    options = {**_options(proxy.url), "timeout": "1s", "connect_timeout": "1s"}
    store = DocumentStore.from_path(f"s3://{BUCKET}/down-{fault}", storage_options=options)
    monkeypatch.setenv("LATECHUNK_READ_RETRY_SECONDS", "1.5")
    proxy.get_fault, proxy.hang_s = fault, 20.0
    if fault == "hang":  # one hang: outlasted
        proxy.get_faults = 1
        docs, rejected = store.read_shard_with_rejections("s")
        assert rejected == [] and {d.doc_id: d.text for d in docs} == texts
    proxy.get_faults = 10_000
    start = time.monotonic()
    docs, rejected = store.read_shard_with_rejections("s")
    took = time.monotonic() - start
    assert docs == [] and [r.doc_id for r in rejected] == sorted(texts)
    last_error = {"throttle": "503", "error": "500", "hang": "imeout"}[fault]
    for row in rejected:
        assert row.reason in INCOMPLETE_READS and not row.file_read
        assert row.where == f"s3://{BUCKET}/down-{fault}/{row.doc_id}" and last_error in row.detail
    assert took < 3 * 15, took  # per file: the budget (1.5 s) plus one try (pyarrow's 3 attempts)


def test_concurrent_reads_hand_on_the_rows_of_a_sequential_read(
    s3, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49 item 1: a shard of 40 small files (a bad one and one over the size limit among them)
    behind 20 ms a request, read one file at a time and with 16 in flight: the same documents and
    rejections in the same order, many requests in flight at once, and faster. With the bytes in
    flight bounded to two files' worth, at most two are fetched at once."""
    import time

    from latechunk_dagster.sources.converters import ConversionLimits

    srv, _ = s3
    files = {f"s/{i:02d}.txt": f"Document {i}, read concurrently. ".encode() * 3 for i in range(40)}
    files["s/07.txt"] = "\ufeffUTF-16 text".encode("utf-16")  # bad_encoding
    files["s/13.txt"] = b"x" * 5000  # over max_file_bytes: too_large
    for name, body in files.items():
        _put(srv.url, f"conc/{name}", body)
    limits = ConversionLimits(max_file_bytes=4096)
    proxy.delay = 0.02

    def read(workers: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]], float, int]:
        store = DocumentStore.from_path(
            f"s3://{BUCKET}/conc", storage_options=_options(proxy.url), limits=limits, read_concurrency=workers
        )
        store.shards()
        proxy.reset()
        start = time.monotonic()
        items = list(store.iter_shard("s"))
        took = time.monotonic() - start
        docs = [(d.doc_id, d.text) for d in items if not hasattr(d, "reason")]
        rejected = [(r.doc_id, r.reason) for r in items if hasattr(r, "reason")]
        return docs, rejected, took, proxy.max_in_flight

    one = read(1)
    many = read(16)
    assert many[:2] == one[:2]
    assert [d for d, _ in one[0]] == [f"s/{i:02d}.txt" for i in range(40) if i not in (7, 13)]
    assert one[1] == [("s/07.txt", "bad_encoding"), ("s/13.txt", "too_large")]
    assert one[3] == 1 and many[3] >= 8
    assert many[2] < one[2] / 3, (one[2], many[2])
    monkeypatch.setenv("LATECHUNK_READ_BYTES_IN_FLIGHT", str(2 * len(files["s/00.txt"])))
    bounded = read(16)
    assert bounded[:2] == one[:2] and bounded[3] <= 2


def test_the_setting_reaches_the_store_from_dagster_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49 item 1: DocumentStoreResource's ``read_concurrency``, ``LATECHUNK_READ_CONCURRENCY``
    (what the CLI and any run without the setting take), and the defaults by store kind."""
    from latechunk_dagster.integration.resources import DocumentStoreResource
    from latechunk_dagster.sources.prefetch import READ_CONCURRENCY

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "a.txt").write_text("Owls hunt at night.")
    assert DocumentStore.from_path(tmp_path).read_concurrency == READ_CONCURRENCY["local"] == 4
    store = DocumentStoreResource(path=str(tmp_path), read_concurrency=2).get_store()
    assert store.read_concurrency == 2 and [d.text for d in store.read_shard("s")] == ["Owls hunt at night."]
    monkeypatch.setenv("LATECHUNK_READ_CONCURRENCY", "7")
    assert DocumentStoreResource(path=str(tmp_path)).get_store().read_concurrency == 7
    monkeypatch.setenv("LATECHUNK_READ_CONCURRENCY", "none")
    with pytest.raises(ValueError, match="LATECHUNK_READ_CONCURRENCY='none': expected a whole number >= 1"):
        DocumentStore.from_path(tmp_path)


def test_a_local_shard_file_rewritten_while_read_is_an_incomplete_read(tmp_path: Path) -> None:
    """Issue 47 kind 2 on a local disk: a JSONL file rewritten in place (another size, another mtime)
    after its first row was handed on ends in an ``unreadable_file`` row naming the replacement."""
    import os

    from latechunk_dagster.sources.readers import jsonl_rows

    shard = tmp_path / "a.jsonl"
    shard.write_bytes(_jsonl(range(0, 50)))
    rows = jsonl_rows(shard)
    first = next(rows)
    assert first.values["id"] == "d00000"
    shard.write_bytes(_jsonl(range(10, 70)))
    os.utime(shard, ns=(1, 2))  # whatever the clock's resolution, the version differs
    rest = list(rows)
    assert rest[-1].reason in INCOMPLETE_READS and "replaced while it was read" in rest[-1].detail
    assert str(shard) in rest[-1].where
