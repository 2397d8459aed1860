"""Inputs from public bug reports against comparable systems (issue 16), through public surfaces.

Undecodable names and ids (a Latin-1 directory or file name, a JSON ``"\\ud800"`` id), ids that
collide when fields are joined with U+001F, a store sensor that scanned shards x rows, accents
lost at chunk boundaries in NFD text, JSON objects that repeat a key. The right answers come from
the inputs themselves: which rows are good, what each document's text is.
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, sink
from latechunk_dagster.evaluation.queries import QueryFileError, read_queries
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.sensors import read_cursor, sync_partitions
from latechunk_dagster.pipeline import config as pipeline_config
from latechunk_dagster.sources import files as store_files
from latechunk_dagster.sources import store_files as store_file_rows
from latechunk_dagster.sources.files import DocumentStore
from tests.conftest import SHARED_ENGINE
from tests.test_cli import run_cli
from tests.test_pipeline import TABLE, make_defs, run_partitions

FIXED_4 = {"ops": {"chunk_vectors": {"config": {"strategy": "fixed_tokens", "chunk_size": 4}}}}

NFD_RESUME = unicodedata.normalize("NFD", "Un résumé")
#: 200 combining acute accents right after the first chunk's last token (FixedTokens(4): [CLS] a b re | c ...)
MARKS = "A B re" + "\u0301" * 200 + " c d e"


def mkdir_bytes(parent: Path, name: bytes) -> Path:
    """A directory whose name is the raw bytes ``name`` (not valid UTF-8): as an old archive unpacks."""
    path = os.fsencode(parent) + b"/" + name
    os.makedirs(path, exist_ok=True)
    return Path(os.fsdecode(path))


def write_bytes_name(parent: Path, name: bytes, text: str) -> None:
    with open(os.fsencode(parent) + b"/" + name, "w", encoding="utf-8") as f:
        f.write(text)


def text_tree(root: Path) -> Path:
    """good/a.txt, good/r\\xe9sum\\xe9.txt (Latin-1 file name), caf\\xe9/b.txt (Latin-1 shard name)."""
    (root / "good").mkdir(parents=True)
    (root / "good" / "a.txt").write_text("Acme Corp. builds pumps in Rotterdam.")
    write_bytes_name(root / "good", b"r\xe9sum\xe9.txt", "A curriculum vitae with a Latin-1 file name.")
    write_bytes_name(mkdir_bytes(root, b"caf\xe9"), b"b.txt", "A shard from an old archive.")
    return root


#: The JSONL store: raw lines, so that repeated keys and JSON surrogate escapes reach the reader as written.
JSONL_LINES = [
    json.dumps({"id": "x\x1fy", "text": "Pumps are built in Rotterdam by Acme.", "shard": "s"}),
    json.dumps({"id": "y", "text": "Owls hunt at night and fly silently.", "shard": "s\x1fx"}),
    json.dumps({"id": "before", "text": "A good row before the bad one.", "shard": "a"}),
    '{"id": "bad\\ud800id", "text": "The id of this row is not valid Unicode.", "shard": "a"}',
    json.dumps({"id": "after", "text": "A good row after the bad one.", "shard": "a"}),
    '{"id": "dupkey", "text": "first text", "text": "second text", "shard": "a"}',
    '{"id": "b", "id": "c", "text": "Which id is meant?", "shard": "a"}',
    json.dumps({"id": "resume", "text": NFD_RESUME, "shard": "nfd"}, ensure_ascii=False),
    json.dumps({"id": "marks", "text": MARKS, "shard": "nfd"}, ensure_ascii=False),
]


def dagster_instance(home: Path) -> Any:  # noqa: ANN401 - Dagster's context manager
    home.mkdir(parents=True, exist_ok=True)
    return dg.instance_for_test(temp_dir=str(home))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def rows_of(db: Path, table: str) -> list[dict[str, Any]]:
    return sink.connect(str(db)).open_table(table).to_arrow().to_pylist()


@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory, chunker: LateChunker) -> Iterator[dict[str, Any]]:
    """One real materialization (FixedTokens(4)) of every partition of the JSONL store."""
    SHARED_ENGINE["chunker"] = chunker
    root = tmp_path_factory.mktemp("hostile")
    store, db = write_lines(root / "docs.jsonl", JSONL_LINES), root / "lancedb"
    with dagster_instance(root / "home") as instance:
        added, _ = sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        defs = make_defs(store, db)
        result = run_partitions(defs, instance, added[0], added[-1], run_config=FIXED_4)
        yield {"added": added, "result": result, "db": db, "store": store, "instance": instance, "defs": defs}


# -- 1. a shard directory whose name is not valid UTF-8 ------------------------------------------


def test_undecodable_shard_directory_is_skipped_and_named_while_the_rest_syncs(tmp_path: Path) -> None:
    store = DocumentStore.from_path(text_tree(tmp_path / "tree"))
    assert store.shards() == ["good"]
    [bad] = store.bad_shards()
    assert bad.reason == "bad_shard_name" and "caf\\xe9" in bad.detail
    warnings: list[str] = []
    with dagster_instance(tmp_path / "home") as instance:
        added, removed = sync_partitions(instance, store, TABLE.partitions_def, warn=warnings.append)
        assert (added, removed) == (["good"], [])
        assert instance.get_dynamic_partitions(TABLE.partitions_def.name) == ["good"]
    [line] = warnings
    assert "caf\\xe9" in line and "not valid UTF-8" in line


def test_undecodable_table_file_name_is_skipped_too(tmp_path: Path) -> None:
    root = tmp_path / "tables"
    root.mkdir()
    write_lines(root / "good.jsonl", [json.dumps({"id": "a", "text": "fine"})])
    write_bytes_name(root, b"caf\xe9.jsonl", json.dumps({"id": "b", "text": "from an old archive"}) + "\n")
    store = DocumentStore.from_path(root)
    assert store.shards() == ["good"] and store.fingerprints().keys() == {"good"}
    assert ["caf\\xe9" in r.detail for r in store.bad_shards()] == [True]


def test_sensor_adds_the_good_shards_of_a_store_with_an_undecodable_one(tmp_path: Path) -> None:
    store = text_tree(tmp_path / "tree")
    [sensor] = [s for s in TABLE.sensors if s.name == "chunk_vectors_store_sensor"]
    resources = {"store": DocumentStoreResource(path=str(store)), "lancedb": LanceDBResource(uri=str(tmp_path / "db"))}
    with dagster_instance(tmp_path / "home") as instance:
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            tick = sensor(ctx)
    [add] = tick.dynamic_partitions_requests
    assert list(add.partition_keys) == ["good"]
    assert read_cursor(tick.cursor)[1].keys() == {"good"}


def test_documents_observation_versions_every_good_shard_in_one_pass(tmp_path: Path) -> None:
    store = text_tree(tmp_path / "tree")
    (store / "other").mkdir()
    (store / "other" / "c.txt").write_text("Another shard.")
    st = DocumentStore.from_path(store)
    with dagster_instance(tmp_path / "home") as instance:
        sync_partitions(instance, st, TABLE.partitions_def)
        defs = dg.Definitions(
            assets=[TABLE.documents_asset],
            jobs=[dg.define_asset_job("observe", selection=[TABLE.documents_asset.key])],
            resources={"store": DocumentStoreResource(path=str(store))},
        )
        result = defs.resolve_job_def("observe").execute_in_process(instance=instance)
        assert result.success
        versions = {
            e.partition: e.event_specific_data.asset_observation.tags["dagster/data_version"]
            for e in result.all_events
            if e.event_type_value == "ASSET_OBSERVATION"
        }
    assert versions == {"good": st.shard_fingerprint("good"), "other": st.shard_fingerprint("other")}


def test_cli_sync_partitions_names_the_undecodable_shard(tmp_path: Path) -> None:
    store = text_tree(tmp_path / "tree")
    out = run_cli(["sync-partitions"], tmp_path / "home", LATECHUNK_DOCUMENT_STORE=str(store))
    assert out.returncode == 0, out.stderr
    assert "added ['good']" in out.stdout
    assert "skipped:" in out.stderr and "caf\\xe9" in out.stderr and "Traceback" not in out.stderr


def test_single_file_shard_value_that_is_not_valid_unicode_is_a_bad_shard_row(tmp_path: Path) -> None:
    store = DocumentStore.from_path(
        write_lines(
            tmp_path / "docs.jsonl",
            [json.dumps({"id": "a", "text": "fine", "shard": "ok"}), '{"id": "b", "text": "t", "shard": "caf\\udce9"}'],
        )
    )
    assert store.shards() == ["docs", "ok"]
    docs, [bad] = store.read_shard_with_rejections("docs")
    assert docs == [] and (bad.doc_id, bad.reason) == ("b", "bad_shard") and "row 2" in bad.where


# -- 2. one undecodable document id -----------------------------------------------------------


def test_undecodable_file_name_is_rejected_alone_and_named(tmp_path: Path) -> None:
    store = DocumentStore.from_path(text_tree(tmp_path / "tree"))
    docs, [bad] = store.read_shard_with_rejections("good")
    assert [d.doc_id for d in docs] == ["good/a.txt"]
    assert (bad.doc_id, bad.reason) == ("good/r\\xe9sum\\xe9.txt", "bad_id")
    assert "r\\xe9sum\\xe9.txt" in bad.where and "not valid UTF-8" in bad.detail


def test_text_tree_materialization_writes_the_good_file_and_records_the_bad_name(
    tmp_path: Path, chunker: LateChunker
) -> None:
    SHARED_ENGINE["chunker"] = chunker
    store, db = text_tree(tmp_path / "tree"), tmp_path / "lancedb"
    with dagster_instance(tmp_path / "home") as instance:
        sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        result = run_partitions(make_defs(store, db), instance, "good", "good")
    assert result.success
    assert {r["doc_id"] for r in rows_of(db, "chunks")} == {"good/a.txt"}
    [rej] = rows_of(db, "rejected_documents")
    assert (rej["doc_id"], rej["partition"], rej["reason"]) == ("good/r\\xe9sum\\xe9.txt", "good", "bad_id")
    assert "r\\xe9sum\\xe9.txt" in rej["detail"]
    assert all(c.passed for c in result.get_asset_check_evaluations())


def test_jsonl_id_with_a_lone_surrogate_is_rejected_alone(jsonl_run) -> None:
    result = jsonl_run["result"]
    assert result.success
    chunked = {r["doc_id"] for r in rows_of(jsonl_run["db"], "chunks") if r["partition"] == "a"}
    assert chunked == {"before", "after"}
    rejected = {r["doc_id"]: r for r in rows_of(jsonl_run["db"], "rejected_documents")}
    bad = rejected["bad\\ud800id"]
    assert (bad["partition"], bad["reason"]) == ("a", "bad_id")
    assert "docs.jsonl: row 4" in bad["detail"] and "not valid Unicode" in bad["detail"]
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]


def test_parquet_and_upstream_ids_that_are_not_utf8_are_rejected_alone(tmp_path: Path) -> None:
    """Arrow does not validate UTF-8 everywhere: such a value failed the whole record batch."""
    import pyarrow.parquet as pq

    from latechunk_dagster.sources.frames import iter_table_documents

    ids = pa.array([b"good1", b"r\xe9sum\xe9", b"good2"], pa.binary()).view(pa.string())
    table = pa.table({"id": ids, "text": ["First good text.", "Bad id.", "Second good text."]})
    pq.write_table(table, tmp_path / "docs.parquet")
    docs, [bad] = DocumentStore.from_path(tmp_path / "docs.parquet").read_shard_with_rejections("docs")
    assert [d.doc_id for d in docs] == ["good1", "good2"]
    assert (bad.doc_id, bad.reason) == ("r\\xe9sum\\xe9", "bad_id") and "row 2" in bad.where
    items = list(iter_table_documents(table))
    assert [(i.doc_id, getattr(i, "reason", None)) for i in items] == [
        ("good1", None),
        ("r\\xe9sum\\xe9", "bad_id"),
        ("good2", None),
    ]


# -- 3. chunk ids that collided across partitions ---------------------------------------------


def test_ids_joined_with_a_separator_no_longer_collide_across_partitions(jsonl_run) -> None:
    """Shard ``s`` + id ``x\\x1fy`` and shard ``s\\x1fx`` + id ``y`` joined with U+001F are one string."""
    assert {"s", "s\x1fx"} <= set(jsonl_run["added"])
    rows = rows_of(jsonl_run["db"], "chunks")
    for line in JSONL_LINES[:2]:
        doc = json.loads(line)
        parts = [r for r in rows if (r["partition"], r["doc_id"]) == (doc["shard"], doc["id"])]
        assert parts, doc  # each partition still holds its own document, whole
        assert all(r["text"] == doc["text"][r["char_start"] : r["char_end"]] for r in parts)
        covered = {i for r in parts for i in range(r["char_start"], r["char_end"])}
        assert covered >= {i for i, ch in enumerate(doc["text"]) if not ch.isspace()}
    assert len({r["chunk_id"] for r in rows}) == len(rows)


def test_parity_details_keep_partition_and_doc_apart(tmp_path: Path, chunker: LateChunker) -> None:
    """Partition ``2024/jan`` + doc ``x`` and partition ``2024`` + doc ``jan/x``: one string when joined by ``/``."""
    SHARED_ENGINE["chunker"] = chunker
    store, db = tmp_path / "tables", tmp_path / "lancedb"
    (store / "2024").mkdir(parents=True)
    write_lines(store / "2024" / "jan.jsonl", [json.dumps({"id": "x", "text": "January notes about pumps."})])
    write_lines(store / "2024.jsonl", [json.dumps({"id": "jan/x", "text": "A yearly note about owls."})])
    with dagster_instance(tmp_path / "home") as instance:
        added, _ = sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        assert added == ["2024", "2024/jan"]
        result = run_partitions(make_defs(store, db), instance, "2024", "2024/jan")
    assert result.success
    [parity] = [c for c in result.get_asset_check_evaluations() if c.check_name == "parity_sample"]
    details = parity.metadata["details"].value
    assert {p: set(d) for p, d in details.items()} == {"2024": {"jan/x"}, "2024/jan": {"x"}}
    assert {(r["partition"], r["doc_id"]) for r in rows_of(db, "chunks")} == {("2024", "jan/x"), ("2024/jan", "x")}


def test_rejection_ids_are_unique_per_rejected_row(jsonl_run) -> None:
    rejected = rows_of(jsonl_run["db"], "rejected_documents")
    assert len({r["rejection_id"] for r in rejected}) == len(rejected) == 3


def _old_chunk_id(partition: str, doc_id: str, index: int) -> str:
    """The chunk_id of chunking version 1 (fields joined with U+001F), to build a table of that version."""
    return hashlib.sha256(f"{partition}\x1f{doc_id}\x1f{index}".encode()).hexdigest()[:32]


def test_a_version_1_table_is_reencoded_and_its_old_ids_deleted(jsonl_run, tmp_path: Path) -> None:
    """Existing tables: their rows carry another vector_config, so every document is re-encoded and
    the same commit deletes the old-id rows of the replaced documents."""
    assert pipeline_config.CHUNKING_VERSION >= 2  # ids of version 2 and later are JSON-array hashes
    db = tmp_path / "lancedb"
    conn = sink.connect(str(db))
    new = sink.connect(str(jsonl_run["db"])).open_table("chunks").to_arrow()
    old = new.to_pylist()
    for r in old:
        r["chunk_id"] = _old_chunk_id(r["partition"], r["doc_id"], r["chunk_index"])
        r["vector_config"] = "written-by-chunking-version-1"
    conn.create_table("chunks", pa.Table.from_pylist(old, schema=new.schema))
    first, last = jsonl_run["added"][0], jsonl_run["added"][-1]
    result = run_partitions(make_defs(jsonl_run["store"], db), jsonl_run["instance"], first, last, run_config=FIXED_4)
    assert result.success
    after = conn.open_table("chunks").to_arrow()
    assert sorted(after.column("chunk_id").to_pylist()) == sorted(new.column("chunk_id").to_pylist())
    assert set(after.column("vector_config").to_pylist()) == set(new.column("vector_config").to_pylist())


# -- 4. the store sensor reads a single-file store once -----------------------------------------


def test_fingerprints_and_check_reads_take_one_pass_over_a_single_file_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [json.dumps({"id": f"d{i}", "text": f"text {i}", "shard": f"s{i % 7}"}) for i in range(70)]
    rows += [rows[0], '{"id": "bad", "shard": "s3"}']  # a duplicate id and a bad row count too
    store = DocumentStore.from_path(write_lines(tmp_path / "docs.jsonl", rows))
    expected = {shard: store.shard_fingerprint(shard) for shard in store.shards()}  # one shard at a time
    reads: list[Path] = []
    real = store_files.jsonl_rows

    def counting(file: Path):  # noqa: ANN202 - the real reader, counted
        reads.append(file)
        return real(file)

    for module in (store_files, store_file_rows):  # the public reads and the single-file rows they build on
        monkeypatch.setattr(module, "jsonl_rows", counting)
    assert store.fingerprints() == expected
    assert len(reads) == 1


def test_a_run_over_many_partitions_reads_a_single_jsonl_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the chunk asset reads for a run over many partitions (``iter_shards``): the same rows as
    one ``iter_shard`` per partition, with one scan of the file instead of one per partition."""
    rows = [json.dumps({"id": f"d{i}", "text": f"text {i}", "shard": f"s{i % 5}"}) for i in range(50)]
    rows += ["not json", rows[3], '{"id": "x", "text": "t", "text": "u", "shard": "s1"}']
    path = write_lines(tmp_path / "docs.jsonl", ["\ufeff" + rows[0], *rows[1:]])
    store = DocumentStore.from_path(path)
    shards = store.shards()
    expected = {shard: list(store.iter_shard(shard)) for shard in shards}
    whole_reads: list[Path] = []
    real = store_files.jsonl_rows

    def counting(file: Path, lines=None):  # noqa: ANN001, ANN202 - the real reader, counted
        if lines is None:
            whole_reads.append(file)
        return real(file, lines)

    for module in (store_files, store_file_rows):  # the public reads and the single-file rows they build on
        monkeypatch.setattr(module, "jsonl_rows", counting)
    assert {shard: list(items) for shard, items in store.iter_shards(shards)} == expected
    assert whole_reads == []
    tree = DocumentStore.from_path(text_tree(tmp_path / "tree"))
    got = {shard: list(items) for shard, items in tree.iter_shards(["good"])}
    assert got == {"good": list(tree.iter_shard("good"))}
    with pytest.raises(KeyError):
        list(dict(tree.iter_shards(["gone"]))["gone"])
    # the file changes after the scan: the shard is read whole, as it is now
    runs = store.iter_shards(shards)
    first, items = next(runs)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "late", "text": "added after the scan", "shard": first}) + "\n")
    assert [getattr(i, "doc_id", None) for i in items][-1] == "late"


# -- 5. characters that produced no token, at chunk boundaries -----------------------------------


def test_nfd_accent_at_a_chunk_boundary_is_stored(jsonl_run) -> None:
    rows = sorted(
        (r for r in rows_of(jsonl_run["db"], "chunks") if r["doc_id"] == "resume"), key=lambda r: r["chunk_index"]
    )
    assert "".join(r["text"] for r in rows) == NFD_RESUME  # 'résumé', the last accent included
    assert rows[-1]["text"].endswith("e\u0301")


def test_a_run_of_200_combining_marks_lies_in_a_chunk(jsonl_run) -> None:
    rows = [r for r in rows_of(jsonl_run["db"], "chunks") if r["doc_id"] == "marks"]
    covered = {i for r in rows for i in range(r["char_start"], r["char_end"])}
    visible = {i for i, ch in enumerate(MARKS) if not ch.isspace()}
    assert visible <= covered  # no visible character between two chunks
    first, second = sorted(rows, key=lambda r: r["chunk_index"])
    assert first["text"] == "A B re" + "\u0301" * 200  # the marks belong to the chunk of the 'e' before them
    assert second["char_start"] == MARKS.index(" c") + 1


# -- 6. JSON objects with a repeated key ------------------------------------------------------


def test_jsonl_rows_with_a_repeated_key_are_rejected_with_a_reason(jsonl_run) -> None:
    chunk_ids = {r["doc_id"] for r in rows_of(jsonl_run["db"], "chunks")}
    assert not {"dupkey", "b", "c"} & chunk_ids
    rejected = {r["doc_id"]: r for r in rows_of(jsonl_run["db"], "rejected_documents")}
    assert rejected["dupkey"]["reason"] == "duplicate_key" and "['text']" in rejected["dupkey"]["detail"]
    assert rejected["row 7"]["reason"] == "duplicate_key" and "['id']" in rejected["row 7"]["detail"]
    assert "docs.jsonl: row 7" in rejected["row 7"]["detail"]


def test_query_file_line_with_a_repeated_key_is_refused(tmp_path: Path) -> None:
    good = json.dumps({"query": "who builds pumps", "doc_id": "a"})
    path = write_lines(tmp_path / "q.jsonl", [good, '{"query": "q1", "query": "q2", "doc_id": "a"}'])
    with pytest.raises(QueryFileError, match=r"line 2: repeated key\(s\) \['query'\]"):
        read_queries(path)
    path = write_lines(tmp_path / "q2.jsonl", [good, '{"query": "q", "doc_id": "bad\\ud800"}'])
    with pytest.raises(QueryFileError, match=r"line 2: 'doc_id' 'bad\\\\ud800' is not valid Unicode"):
        read_queries(path)
