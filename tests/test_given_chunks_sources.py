"""A store column of each document's own chunks (issue 29, item 1, the sources side).

Real files in ``tmp_path`` (JSONL, Parquet written by pyarrow), real pyarrow tables and pandas
frames. Expected chunks are written by hand next to the rows; the expected hash is computed here
from its documented formula with ``hashlib``/``json``, not by the code under test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latechunk_dagster.sources.documents import (
    Document,
    MissingColumnError,
    NotATableError,
    RejectedRow,
    fingerprint_of,
)
from latechunk_dagster.sources.files import DocumentStore
from latechunk_dagster.sources.frames import iter_table_documents

TEXT_A = "Owls hunt at night. They fly almost silently."  # sentence 2 starts at 20
TEXT_B = "Green tea is steamed. Black tea is oxidised."  # sentence 2 starts at 22
RANGES_A = ((0, 19), (20, 45))
TEXTS_B = ("Green tea is steamed.", "Black tea is oxidised.")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha_with(text: str, chunks: list[Any]) -> str:
    """The documented formula: sha256 of the JSON array [sha256(text), chunks], as ``json.dumps`` writes it."""
    return hashlib.sha256(json.dumps([sha(text), chunks]).encode("ascii")).hexdigest()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def split(items: list[Document | RejectedRow]) -> tuple[dict[str, Document], list[RejectedRow]]:
    docs = {i.doc_id: i for i in items if isinstance(i, Document)}
    return docs, [i for i in items if isinstance(i, RejectedRow)]


def test_the_hand_checked_ranges_are_the_sentences() -> None:
    assert [TEXT_A[s:e] for s, e in RANGES_A] == ["Owls hunt at night.", "They fly almost silently."]
    assert TEXT_B.index(TEXTS_B[1]) == 22


# ------------------------------------------------------------------------------------------ hash


def test_sha256_is_the_text_hash_without_chunks_and_changes_with_them() -> None:
    plain = Document.from_text("a", TEXT_A)
    assert plain.chunks is None and plain.sha256 == sha(TEXT_A)
    given = Document.from_text("a", TEXT_A, RANGES_A)
    assert given.chunks == RANGES_A
    assert given.sha256 == sha_with(TEXT_A, [[0, 19], [20, 45]])
    moved = Document.from_text("a", TEXT_A, ((0, 20), (20, 45)))
    as_texts = Document.from_text("a", TEXT_B, TEXTS_B)
    assert as_texts.sha256 == sha_with(TEXT_B, list(TEXTS_B))
    edited = Document.from_text("a", TEXT_A + " ", RANGES_A)
    assert len({plain.sha256, given.sha256, moved.sha256, edited.sha256}) == 4
    assert hash(given) == hash(Document.from_text("a", TEXT_A, RANGES_A))  # still frozen and hashable


def test_a_store_hash_changes_when_only_the_chunks_change(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    write_jsonl(path, [{"id": "a", "text": TEXT_A, "chunks": [[0, 19], [20, 45]]}])
    store = DocumentStore.from_path(path, chunks_column="chunks")
    before, fp_before = store.read_shard("docs")[0].sha256, store.fingerprints()
    write_jsonl(path, [{"id": "a", "text": TEXT_A, "chunks": [[0, 20], [20, 45]]}])
    after, fp_after = store.read_shard("docs")[0].sha256, store.fingerprints()
    assert (before, after) == (sha_with(TEXT_A, [[0, 19], [20, 45]]), sha_with(TEXT_A, [[0, 20], [20, 45]]))
    assert fp_before != fp_after
    # the same file read without a chunks column: the text hash, chunks None (the column is not read)
    (doc,) = DocumentStore.from_path(path).read_shard("docs")
    assert (doc.chunks, doc.sha256) == (None, sha(TEXT_A))


# ------------------------------------------------------------------------------------------ JSONL

BAD_JSONL: list[tuple[Any, str]] = [  # (chunks value, what the detail says), one row each
    (None, "is null"),
    ([], "is an empty list"),
    ("0-19", "got a string"),
    ({"start": 0, "end": 19}, "got an object"),
    ([[0, 19], "They fly almost silently."], "chunk 1 is a string ('They fly almost silently.'), but chunk 0 is not"),
    (["Owls hunt at night.", [20, 45]], "chunk 1 is not a string ([20, 45]), but chunk 0 is"),
    ([[0, 19], [20, 30, 45]], "chunk 1 must be a [start, end] pair of integers, got [20, 30, 45]"),
    ([[True, 19]], "chunk 0 must be a [start, end] pair of integers, got [True, 19]"),
    ([[0, 19.0]], "chunk 0 must be a [start, end] pair of integers, got [0, 19.0]"),
    ([[0, None]], "chunk 0 must be a [start, end] pair of integers, got [0, None]"),
]


def test_jsonl_reads_ranges_and_texts_and_rejects_each_bad_shape_alone(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [{"id": "good-a", "text": TEXT_A, "chunks": [[0, 19], [20, 45]]}]
    for k, (value, _) in enumerate(BAD_JSONL):
        rows.append({"id": f"bad{k}", "text": TEXT_A, "chunks": value})
    rows.append({"id": "no-key", "text": TEXT_A})
    rows.append({"id": "good-b", "text": TEXT_B, "chunks": list(TEXTS_B)})
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    docs, rejected = split(list(DocumentStore.from_path(path, chunks_column="chunks").iter_shard("docs")))
    assert {d: (doc.text, doc.chunks) for d, doc in docs.items()} == {
        "good-a": (TEXT_A, RANGES_A),
        "good-b": (TEXT_B, TEXTS_B),
    }
    expected = [(f"bad{k}", k + 2, why) for k, (_, why) in enumerate(BAD_JSONL)]
    expected.append(("no-key", len(BAD_JSONL) + 2, "is missing"))
    assert [(r.doc_id, r.where, r.reason) for r in rejected] == [
        (doc_id, f"{path}: row {row}", "bad_chunks") for doc_id, row, _ in expected
    ]
    for r, (doc_id, row, why) in zip(rejected, expected):
        assert r.detail.startswith(f"{path}: row {row}: 'chunks' of id {doc_id!r} ") and why in r.detail, r.detail


def test_jsonl_ranges_index_the_text_without_its_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "\ufeff" + TEXT_A, "c": [[0, 19]]}) + "\n", encoding="utf-8")
    (doc,) = DocumentStore.from_path(path, chunks_column="c").read_shard("bom")
    assert doc.text == TEXT_A and doc.text[0:19] == "Owls hunt at night."


def test_single_jsonl_read_by_shard_index_carries_the_chunks(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "text": TEXT_A, "shard": "s1", "chunks": [[0, 19], [20, 45]]},
        {"id": "b", "text": TEXT_B, "shard": "s2", "chunks": list(TEXTS_B)},
        {"id": "c", "text": TEXT_B, "shard": "s2", "chunks": []},
    ]
    store = DocumentStore.from_path(write_jsonl(tmp_path / "all.jsonl", rows), chunks_column="chunks")
    read = {shard: list(items) for shard, items in store.iter_shards(["s1", "s2"])}  # the indexed path
    assert [(d.doc_id, d.chunks) for d in read["s1"]] == [("a", RANGES_A)]
    docs, rejected = split(read["s2"])
    assert ({d: doc.chunks for d, doc in docs.items()}, [(r.doc_id, r.reason) for r in rejected]) == (
        {"b": TEXTS_B},
        [("c", "bad_chunks")],
    )
    # every reader of the store hashes alike: what a validation check re-reads equals what the run read
    assert store.fingerprints() == {s: fingerprint_of(items) for s, items in read.items()}
    docs, _ = store.read_shard_with_rejections("s1")
    assert [d.sha256 for d in docs] == [sha_with(TEXT_A, [[0, 19], [20, 45]])]


# ---------------------------------------------------------------------------------------- Parquet

PAIR_TYPES = {
    "list<list<int64>>": pa.list_(pa.list_(pa.int64())),
    "list<fixed_size_list<int32, 2>>": pa.list_(pa.list_(pa.int32(), 2)),
    "large_list<list<int16>>": pa.large_list(pa.list_(pa.int16())),
}


@pytest.mark.parametrize("name", PAIR_TYPES)
def test_parquet_pair_columns(tmp_path: Path, name: str) -> None:
    chunks = pa.array([[[0, 19], [20, 45]], None, [], [[0, 19]]], PAIR_TYPES[name])
    table = pa.table({"id": ["a", "null", "empty", "d"], "text": [TEXT_A] * 4, "spans": chunks})
    pq.write_table(table, tmp_path / "docs.parquet")
    store = DocumentStore.from_path(tmp_path / "docs.parquet", chunks_column="spans")
    docs, rejected = split(list(store.iter_shard("docs")))
    assert {d: doc.chunks for d, doc in docs.items()} == {"a": RANGES_A, "d": ((0, 19),)}
    assert [(r.doc_id, r.where.rsplit(": ", 1)[1], r.reason) for r in rejected] == [
        ("null", "row 2", "bad_chunks"),
        ("empty", "row 3", "bad_chunks"),
    ]
    assert "'spans' of id 'null' is null" in rejected[0].detail


def test_parquet_struct_and_string_columns_in_a_directory_store(tmp_path: Path) -> None:
    pair = pa.struct([("start", pa.int32()), ("end", pa.int64())])
    structs = pa.array(
        [
            [{"start": 0, "end": 19}, {"start": 20, "end": 45}],
            [{"start": 0, "end": None}],  # a pair without its end: rejected, its neighbours read
            [None],  # a null item
            [{"start": 20, "end": 45}],
        ],
        pa.list_(pair),
    )
    pq.write_table(
        pa.table({"id": ["a", "no-end", "null-item", "d"], "text": [TEXT_A] * 4, "chunks": structs}),
        (tmp_path / "s1.parquet"),
    )
    texts = pa.array([list(TEXTS_B), ["Green tea is steamed.", None], ["x"]], pa.list_(pa.string()))
    pq.write_table(
        pa.table({"id": ["b", "null-text", "x"], "text": [TEXT_B] * 3, "chunks": texts}), tmp_path / "s2.parquet"
    )
    store = DocumentStore.from_path(tmp_path, chunks_column="chunks")
    d1, r1 = split(list(store.iter_shard("s1")))
    assert {d: doc.chunks for d, doc in d1.items()} == {"a": RANGES_A, "d": ((20, 45),)}
    assert [(r.doc_id, r.reason) for r in r1] == [("no-end", "bad_chunks"), ("null-item", "bad_chunks")]
    assert "chunk 0 must be a [start, end] pair of integers, got [0, None]" in r1[0].detail
    assert "chunk 0 must be a [start, end] pair of integers, got None" in r1[1].detail
    d2, r2 = split(list(store.iter_shard("s2")))
    # "x" is a well-shaped chunk that does not occur in the text: fitting it is the strategy's rule
    assert {d: doc.chunks for d, doc in d2.items()} == {"b": TEXTS_B, "x": ("x",)}
    assert [(r.doc_id, r.reason) for r in r2] == [("null-text", "bad_chunks")]
    assert "chunk 1 is not a string (None), but chunk 0 is" in r2[0].detail


def test_parquet_column_of_the_wrong_type_rejects_each_row(tmp_path: Path) -> None:
    table = pa.table({"id": ["a", "b"], "text": [TEXT_A] * 2, "chunks": ["0-19", None]})
    pq.write_table(table, tmp_path / "docs.parquet")
    items = list(DocumentStore.from_path(tmp_path / "docs.parquet", chunks_column="chunks").iter_shard("docs"))
    assert [(i.doc_id, i.reason) for i in items] == [("a", "bad_chunks"), ("b", "bad_chunks")]  # type: ignore[union-attr]
    assert "must be a list of [start, end] pairs or of strings, got a string" in items[0].detail  # type: ignore[union-attr]


def test_a_parquet_file_without_the_column_is_read_like_one_without_text(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": ["a"], "text": [TEXT_A]}), tmp_path / "no_chunks.parquet")
    pq.write_table(pa.table({"id": ["a"], "chunks": [[[0, 19]]]}), tmp_path / "no_text.parquet")
    got = {}
    for stem in ("no_chunks", "no_text"):
        store = DocumentStore.from_path(tmp_path / f"{stem}.parquet", chunks_column="chunks")
        (row,) = store.iter_shard(stem)
        got[stem] = row
    assert [(r.doc_id, r.reason) for r in got.values()] == [("*", "unreadable_file")] * 2  # type: ignore[union-attr]
    assert "no_chunks.parquet: missing column(s) ['chunks']" in got["no_chunks"].detail  # type: ignore[union-attr]
    # the shard is still listed (listing reads only the shard column), as for a file without text
    assert DocumentStore.from_path(tmp_path / "no_chunks.parquet", chunks_column="chunks").shards() == ["no_chunks"]


def test_a_single_parquet_file_with_shards_carries_the_chunks(tmp_path: Path) -> None:
    table = pa.table(
        {
            "id": ["a", "b"],
            "text": [TEXT_A, TEXT_B],
            "shard": ["s1", "s2"],
            "chunks": pa.array([[[0, 19], [20, 45]], [[0, 21]]], pa.list_(pa.list_(pa.int64()))),
        }
    )
    pq.write_table(table, tmp_path / "all.parquet")
    store = DocumentStore.from_path(tmp_path / "all.parquet", chunks_column="chunks")
    assert store.shards() == ["s1", "s2"]
    assert [(d.doc_id, d.chunks) for d in store.read_shard("s2")] == [("b", ((0, 21),))]
    assert store.fingerprints()["s1"] == fingerprint_of(store.iter_shard("s1"))


# ---------------------------------------------------------------------------- upstream tables


def test_pandas_frame_with_pairs_and_texts() -> None:
    frame = pd.DataFrame(
        {
            "doc": ["a", "b", "null", "empty", "triple"],
            "body": [TEXT_A, TEXT_B, TEXT_A, TEXT_A, TEXT_A],
            "spans": [[(0, 19), (20, 45)], [(0, 21), (22, 44)], None, [], [(0, 1, 2)]],
        }
    )
    items = list(iter_table_documents(frame, "doc", "body", where="partition 'p'", chunks_column="spans"))
    docs, rejected = split(items)
    assert {d: doc.chunks for d, doc in docs.items()} == {"a": RANGES_A, "b": ((0, 21), (22, 44))}
    assert [(r.doc_id, r.where, r.reason) for r in rejected] == [
        ("null", "partition 'p': row 3", "bad_chunks"),
        ("empty", "partition 'p': row 4", "bad_chunks"),
        ("triple", "partition 'p': row 5", "bad_chunks"),
    ]
    assert "partition 'p': row 5: 'spans' of id 'triple' chunk 0 must be a [start, end] pair" in rejected[2].detail
    # pandas cannot make Arrow of a column mixing pairs and strings: the whole table is refused (a
    # ShardError, so the partition keeps its old rows), not read with some rows guessed
    mixed = pd.DataFrame({"id": ["a", "b"], "text": [TEXT_A] * 2, "chunks": [[(0, 19)], ["Owls"]]})
    with pytest.raises(NotATableError, match="cannot mix list and non-list"):
        list(iter_table_documents(mixed, chunks_column="chunks"))
    texts = pd.DataFrame({"id": ["b"], "text": [TEXT_B], "chunks": [list(TEXTS_B)]})
    (doc,) = iter_table_documents(texts, chunks_column="chunks")
    assert (doc.chunks, doc.sha256) == (TEXTS_B, sha_with(TEXT_B, list(TEXTS_B)))  # type: ignore[union-attr]


def test_an_arrow_table_without_the_column_fails_like_one_without_text() -> None:
    table = pa.table({"id": ["a"], "text": [TEXT_A]})
    with pytest.raises(MissingColumnError, match=r"missing column\(s\) \['chunks'\]"):
        list(iter_table_documents(table, chunks_column="chunks"))
    with pytest.raises(MissingColumnError, match=r"missing column\(s\) \['body'\]"):
        list(iter_table_documents(table, "id", "body"))
    (doc,) = iter_table_documents(table)  # without a chunks column nothing changes
    assert (doc.chunks, doc.sha256) == (None, sha(TEXT_A))  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------- settings


def test_a_chunks_column_the_store_cannot_have(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.txt").write_text(TEXT_A, encoding="utf-8")
    with pytest.raises(ValueError, match="has no columns"):
        DocumentStore.from_path(tmp_path / "tree", chunks_column="chunks")
    jsonl = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": TEXT_A}])
    for name in ("id", "text", "shard", ""):
        with pytest.raises(ValueError, match="chunks_column"):
            DocumentStore.from_path(jsonl, chunks_column=name)
    with pytest.raises(ValueError, match="chunks_column 'body'"):
        list(iter_table_documents(pa.table({"id": ["a"], "body": [TEXT_A]}), "id", "body", chunks_column="body"))
    assert "chunks_column='c'" in repr(DocumentStore.from_path(jsonl, chunks_column="c"))
