"""Incremental materialization: only new or changed documents (or a changed vector config) are encoded.

Real engine (the shipped model), real LanceDB in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.pipeline import config as pipeline_config
from latechunk_dagster.pipeline import materialize_partition, vector_config
from latechunk_dagster.sources.files import Document

TEXTS = {
    "a": "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day.",
    "b": "Owls hunt at night. Their feathers make their flight almost silent.",
    "c": "Green tea is steamed or pan-fired soon after picking to stop oxidation.",
    "d": "The lighthouse keeper logs the weather every four hours.",
}


def docs(texts: dict[str, str]) -> list[Document]:
    return [Document.from_text(k, v) for k, v in texts.items()]


@pytest.fixture
def tables(tmp_path: Path, chunker: LateChunker):
    db = sink.connect(str(tmp_path / "db"))
    return (
        sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim)),
        sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
    )


def run(chunker, tables, texts, run_id, strategy=None, **kw):
    return materialize_partition(
        chunker,
        docs(texts),
        "p",
        strategy or Sentences(max_tokens=128),
        chunk_table=tables[0],
        rejected_table=tables[1],
        run_id=run_id,
        **kw,
    )


def by_doc(table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in table.to_arrow().sort_by("chunk_index").to_pylist():
        out.setdefault(r["doc_id"], []).append(r)
    return out


def test_changed_removed_and_new_documents_each_end_right(chunker: LateChunker, tables) -> None:
    first = run(chunker, tables, TEXTS, "r1")
    assert (first.documents_reencoded, first.documents_new, first.documents_skipped) == (4, 4, 0)
    old = by_doc(tables[0])
    texts = dict(TEXTS)
    texts["b"] = "Owls hunt at dusk and at night."  # changed
    del texts["c"]  # removed
    texts["e"] = "Glaciers carve valleys over thousands of years."  # new
    second = run(chunker, tables, texts, "r2")
    assert (second.documents_skipped, second.documents_reencoded, second.documents_deleted) == (2, 2, 1)
    assert second.documents_new == 1
    expected_tokens = sum(len(chunker.tokenize(texts[k]).token_ids) for k in ("b", "e"))
    assert second.tokens_encoded == expected_tokens
    now = by_doc(tables[0])
    assert sorted(now) == ["a", "b", "d", "e"]
    for k in ("a", "d"):  # unchanged: not rewritten
        assert now[k] == old[k]
        assert {r["run_id"] for r in now[k]} == {"r1"}
    assert {r["run_id"] for r in now["b"] + now["e"]} == {"r2"}
    assert [r["text"] for r in now["b"]] == ["Owls hunt at dusk and at night."]
    assert second.partition_rows == tables[0].count_rows() == sum(len(v) for v in now.values())


def test_unchanged_partition_encodes_nothing_and_commits_nothing(chunker: LateChunker, tables) -> None:
    run(chunker, tables, TEXTS, "r1")
    version = tables[0].version
    again = run(chunker, tables, TEXTS, "r2")
    assert (again.tokens_encoded, again.batches, again.documents_skipped, again.write) == (0, 0, 4, None)
    assert tables[0].version == version
    assert {r["run_id"] for r in tables[0].to_arrow().to_pylist()} == {"r1"}


def test_force_reencodes_every_document(chunker: LateChunker, tables) -> None:
    run(chunker, tables, TEXTS, "r1")
    forced = run(chunker, tables, TEXTS, "r2", force=True)
    assert (forced.documents_reencoded, forced.documents_skipped) == (4, 0)
    assert {r["run_id"] for r in tables[0].to_arrow().to_pylist()} == {"r2"}


def test_new_strategy_parameters_reencode_every_document(chunker: LateChunker, tables) -> None:
    run(chunker, tables, TEXTS, "r1")
    changed = run(chunker, tables, TEXTS, "r2", strategy=Sentences(max_tokens=16))
    assert (changed.documents_reencoded, changed.documents_skipped) == (4, 0)
    rows = tables[0].to_arrow().to_pylist()
    assert {r["run_id"] for r in rows} == {"r2"}
    assert {r["strategy"] for r in rows} == {
        "sentences(language='en', max_tokens=16, min_tokens=8, segmenter='sentencex')"
    }
    assert max(r["chunk_index"] for r in rows) >= 1  # the new spans, old chunk_ids beyond them gone
    assert len({r["chunk_id"] for r in rows}) == len(rows)


def test_new_chunking_version_reencodes_every_document(
    chunker: LateChunker, tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(chunker, tables, TEXTS, "r1")
    before = vector_config(chunker.settings, Sentences(max_tokens=128))
    monkeypatch.setattr(pipeline_config, "CHUNKING_VERSION", pipeline_config.CHUNKING_VERSION + 1)
    assert vector_config(chunker.settings, Sentences(max_tokens=128)) != before
    bumped = run(chunker, tables, TEXTS, "r2")
    assert (bumped.documents_reencoded, bumped.documents_skipped) == (4, 0)


def test_rejected_document_is_retried_and_a_now_rejected_one_loses_its_rows(chunker: LateChunker, tables) -> None:
    texts = dict(TEXTS, e="   ")
    first = run(chunker, tables, texts, "r1")
    assert first.rejected_reasons == {"empty_text": 1}
    texts["e"] = "Now it has text."  # fixed: encoded this time
    texts["a"] = " \n "  # broken: its old rows must go, its rejection recorded
    second = run(chunker, tables, texts, "r2")
    assert second.rejected_reasons == {"empty_text": 1}
    ids = set(tables[0].to_arrow().column("doc_id").to_pylist())
    assert ids == {"b", "c", "d", "e"}
    [rej] = tables[1].to_arrow().to_pylist()
    assert (rej["doc_id"], rej["reason"], rej["run_id"]) == ("a", "empty_text", "r2")


def test_table_written_before_vector_config_is_migrated_and_reencoded(chunker: LateChunker, tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path / "old"))
    schema = sink.chunk_schema(chunker.embedding_dim)
    old_schema = pa.schema(list(schema)[: schema.get_field_index("vector_config")])  # written before the column
    db.create_table(sink.CHUNK_TABLE, schema=old_schema)
    table = sink.open_or_create(db, sink.CHUNK_TABLE, schema)
    assert table.schema.field("vector_config").nullable
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    report = run(chunker, (table, rejected), TEXTS, "r1")
    assert report.documents_reencoded == 4
