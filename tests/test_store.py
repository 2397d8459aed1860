"""Document store readers (text tree, JSONL, Parquet) and the stdlib demo corpus."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latechunk_dagster.app.demo_corpus import DEMO_SHARDS, SHARD_LETTERS, build_demo_store, shard_of
from latechunk_dagster.sources.files import Document, DocumentStore, RejectedRow


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def text_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    files = {
        "readme.md": "# Root readme",
        "notes.txt": "root notes",
        "alpha/one.txt": "alpha one",
        "alpha/deep/two.md": "alpha two, nested",
        "beta/three.txt": "beta three",
        "beta/ignored.json": "{}",
        ".hidden/secret.txt": "hidden",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


# ------------------------------------------------------------------------------------ text trees


def test_text_tree_shards_ids_and_hashes(text_tree: Path) -> None:
    store = DocumentStore.from_path(text_tree)
    assert store.kind == "text"
    assert store.uri == str(text_tree.resolve())
    assert store.shards() == ["_root", "alpha", "beta"]
    assert store.read_shard("_root") == [
        Document("notes.txt", "root notes", sha("root notes")),
        Document("readme.md", "# Root readme", sha("# Root readme")),
    ]
    alpha = store.read_shard("alpha")
    assert [d.doc_id for d in alpha] == ["alpha/deep/two.md", "alpha/one.txt"]
    assert [d.sha256 for d in alpha] == [sha("alpha two, nested"), sha("alpha one")]
    assert [d.doc_id for d in store.read_shard("beta")] == ["beta/three.txt"]


def test_fingerprint_changes_only_with_its_shard(text_tree: Path) -> None:
    store = DocumentStore.from_path(text_tree)
    before = store.fingerprints()
    assert before == {shard: store.shard_fingerprint(shard) for shard in store.shards()}
    assert store.fingerprints() == before  # stable when nothing changed
    (text_tree / "alpha" / "one.txt").write_text("alpha one, edited", encoding="utf-8")
    after = store.fingerprints()
    assert after["alpha"] != before["alpha"]
    assert after["beta"] == before["beta"] and after["_root"] == before["_root"]
    (text_tree / "alpha" / "one.txt").write_text("alpha one", encoding="utf-8")
    assert store.fingerprints() == before  # content-based, not time-based
    (text_tree / "alpha" / "one.txt").rename(text_tree / "alpha" / "uno.txt")
    assert store.shard_fingerprint("alpha") != before["alpha"]  # a renamed document counts


def test_invalid_utf8_file_is_kept_for_rejection(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 au lait")
    (doc,) = DocumentStore.from_path(tmp_path).read_shard("_root")
    assert doc.doc_id == "bad.txt"
    assert doc.text == "caf\udce9 au lait"
    with pytest.raises(UnicodeEncodeError):
        doc.text.encode("utf-8")
    assert doc.sha256 == hashlib.sha256(doc.text.encode("utf-8", "surrogatepass")).hexdigest()


# ----------------------------------------------------------------------------------------- JSONL


def test_single_jsonl_without_shard_column(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": "b", "text": "bee"}, {"id": 7, "text": "seven"}])
    store = DocumentStore.from_path(path)
    assert (store.kind, store.shards()) == ("jsonl", ["docs"])
    assert store.read_shard("docs") == [Document("7", "seven", sha("seven")), Document("b", "bee", sha("bee"))]


def test_single_jsonl_with_shard_column(tmp_path: Path) -> None:
    rows = [
        {"id": "x2", "text": "two", "shard": "s1"},
        {"id": "x1", "text": "one", "shard": "s1"},
        {"id": "x1", "text": "other one", "shard": "s2"},  # same id, other shard: allowed
    ]
    store = DocumentStore.from_path(write_jsonl(tmp_path / "docs.jsonl", rows))
    assert store.shards() == ["s1", "s2"]
    assert [(d.doc_id, d.text) for d in store.read_shard("s1")] == [("x1", "one"), ("x2", "two")]
    assert store.read_shard("s2") == [Document("x1", "other one", sha("other one"))]
    assert set(store.fingerprints()) == {"s1", "s2"}


def test_jsonl_directory(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "text": "a one"}])
    write_jsonl(tmp_path / "sub" / "b.jsonl", [{"id": "1", "text": "b one"}, {"id": "2", "text": "b two"}])
    store = DocumentStore.from_path(tmp_path)
    assert (store.kind, store.shards()) == ("jsonl", ["a", "sub/b"])
    assert store.read_shard("sub/b")[1] == Document("2", "b two", sha("b two"))
    before = store.fingerprints()
    write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "text": "a one!"}])
    after = store.fingerprints()
    assert after["a"] != before["a"] and after["sub/b"] == before["sub/b"]


def test_lone_surrogate_in_jsonl_is_kept_for_rejection(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "s", "text": "bad \\ud800 text"}\n', encoding="utf-8")
    (doc,) = DocumentStore.from_path(path).read_shard("docs")
    assert doc.text == "bad \ud800 text"
    with pytest.raises(UnicodeEncodeError):
        doc.text.encode("utf-8")
    assert doc.sha256 == hashlib.sha256(doc.text.encode("utf-8", "surrogatepass")).hexdigest()


def test_duplicate_id_keeps_the_first_and_rejects_later_rows(tmp_path: Path) -> None:
    rows = [{"id": "dup", "text": "1"}, {"id": "ok", "text": "fine"}, {"id": "dup", "text": "2"}]
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    docs, rejected = DocumentStore.from_path(path).read_shard_with_rejections("docs")
    assert docs == [Document("dup", "1", sha("1")), Document("ok", "fine", sha("fine"))]
    [rej] = rejected
    assert (rej.doc_id, rej.reason) == ("dup", "duplicate_id")
    assert f"{path.resolve()}: row 3: duplicate doc_id 'dup' in shard 'docs'" in rej.detail
    assert "row 1, which is kept" in rej.detail


@pytest.mark.parametrize(
    ("row", "reason", "message"),
    [
        ({"text": "no id"}, "missing_id", "missing or null 'id'"),
        ({"id": None, "text": "null id"}, "missing_id", "missing or null 'id'"),
        ({"id": ["x"], "text": "list id"}, "bad_id", "'id' must be a string or an integer, got list"),
        ({"id": "t"}, "bad_text", "'text' must be a string, got missing"),
        ({"id": "t", "text": 3}, "bad_text", "'text' must be a string, got int"),
        ({"id": "t", "text": None}, "bad_text", "'text' must be a string, got null"),
    ],
)
def test_bad_jsonl_row_is_rejected_alone_naming_file_and_row(
    tmp_path: Path, row: dict, reason: str, message: str
) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": "ok", "text": "fine"}, row, {"id": "ok2", "text": "also"}])
    store = DocumentStore.from_path(path)
    assert store.shards() == ["docs"]
    docs, [rej] = store.read_shard_with_rejections("docs")
    assert [d.doc_id for d in docs] == ["ok", "ok2"]
    assert rej.reason == reason and message in rej.detail
    assert rej.detail.startswith(f"{path.resolve()}: row 2")


def test_invalid_json_line_is_rejected_alone(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": \n[1, 2]\n{"id": "c", "text": "three"}\n')
    docs, rejected = DocumentStore.from_path(path).read_shard_with_rejections("docs")
    assert [d.doc_id for d in docs] == ["a", "c"]
    assert [(r.doc_id, r.reason) for r in rejected] == [("row 2", "invalid_json"), ("row 3", "invalid_json")]
    assert "expected a JSON object, got list" in rejected[1].detail


def test_a_cut_off_last_line_is_a_truncated_file_and_a_whole_one_is_a_document(tmp_path: Path) -> None:
    """Only a file's last line can lack its newline: invalid JSON there is a file cut off mid-write
    (``truncated_file``), valid JSON there is an ordinary last row. The parser's position names the
    line's own column (the line end is not parsed)."""
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": "tw')
    docs, [rej] = DocumentStore.from_path(cut).read_shard_with_rejections("cut")
    assert [d.doc_id for d in docs] == ["a"]
    assert (rej.doc_id, rej.reason) == ("row 2", "truncated_file")
    assert "the last line is cut off" in rej.detail and "line 1 column" in rej.detail
    whole = tmp_path / "whole.jsonl"
    whole.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}')
    docs, rejected = DocumentStore.from_path(whole).read_shard_with_rejections("whole")
    assert [d.doc_id for d in docs] == ["a", "b"] and rejected == []
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a", "text": \n{"id": "b", "text": "two"}\n')
    _, [rej] = DocumentStore.from_path(broken).read_shard_with_rejections("broken")
    assert rej.reason == "invalid_json" and "line 1 column" in rej.detail


def test_single_file_with_a_bad_row_in_one_shard(tmp_path: Path) -> None:
    """Issue 11: shards() must not raise; only the bad row is reported."""
    rows = [
        {"id": "x", "text": "good x", "shard": "x"},
        {"id": "y", "text": None, "shard": "y"},
        {"id": "z", "text": "good z", "shard": "z"},
    ]
    path = write_jsonl(tmp_path / "one.jsonl", rows)
    store = DocumentStore.from_path(path)
    assert store.shards() == ["x", "y", "z"]
    assert store.read_shard("x") == [Document("x", "good x", sha("good x"))]
    assert store.read_shard("z") == [Document("z", "good z", sha("good z"))]
    [rej] = list(store.iter_shard("y"))
    assert isinstance(rej, RejectedRow) and (rej.doc_id, rej.reason) == ("y", "bad_text")
    assert f"{path.resolve()}: row 2: 'text' must be a string, got null (id 'y')" == rej.detail
    assert set(store.fingerprints()) == {"x", "y", "z"}


def test_bad_shard_value_goes_to_the_file_stem_shard(tmp_path: Path) -> None:
    rows = [{"id": "a", "text": "one", "shard": "s"}, {"id": "b", "text": "two", "shard": ""}, {"id": "c", "text": "3"}]
    store = DocumentStore.from_path(write_jsonl(tmp_path / "f.jsonl", rows))
    assert store.shards() == ["f", "s"]
    docs, [rej] = store.read_shard_with_rejections("f")
    assert [d.doc_id for d in docs] == ["c"] and (rej.doc_id, rej.reason) == ("b", "bad_shard")


def test_fingerprint_changes_when_a_bad_row_is_fixed(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "one"}, {"id": "b", "text": None}])
    store = DocumentStore.from_path(path)
    broken = store.shard_fingerprint("d")
    write_jsonl(path, [{"id": "a", "text": "one"}, {"id": "b", "text": "two"}])
    assert store.shard_fingerprint("d") != broken


def test_iter_shard_streams(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": str(i), "text": f"doc {i}"} for i in range(5000)])
    it = DocumentStore.from_path(path).iter_shard("d")
    assert next(it) == Document("0", "doc 0", sha("doc 0"))  # a generator: nothing read ahead of need
    assert DocumentStore.from_path(path).count_documents("d") == 5000


def test_count_shards_lists_a_directory_store_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress counts of a run over many partitions: right per shard (text files, JSONL lines,
    Parquet rows; 0 for a shard that is not there) from one listing of the tree."""
    import latechunk_dagster.sources.layout as layout

    for shard, n in (("a", 3), ("b", 1), ("c", 2)):
        (tmp_path / "tree" / shard).mkdir(parents=True)
        for i in range(n):
            (tmp_path / "tree" / shard / f"{i}.txt").write_text(f"doc {i}")
    write_jsonl(tmp_path / "tables" / "x.jsonl", [{"id": str(i), "text": f"doc {i}"} for i in range(4)])
    pq.write_table(pa.table({"id": ["1", "2"], "text": ["one", "two"]}), tmp_path / "tables" / "y.parquet")
    walks: list[Path] = []
    real_walk = layout.walk
    monkeypatch.setattr(layout, "walk", lambda root: walks.append(root) or real_walk(root))
    tree = DocumentStore.from_path(tmp_path / "tree")
    walks.clear()  # from_path looks at the tree once to tell its kind
    assert tree.count_shards(["a", "b", "c", "gone"]) == {"a": 3, "b": 1, "c": 2, "gone": 0}
    assert len(walks) == 1
    assert DocumentStore.from_path(tmp_path / "tables" / "x.jsonl").count_shards(["x"]) == {"x": 4}
    (tmp_path / "tables" / "x.jsonl").unlink()
    assert DocumentStore.from_path(tmp_path / "tables").count_shards(["y"]) == {"y": 2}


# ----------------------------------------------------------------------------- byte order marks


def test_bom_starting_a_jsonl_file(tmp_path: Path) -> None:
    """Issue 11: bytes EF BB BF then two good rows read as two documents."""
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"id": "1", "text": "one"}\n{"id": "2", "text": "two"}\n')
    docs, rejected = DocumentStore.from_path(path).read_shard_with_rejections("docs")
    assert docs == [Document("1", "one", sha("one")), Document("2", "two", sha("two"))] and rejected == []


def test_bom_in_text_files_lines_and_values_is_not_text(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.md").write_bytes("\ufeff# Title\n\nIntro.\n".encode())
    (tree / "b.txt").write_bytes("x\ufeffy".encode())  # not leading: a zero-width no-break space, kept
    docs = DocumentStore.from_path(tree).read_shard("_root")
    assert [d.text for d in docs] == ["# Title\n\nIntro.\n", "x\ufeffy"]
    assert docs[0].sha256 == sha("# Title\n\nIntro.\n")
    jsonl = tmp_path / "j.jsonl"
    jsonl.write_bytes(b'{"id": "1", "text": "one"}\n\xef\xbb\xbf{"id": "2", "text": "\\ufefftwo"}\n')
    assert [d.text for d in DocumentStore.from_path(jsonl).read_shard("j")] == ["one", "two"]
    pq_path = write_parquet(tmp_path / "p.parquet", [{"id": "1", "text": "\ufeffpq text"}])
    assert DocumentStore.from_path(pq_path).read_shard("p") == [Document("1", "pq text", sha("pq text"))]


# --------------------------------------------------------------------------------------- Parquet


def test_parquet_file_and_shard_column(tmp_path: Path) -> None:
    plain = write_parquet(tmp_path / "plain.parquet", [{"id": "b", "text": "bee"}, {"id": "a", "text": "ay"}])
    store = DocumentStore.from_path(plain)
    assert (store.kind, store.shards()) == ("parquet", ["plain"])
    assert store.read_shard("plain") == [Document("a", "ay", sha("ay")), Document("b", "bee", sha("bee"))]

    rows = [{"id": "1", "text": "one", "shard": "odd"}, {"id": "2", "text": "two", "shard": "even"}]
    sharded = DocumentStore.from_path(write_parquet(tmp_path / "sharded.parquet", rows))
    assert sharded.shards() == ["even", "odd"]
    assert sharded.read_shard("odd") == [Document("1", "one", sha("one"))]


def test_parquet_directory(tmp_path: Path) -> None:
    root = tmp_path / "pq"
    write_parquet(root / "p1.parquet", [{"id": "a", "text": "first"}])
    write_parquet(root / "p2.parquet", [{"id": "a", "text": "second"}, {"id": "b", "text": "third"}])
    store = DocumentStore.from_path(root)
    assert (store.kind, store.shards()) == ("parquet", ["p1", "p2"])
    assert [d.sha256 for d in store.read_shard("p2")] == [sha("second"), sha("third")]


def test_parquet_missing_column_is_one_rejected_file(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "docs.parquet", [{"id": "a", "body": "no text column"}])
    docs, [rej] = DocumentStore.from_path(path).read_shard_with_rejections("docs")
    assert docs == [] and (rej.doc_id, rej.reason) == ("*", "unreadable_file")
    assert "docs.parquet: missing column(s) ['text']" in rej.detail


def test_parquet_null_id_null_text_and_wrong_type_rejected_alone(tmp_path: Path) -> None:
    path = write_parquet(
        tmp_path / "docs.parquet", [{"id": "a", "text": "x"}, {"id": None, "text": "y"}, {"id": "c", "text": None}]
    )
    store = DocumentStore.from_path(path)
    assert store.shards() == ["docs"]
    docs, rejected = store.read_shard_with_rejections("docs")
    assert [d.doc_id for d in docs] == ["a"]
    assert [(r.doc_id, r.reason) for r in rejected] == [("row 2", "missing_id"), ("c", "bad_text")]
    assert "docs.parquet: row 2: missing or null 'id'" in rejected[0].detail
    typed = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": pa.array([[1], [2, 3]])}), typed)
    _, rejected = DocumentStore.from_path(typed).read_shard_with_rejections("typed")
    assert [r.reason for r in rejected] == ["bad_text", "bad_text"]
    assert "'text' must be a string, got list" in rejected[0].detail


def test_parquet_is_read_in_record_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.sources import readers

    monkeypatch.setattr(readers, "PARQUET_BATCH_ROWS", 7)
    seen: list[int] = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kw):  # type: ignore[no-untyped-def]
        for batch in real(self, *args, **kw):
            seen.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    path = write_parquet(tmp_path / "big.parquet", [{"id": str(i), "text": f"t{i}"} for i in range(30)])
    assert len(DocumentStore.from_path(path).read_shard("big")) == 30
    assert max(seen) <= 7 and sum(seen) == 30


# ----------------------------------------------------------------------------------------- errors


def test_unknown_shard(text_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="nope"):
        DocumentStore.from_path(text_tree).read_shard("nope")
    single = DocumentStore.from_path(write_jsonl(tmp_path / "one.jsonl", [{"id": "1", "text": "t"}]))
    with pytest.raises(KeyError, match="nope"):
        single.shard_fingerprint("nope")


def test_missing_path_and_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        DocumentStore.from_path(tmp_path / "absent")
    (tmp_path / "data.csv").write_text("id,text\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown document store kind"):
        DocumentStore.from_path(tmp_path / "data.csv")
    with pytest.raises(ValueError, match="found kinds: none"):
        DocumentStore.from_path(tmp_path)  # only a .csv inside
    (tmp_path / "a.txt").write_text("text", encoding="utf-8")
    write_jsonl(tmp_path / "b.jsonl", [{"id": "1", "text": "t"}])
    # a text file at the top of a table store is a dataset card (issue 27, 9): skipped and named
    store = DocumentStore.from_path(tmp_path)
    assert (store.kind, store.shards()) == ("jsonl", ["b"])
    assert [(r.reason, r.where) for r in store.bad_shards()] == [("other_kind", str(tmp_path / "a.txt"))]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.md").write_text("text", encoding="utf-8")
    with pytest.raises(ValueError, match="found kinds: jsonl .*b.jsonl.*, text .*c.md"):
        DocumentStore.from_path(tmp_path)


# ----------------------------------------------------------------------------------- demo corpus


def test_demo_shards_cover_the_alphabet() -> None:
    assert len(DEMO_SHARDS) == 12 and DEMO_SHARDS == sorted(SHARD_LETTERS)
    letters = "".join(SHARD_LETTERS.values())
    assert sorted(letters) == list("abcdefghijklmnopqrstuvwxyz")
    assert shard_of("json") == "h-k" and shard_of("cProfile") == "c"


def test_demo_store_first_modules_and_rebuild(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    start = time.monotonic()
    assert build_demo_store(out, max_modules=40) == out
    assert time.monotonic() - start < 20
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{s}.jsonl" for s in DEMO_SHARDS)

    store = DocumentStore.from_path(out)
    assert (store.kind, store.shards()) == ("jsonl", DEMO_SHARDS)  # empty shards included: fixed keys
    docs = [doc for shard in store.shards() for doc in store.read_shard(shard)]
    assert 10 <= len(docs) <= 40
    assert all(len(doc.text) >= 200 and not doc.doc_id.startswith("_") for doc in docs)
    assert all(shard_of(doc.doc_id) == shard for shard in store.shards() for doc in store.read_shard(shard))
    assert "antigravity" not in {doc.doc_id for doc in docs}

    before = store.fingerprints()
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    build_demo_store(out, max_modules=40)
    assert store.fingerprints() == before
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes  # nothing rewritten


def test_demo_store_explicit_modules(tmp_path: Path) -> None:
    build_demo_store(tmp_path, modules=["json", "this", "antigravity", "_json", "no_such_module_xyz", "textwrap"])
    store = DocumentStore.from_path(tmp_path)
    by_id = {doc.doc_id: doc for shard in store.shards() for doc in store.read_shard(shard)}
    assert sorted(by_id) == ["json", "textwrap"]
    assert by_id["json"].text.startswith(json.__doc__.strip())
    assert "\n\nFunction json.dumps():\nSerialize ``obj`` to a JSON formatted ``str``." in by_id["json"].text
    assert "\n\nClass textwrap.TextWrapper:\n" in by_id["textwrap"].text
    assert "\n\nMethod textwrap.TextWrapper.wrap():\n" in by_id["textwrap"].text


def test_upstream_tables_follow_the_stores_row_rules() -> None:
    """A table from an upstream asset: a null text and a later duplicate id are rejected alone, by row,
    with the same rule (and wording) as the file stores; a leading BOM is removed."""
    import pyarrow as pa

    from latechunk_dagster.sources.frames import iter_table_documents

    table = pa.table({"id": ["a", "b", "a", "c"], "text": ["\ufeffFirst.", None, "Again.", "Third."]})
    items = list(iter_table_documents(table, where="partition 'p'"))
    assert [(i.doc_id, getattr(i, "text", None)) for i in items if isinstance(i, Document)] == [
        ("a", "First."),
        ("c", "Third."),
    ]
    rejected = [(r.doc_id, r.reason, r.where) for r in items if isinstance(r, RejectedRow)]
    assert rejected == [("b", "bad_text", "partition 'p': row 2"), ("a", "duplicate_id", "partition 'p': row 3")]
    assert "first at partition 'p': row 1, which is kept" in items[2].detail
