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
from latechunk_dagster.sources.files import Document, DocumentStore


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


def test_duplicate_id_in_shard(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": "dup", "text": "1"}, {"id": "dup", "text": "2"}])
    with pytest.raises(ValueError, match=r"duplicate doc_id 'dup' in shard 'docs'"):
        DocumentStore.from_path(path).read_shard("docs")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"text": "no id"}, "missing or null 'id'"),
        ({"id": None, "text": "null id"}, "missing or null 'id'"),
        ({"id": "t"}, "'text' must be a string, got missing"),
        ({"id": "t", "text": 3}, "'text' must be a string, got int"),
    ],
)
def test_bad_jsonl_row_names_file_and_row(tmp_path: Path, row: dict, message: str) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": "ok", "text": "fine"}, row])
    with pytest.raises(ValueError, match=message) as info:
        DocumentStore.from_path(path).read_shard("docs")
    assert f"{path.resolve()}: row 2" in str(info.value)


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


def test_parquet_missing_column(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "docs.parquet", [{"id": "a", "body": "no text column"}])
    with pytest.raises(ValueError, match=r"docs\.parquet: missing column\(s\) \['text'\]"):
        DocumentStore.from_path(path).read_shard("docs")


def test_parquet_null_id_names_row(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "docs.parquet", [{"id": "a", "text": "x"}, {"id": None, "text": "y"}])
    with pytest.raises(ValueError, match=r"docs\.parquet: row 2: missing or null 'id'"):
        DocumentStore.from_path(path).shards()


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
    with pytest.raises(ValueError, match="found kinds: jsonl, text"):
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
