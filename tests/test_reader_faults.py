"""Reader faults that escaped the one-bad-row and one-bad-shard rules (issue 27, items 5, 6 and 8).

* a JSONL line that Python's ``json`` cannot parse (nested 100,000 levels deep: ``RecursionError``;
  an integer of 5,000 digits: ``ValueError``) is one ``invalid_json`` row naming file and row;
* a Parquet file (or an upstream table) that names a column twice (``id, text, text``, what a join
  without suffixes writes) is ``unreadable_file`` for its shard, naming the column;
* UTF-16 / UTF-32 text (a byte order mark, or a NUL after every character: valid UTF-8 byte for
  byte) is refused, naming the encoding: text files, JSONL files, JSONL / Parquet text values,
  query files.

Through the public surfaces (``DocumentStore``, a real Dagster materialization with the real
engine and LanceDB, the store sensor evaluated by Dagster). Expected values come from the inputs:
which rows are good and what their text is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latechunk_dagster import LateChunker
from latechunk_dagster.core.encoding import foreign_encoding
from latechunk_dagster.evaluation.queries import QueryFileError, read_queries
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.sensors import read_cursor, sync_partitions
from latechunk_dagster.pipeline.partition import SHARD_ERRORS
from latechunk_dagster.sources.documents import Document, NotATableError, RejectedRow, RepeatedColumnError
from latechunk_dagster.sources.files import DocumentStore
from latechunk_dagster.sources.frames import iter_table_documents
from tests.conftest import SHARED_ENGINE
from tests.test_hostile_inputs import dagster_instance, rows_of
from tests.test_pipeline import TABLE, make_defs, run_partitions

DEEP = "[" * 100_000 + "]" * 100_000
#: one more digit than Python's default int limit (4300) would do; the issue's number
BIG = "9" * 5_000

GOOD = {
    "g1": "Acme Corp. builds centrifugal pumps in Rotterdam.",
    "g2": "Barn owls hunt at night and fly almost silently.",
    "g3": "Green tea leaves are steamed before they are rolled.",
}
UTF16_TEXT = "Sencha is a Japanese green tea; the leaves are steamed."


def line(doc_id: str, text: str, **extra: Any) -> str:
    return json.dumps({"id": doc_id, "text": text, **extra}) + "\n"


def mixed_jsonl() -> str:
    """g1, a line nested 100,000 levels deep (row 2), g2, a 5,000-digit integer (row 4), g3."""
    return (
        line("g1", GOOD["g1"])
        + '{"id": "deep", "text": "t", "x": '
        + DEEP
        + "}\n"
        + line("g2", GOOD["g2"])
        + '{"id": "big", "text": "t", "n": '
        + BIG
        + "}\n"
        + line("g3", GOOD["g3"])
    )


def items(store: DocumentStore, shard: str) -> tuple[dict[str, str], list[RejectedRow]]:
    docs: dict[str, str] = {}
    rejected: list[RejectedRow] = []
    for item in store.iter_shard(shard):
        if isinstance(item, Document):
            docs[item.doc_id] = item.text
        else:
            rejected.append(item)
    return docs, rejected


# -- the helper: what it names, from Python's own codecs ------------------------------------------


@pytest.mark.parametrize(
    ("codec", "name", "evidence"),
    [
        ("utf-16", "UTF-16LE", "byte order mark FF FE"),  # Python writes the machine's order with a BOM
        ("utf-16-le", "UTF-16LE", "no byte order mark; NUL bytes after most characters"),
        ("utf-16-be", "UTF-16BE", "no byte order mark; NUL bytes before most characters"),
        ("utf-32", "UTF-32LE", "byte order mark FF FE 00 00"),
        ("utf-32-be", "UTF-32BE", "no byte order mark; NUL bytes before most characters"),
    ],
)
def test_foreign_encoding_names_utf16_and_utf32(codec: str, name: str, evidence: str) -> None:
    data = "Grüße aus Köln: tea, pumps and owls.".encode(codec)
    found = foreign_encoding(data)
    assert found is not None and (found.name, found.evidence) == (name, evidence)
    # the text a UTF-8 reader makes of the same bytes is named the same way
    assert foreign_encoding(data.decode("utf-8", "surrogateescape")) == found


@pytest.mark.parametrize(
    "text", ["Grüße aus Köln", "\ufeffa UTF-8 BOM", "one NUL\x00 in a text", "ab\x00cd", "abc\x00", "日本語", ""]
)
def test_foreign_encoding_leaves_utf8_alone(text: str) -> None:
    assert foreign_encoding(text.encode("utf-8")) is None
    assert foreign_encoding(text) is None


#: CJK text (Chinese, Japanese, Korean; the last with ASCII words and digits between): in UTF-16 without a
#: byte order mark it has no NUL pattern; read as UTF-8 it held bytes that are not UTF-8, and the
#: rejection guessed a Latin-1 file (issue 39 E11).
CJK = {
    "zh": "北京是中华人民共和国的首都，也是全国的政治、文化中心。长城位于北京北部。",
    "ja": "東京は日本の首都です。人口は約千四百万人で、世界で最も大きな都市の一つです。",
    "ko": "서울은 대한민국의 수도이며 가장 큰 도시입니다. 한강이 도시를 가로질러 흐릅니다.",
    "mixed": "Python 3.12 的新功能：更好的错误信息，以及 f-string 的改进。版本发布于 2023 年 10 月。",
}


@pytest.mark.parametrize("lang", sorted(CJK))
@pytest.mark.parametrize(("codec", "name"), [("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE")])
def test_foreign_encoding_names_utf16_cjk_without_a_byte_order_mark(lang: str, codec: str, name: str) -> None:
    data = CJK[lang].encode(codec)
    found = foreign_encoding(data)
    assert found is not None and found.name == name and found.evidence.startswith("no byte order mark; as UTF-16")
    assert foreign_encoding(data.decode("utf-8", "surrogateescape")) == found  # the text a UTF-8 reader makes


@pytest.mark.parametrize("lang", sorted(CJK))
@pytest.mark.parametrize("codec", ["utf-8", "gb18030", "shift_jis", "euc-kr", "big5"])
def test_cjk_in_utf8_and_legacy_encodings_is_not_taken_for_utf16(lang: str, codec: str) -> None:
    try:
        data = CJK[lang].encode(codec)
    except UnicodeEncodeError:  # a legacy encoding without this script's characters
        pytest.skip(f"{codec} cannot encode {lang}")
    assert foreign_encoding(data) is None


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        ("Le café au lait est une boisson française, très appréciée au petit-déjeuner.", "latin-1"),
        ("Η Αθήνα είναι η πρωτεύουσα της Ελλάδας και η μεγαλύτερη πόλη της χώρας.", "iso-8859-7"),
        ("ASCII text with a stray NUL\x00 between its words, like many others.", "ascii"),
    ],
)
def test_single_byte_text_is_not_taken_for_utf16_cjk(text: str, codec: str) -> None:
    """Pairs of ASCII letters read as UTF-16 are CJK code points ("ab" is U+6261): the rule must not
    take Latin-1, Greek or ASCII text for UTF-16 CJK."""
    assert foreign_encoding(text.encode(codec)) is None


# -- 5. JSON that Python's parser cannot read --------------------------------------------------------


def test_jsonl_lines_python_cannot_parse_are_one_rejection_each(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.jsonl").write_text(mixed_jsonl())
    (root / "b.jsonl").write_text(line("b1", GOOD["g1"]))
    store = DocumentStore.from_path(root)
    assert store.shards() == ["a", "b"]
    docs, rejected = items(store, "a")
    assert docs == GOOD
    assert [(r.doc_id, r.reason) for r in rejected] == [("row 2", "invalid_json"), ("row 4", "invalid_json")]
    file = str(root / "a.jsonl")
    assert [r.where for r in rejected] == [f"{file}: row 2", f"{file}: row 4"]
    assert "nested too deeply" in rejected[0].detail
    assert "5000 digits" in rejected[1].detail
    assert set(store.fingerprints()) == {"a", "b"}


def test_a_single_jsonl_file_with_a_deep_line_still_lists_and_reads_its_shards(tmp_path: Path) -> None:
    """The line's ``shard`` cannot be read: it belongs to the file stem's shard, like any invalid JSON."""
    path = tmp_path / "docs.jsonl"
    path.write_text(
        line("x1", GOOD["g1"], shard="x")
        + '{"id": "d", "shard": "x", "v": '
        + DEEP
        + "}\n"
        + line("z1", GOOD["g3"], shard="z")
    )
    store = DocumentStore.from_path(path)
    assert store.shards() == ["docs", "x", "z"]
    assert set(store.fingerprints()) == {"docs", "x", "z"}
    assert items(store, "x") == ({"x1": GOOD["g1"]}, [])
    [(docs, [bad])] = [items(store, "docs")]
    assert docs == {} and (bad.reason, bad.where) == ("invalid_json", f"{path}: row 2")
    # the one-pass reader of a run over several partitions indexes the file the same way
    read = {shard: [getattr(i, "doc_id", None) for i in it] for shard, it in store.iter_shards(["docs", "x", "z"])}
    assert read == {"docs": ["row 2"], "x": ["x1"], "z": ["z1"]}


def test_query_file_lines_python_cannot_parse_name_the_line(tmp_path: Path) -> None:
    good = json.dumps({"query": "who builds pumps?", "doc_id": "g1"})
    for bad, why in (
        ('{"query": "q", "doc_id": ' + DEEP + "}", "nested too deeply"),
        ('{"query": "q", "doc_id": ' + BIG + "}", "5000 digits"),
    ):
        path = tmp_path / "queries.jsonl"
        path.write_text(good + "\n" + bad + "\n")
        with pytest.raises(QueryFileError, match=rf"queries.jsonl: line 2: JSON that cannot be read: .*{why}"):
            read_queries(path)


# -- 6. a column named twice ---------------------------------------------------------------------------


def joined_table() -> pa.Table:
    """What a join without suffixes writes: ``id, text, text``."""
    return pa.Table.from_arrays(
        [pa.array(["j1", "j2"]), pa.array(["left text", "left two"]), pa.array(["right text", "right two"])],
        names=["id", "text", "text"],
    )


def parquet_store(root: Path) -> Path:
    """a_joined.parquet (``id, text, text``), b_ok.parquet (g1, g2), c_meta.parquet (g3 and an unread column twice)."""
    root.mkdir()
    pq.write_table(joined_table(), root / "a_joined.parquet")
    pq.write_table(pa.table({"id": ["g1", "g2"], "text": [GOOD["g1"], GOOD["g2"]]}), root / "b_ok.parquet")
    meta = pa.Table.from_arrays(
        [pa.array(["g3"]), pa.array([GOOD["g3"]]), pa.array([1]), pa.array([2])], names=["id", "text", "m", "m"]
    )
    pq.write_table(meta, root / "c_meta.parquet")
    return root


def test_parquet_file_with_a_repeated_column_is_unreadable_and_named(tmp_path: Path) -> None:
    store = DocumentStore.from_path(parquet_store(tmp_path / "store"))
    assert store.shards() == ["a_joined", "b_ok", "c_meta"]
    docs, [bad] = items(store, "a_joined")
    assert docs == {} and (bad.doc_id, bad.reason) == ("*", "unreadable_file")
    assert bad.where == str(tmp_path / "store" / "a_joined.parquet")
    assert "column(s) ['text'] named more than once" in bad.detail and "['id', 'text', 'text']" in bad.detail
    assert items(store, "b_ok") == ({"g1": GOOD["g1"], "g2": GOOD["g2"]}, [])
    assert items(store, "c_meta") == ({"g3": GOOD["g3"]}, [])  # a column no one reads may repeat
    assert set(store.fingerprints()) == {"a_joined", "b_ok", "c_meta"}


def test_single_parquet_file_with_its_shard_column_twice_is_unreadable(tmp_path: Path) -> None:
    table = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array([GOOD["g1"]]), pa.array(["x"]), pa.array(["y"])],
        names=["id", "text", "shard", "shard"],
    )
    pq.write_table(table, tmp_path / "docs.parquet")
    store = DocumentStore.from_path(tmp_path / "docs.parquet")
    [(docs, [bad])] = [items(store, "docs")]
    assert docs == {} and bad.reason == "unreadable_file" and "['shard'] named more than once" in bad.detail


def test_upstream_table_with_a_repeated_column_is_a_shard_error_naming_it() -> None:
    with pytest.raises(RepeatedColumnError, match=r"partition 'p': column\(s\) \['text'\] named more than once") as exc:
        list(iter_table_documents(joined_table(), where="partition 'p'"))
    assert isinstance(exc.value, SHARD_ERRORS)  # the orchestrators keep the shard's rows and record why


def test_pandas_frame_with_a_repeated_column_is_not_a_table_error() -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame([["j1", "left", "right"]], columns=["id", "text", "text"])
    with pytest.raises(NotATableError, match="Duplicate column names") as exc:
        list(iter_table_documents(frame))
    assert isinstance(exc.value, SHARD_ERRORS)


# -- 8. UTF-16 / UTF-32 where UTF-8 is expected ------------------------------------------------------------


def test_text_files_in_utf16_or_utf32_are_rejected_naming_the_encoding(tmp_path: Path) -> None:
    shard = tmp_path / "tree" / "s"
    shard.mkdir(parents=True)
    (shard / "good.txt").write_text(GOOD["g1"], encoding="utf-8")
    (shard / "bom.txt").write_text(GOOD["g1"], encoding="utf-8-sig")  # a UTF-8 BOM is fine
    expected = {
        "le.txt": ("utf-16-le", "UTF-16LE (no byte order mark; NUL bytes after most characters)"),
        "be.txt": ("utf-16-be", "UTF-16BE (no byte order mark; NUL bytes before most characters)"),
        "notepad.txt": ("utf-16", "UTF-16LE (byte order mark FF FE)"),
        "wide.txt": ("utf-32", "UTF-32LE (byte order mark FF FE 00 00)"),
    }
    for name, (codec, _) in expected.items():
        (shard / name).write_bytes(UTF16_TEXT.encode(codec))
    docs, rejected = items(DocumentStore.from_path(tmp_path / "tree"), "s")
    assert docs == {"s/good.txt": GOOD["g1"], "s/bom.txt": GOOD["g1"]}
    got = {r.doc_id: r for r in rejected}
    assert set(got) == {f"s/{name}" for name in expected}
    for name, (_, named) in expected.items():
        bad = got[f"s/{name}"]
        assert bad.reason == "bad_encoding" and bad.where == str(shard / name)
        assert f"the file is {named}, not UTF-8" in bad.detail and "Latin-1" not in bad.detail


def test_jsonl_file_in_utf16_is_unreadable_and_named(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "wide.jsonl").write_bytes((line("w1", GOOD["g1"]) + line("w2", GOOD["g2"])).encode("utf-16-le"))
    (root / "ok.jsonl").write_text(line("g3", GOOD["g3"]))
    store = DocumentStore.from_path(root)
    docs, [bad] = items(store, "wide")
    assert docs == {} and (bad.doc_id, bad.reason) == ("*", "unreadable_file")
    assert "UTF-16LE (no byte order mark; NUL bytes after most characters), not UTF-8" in bad.detail
    assert items(store, "ok") == ({"g3": GOOD["g3"]}, [])


def test_single_jsonl_file_in_utf16_is_one_unreadable_row(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes((line("a", GOOD["g1"], shard="x") + line("b", GOOD["g2"], shard="y")).encode("utf-16"))
    store = DocumentStore.from_path(path)
    [bad] = list(store.iter_shard("docs"))
    assert (
        isinstance(bad, RejectedRow)
        and bad.reason == "unreadable_file"
        and "UTF-16LE (byte order mark FF FE)" in bad.detail
    )
    [(shard, rows)] = list(store.iter_shards(["docs"]))
    assert [r.detail for r in rows] == [bad.detail]


def test_text_values_in_utf16_are_rejected_alone(tmp_path: Path) -> None:
    """JSONL ``"\\u0000"`` escapes, Parquet values of raw UTF-16 bytes (with or without a BOM: Arrow
    does not validate UTF-8 everywhere) and upstream tables: the value is refused, its row named."""
    as_utf8 = UTF16_TEXT.encode("utf-16-le").decode("utf-8")  # what a writer that did not decode it stores
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "v.jsonl").write_text(line("g1", GOOD["g1"]) + line("u", as_utf8))
    docs, [bad] = items(DocumentStore.from_path(tmp_path / "j"), "v")
    assert docs == {"g1": GOOD["g1"]}
    assert (bad.doc_id, bad.reason, bad.where) == ("u", "bad_encoding", f"{tmp_path / 'j' / 'v.jsonl'}: row 2")
    assert "'text' of id 'u': it is UTF-16LE (no byte order mark" in bad.detail

    texts = pa.array([GOOD["g1"].encode(), UTF16_TEXT.encode("utf-16-le"), UTF16_TEXT.encode("utf-16")], pa.binary())
    table = pa.table({"id": ["g1", "le", "bom"], "text": texts.view(pa.string())})
    pq.write_table(table, tmp_path / "p.parquet")
    docs, rejected = items(DocumentStore.from_path(tmp_path / "p.parquet"), "p")
    assert docs == {"g1": GOOD["g1"]}
    assert [(r.doc_id, r.reason, r.where.rsplit(": ", 1)[1]) for r in rejected] == [
        ("le", "bad_encoding", "row 2"),
        ("bom", "bad_encoding", "row 3"),
    ]
    assert "UTF-16LE (byte order mark FF FE)" in rejected[1].detail

    upstream = [(i.doc_id, getattr(i, "reason", None)) for i in iter_table_documents(table)]
    assert upstream == [("g1", None), ("le", "bad_encoding"), ("bom", "bad_encoding")]


def test_query_file_in_utf16_is_refused_naming_the_encoding(tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    for codec, named in (("utf-16", "UTF-16LE (byte order mark FF FE)"), ("utf-16-le", "UTF-16LE (no byte order mark")):
        path.write_bytes((json.dumps({"query": "who builds pumps?", "doc_id": "g1"}) + "\n").encode(codec))
        with pytest.raises(QueryFileError) as exc:
            read_queries(path)
        assert str(exc.value).startswith(f"{path}: the file is {named}")


def test_the_engine_names_utf16_text_instead_of_guessing_latin1(chunker: LateChunker) -> None:
    """What reaches the engine without a store reader: UTF-16 with a BOM read as UTF-8 (bytes that
    are not UTF-8: it was called Latin-1) and without one (valid UTF-8 with NULs: it was chunked)."""
    from latechunk_dagster.core.chunking import FixedTokens
    from latechunk_dagster.core.errors import InvalidUnicodeError
    from latechunk_dagster.sources.text_files import decode

    texts = [
        GOOD["g1"],
        decode(UTF16_TEXT.encode("utf-16")),
        UTF16_TEXT.encode("utf-16-le").decode("utf-8"),
        decode("Café au lait".encode("latin-1")),
    ]
    results = chunker.chunk(texts, FixedTokens(8), doc_ids=["good", "bom", "nul", "latin1"], errors="return")
    assert [type(r).__name__ for r in results] == [
        "ChunkedDocument",
        "InvalidUnicodeError",
        "InvalidUnicodeError",
        "InvalidUnicodeError",
    ]
    assert all(isinstance(r, InvalidUnicodeError) for r in results[1:])
    assert "not UTF-8: it is UTF-16LE (byte order mark FF FE) text" in results[1].detail
    assert "not UTF-8: it is UTF-16LE (no byte order mark; NUL bytes after most characters)" in results[2].detail
    assert all("Latin-1" not in r.detail for r in results[1:3])
    assert "not valid UTF-8: byte 0xe9 at character 3 (a file in Latin-1" in results[3].detail


#: Numbers Python's ``json`` reads as infinity or NaN, silently (issue 39 E10): rows 2-5 of :func:`number_jsonl`.
NON_FINITE = ["1e999", "-1e999", "NaN", "Infinity"]


def number_jsonl() -> str:
    """d1 (row 1, with a finite float), then one row per :data:`NON_FINITE` number, then d2 (row 6)."""
    rows = [line("d1", GOOD["g1"], score=2.5e-3)]
    rows += [f'{{"id": "n{i}", "text": "t", "score": {number}}}\n' for i, number in enumerate(NON_FINITE)]
    return "".join([*rows, line("d2", GOOD["g2"])])


def test_jsonl_numbers_beyond_a_float_are_invalid_json_naming_the_row(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "d.jsonl").write_text(number_jsonl())
    docs, rejected = items(DocumentStore.from_path(root), "d")
    assert docs == {"d1": GOOD["g1"], "d2": GOOD["g2"]}
    assert [(r.doc_id, r.reason, r.where) for r in rejected] == [
        (f"row {n}", "invalid_json", f"{root / 'd.jsonl'}: row {n}") for n in (2, 3, 4, 5)
    ]
    assert "the number 1e999 is beyond a 64-bit float's range (it would read as inf)" in rejected[0].detail
    assert "the number -1e999 is beyond a 64-bit float's range (it would read as -inf)" in rejected[1].detail
    assert "NaN is not a JSON number" in rejected[2].detail and "Infinity is not a JSON number" in rejected[3].detail
    queries = tmp_path / "q.jsonl"  # the query file reader: the same rule, naming the line
    queries.write_text('{"query": "pumps", "doc_id": "a", "weight": 1e999}\n')
    with pytest.raises(QueryFileError, match=r"q.jsonl: line 1: JSON that cannot be read: the number 1e999"):
        read_queries(queries)


# -- a real materialization and the store sensor ------------------------------------------------------------


def chunk_texts(db: Path, partition: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows_of(db, "chunks"):
        if row["partition"] == partition:
            out.setdefault(row["doc_id"], []).append(row)
    return out


def assert_stored_whole(rows: dict[str, list[dict[str, Any]]], texts: dict[str, str]) -> None:
    """Each document's chunks are slices of its own text and cover every visible character."""
    assert set(rows) == set(texts)
    for doc_id, parts in rows.items():
        text = texts[doc_id]
        assert all(r["text"] == text[r["char_start"] : r["char_end"]] for r in parts)
        covered = {i for r in parts for i in range(r["char_start"], r["char_end"])}
        assert covered >= {i for i, ch in enumerate(text) if not ch.isspace()}


def test_materialization_writes_good_rows_and_names_each_bad_row_and_file(tmp_path: Path, chunker: LateChunker) -> None:
    """a: three good rows and two JSON lines Python cannot parse; b: a good shard; c: UTF-16 JSONL.
    One run over a..c: a's good rows and b are written, a's bad lines are one rejection each, and c
    (a file that cannot be read) keeps its partition with one row saying why."""
    SHARED_ENGINE["chunker"] = chunker
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.jsonl").write_text(mixed_jsonl())
    (root / "b.jsonl").write_text(line("b1", GOOD["g2"]))
    (root / "c.jsonl").write_bytes(line("c1", GOOD["g3"]).encode("utf-16-le"))
    (root / "d.jsonl").write_text(number_jsonl())  # numbers Python reads as infinity or NaN: rows 2-5
    db = tmp_path / "lancedb"
    with dagster_instance(tmp_path / "home") as instance:
        added, _ = sync_partitions(instance, DocumentStore.from_path(root), TABLE.partitions_def)
        assert added == ["a", "b", "c", "d"]
        run_partitions(make_defs(root, db), instance, "a", "d")
    assert_stored_whole(chunk_texts(db, "a"), GOOD)
    assert_stored_whole(chunk_texts(db, "b"), {"b1": GOOD["g2"]})
    assert chunk_texts(db, "c") == {}
    assert_stored_whole(chunk_texts(db, "d"), {"d1": GOOD["g1"], "d2": GOOD["g2"]})
    rejected = sorted(rows_of(db, "rejected_documents"), key=lambda r: (r["partition"], r["doc_id"]))
    assert [(r["partition"], r["doc_id"], r["reason"]) for r in rejected] == [
        ("a", "row 2", "invalid_json"),
        ("a", "row 4", "invalid_json"),
        ("c", "*", "systemic_failure"),
        *[("d", f"row {n}", "invalid_json") for n in (2, 3, 4, 5)],
    ]
    assert f"{root / 'a.jsonl'}: row 2: JSON that cannot be read: nested too deeply" in rejected[0]["detail"]
    assert f"{root / 'a.jsonl'}: row 4: JSON that cannot be read" in rejected[1]["detail"]
    assert "unreadable_file" in rejected[2]["detail"] and "UTF-16LE" in rejected[2]["detail"]
    assert rejected[3]["detail"].startswith(f"{root / 'd.jsonl'}: row 2: JSON that cannot be read: the number 1e999")


def test_materialization_of_a_parquet_store_with_a_joined_file(tmp_path: Path, chunker: LateChunker) -> None:
    """The shard after the file with ``id, text, text`` is written; that file's shard names the column."""
    SHARED_ENGINE["chunker"] = chunker
    root, db = parquet_store(tmp_path / "store"), tmp_path / "lancedb"
    with dagster_instance(tmp_path / "home") as instance:
        sync_partitions(instance, DocumentStore.from_path(root), TABLE.partitions_def)
        run_partitions(make_defs(root, db), instance, "a_joined", "c_meta")
    assert_stored_whole(chunk_texts(db, "b_ok"), {"g1": GOOD["g1"], "g2": GOOD["g2"]})
    assert_stored_whole(chunk_texts(db, "c_meta"), {"g3": GOOD["g3"]})
    assert chunk_texts(db, "a_joined") == {}
    [rej] = rows_of(db, "rejected_documents")
    assert (rej["partition"], rej["doc_id"], rej["reason"]) == ("a_joined", "*", "systemic_failure")
    assert "unreadable_file" in rej["detail"] and "column(s) ['text'] named more than once" in rej["detail"]


def test_materialization_of_a_text_tree_with_a_utf16_file(tmp_path: Path, chunker: LateChunker) -> None:
    """Before: stored with a NUL between every character, every check passing."""
    SHARED_ENGINE["chunker"] = chunker
    root, db = tmp_path / "tree", tmp_path / "lancedb"
    (root / "s").mkdir(parents=True)
    (root / "s" / "good.txt").write_text(GOOD["g1"])
    (root / "s" / "wide.txt").write_bytes(UTF16_TEXT.encode("utf-16-le"))
    (root / "s" / "zh.txt").write_bytes(CJK["zh"].encode("utf-16-le"))  # issue 39 E11: it got the Latin-1 hint
    with dagster_instance(tmp_path / "home") as instance:
        sync_partitions(instance, DocumentStore.from_path(root), TABLE.partitions_def)
        result = run_partitions(make_defs(root, db), instance, "s", "s")
    assert result.success
    assert_stored_whole(chunk_texts(db, "s"), {"s/good.txt": GOOD["g1"]})
    rej, cjk = sorted(rows_of(db, "rejected_documents"), key=lambda r: r["doc_id"])
    assert (rej["doc_id"], rej["reason"]) == ("s/wide.txt", "bad_encoding")
    assert f"{root / 's' / 'wide.txt'}: the file is UTF-16LE" in rej["detail"]
    assert (cjk["doc_id"], cjk["reason"]) == ("s/zh.txt", "bad_encoding")
    assert f"{root / 's' / 'zh.txt'}: the file is UTF-16LE (no byte order mark; as UTF-16 100% CJK" in cjk["detail"]
    assert "Latin-1" not in cjk["detail"] and "iconv -f UTF-16LE -t UTF-8" in cjk["detail"]
    assert all(c.passed for c in result.get_asset_check_evaluations())


def sensor_tick(store: Path, tmp_path: Path) -> dg.SensorResult:
    [sensor] = [s for s in TABLE.sensors if s.name == "chunk_vectors_store_sensor"]
    resources = {"store": DocumentStoreResource(path=str(store)), "lancedb": LanceDBResource(uri=str(tmp_path / "db"))}
    with dagster_instance(tmp_path / "home") as instance:
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            return sensor(ctx)


def test_sensor_survives_a_deep_jsonl_line_in_a_single_file_store(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text(
        line("x1", GOOD["g1"], shard="x") + '{"id": "d", "v": ' + DEEP + "}\n" + line("z1", GOOD["g3"], shard="z")
    )
    tick = sensor_tick(path, tmp_path)
    [add] = tick.dynamic_partitions_requests
    assert list(add.partition_keys) == ["docs", "x", "z"]
    cursor = read_cursor(tick.cursor)[1]
    assert cursor.keys() == {"docs", "x", "z"} and not any(v.startswith("unreadable:") for v in cursor.values())


def test_sensor_survives_a_parquet_file_with_a_repeated_column(tmp_path: Path) -> None:
    tick = sensor_tick(parquet_store(tmp_path / "store"), tmp_path)
    [add] = tick.dynamic_partitions_requests
    assert list(add.partition_keys) == ["a_joined", "b_ok", "c_meta"]
    assert read_cursor(tick.cursor)[1].keys() == {"a_joined", "b_ok", "c_meta"}
