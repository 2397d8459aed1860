"""Several granularities and each document's own chunks in the partition pipeline (issue 29).

Real engine (the shipped model), real LanceDB in temp dirs. The right answers come from outside the
pipeline: a given-chunks store's vectors from per-document ``CharSpans`` calls, each granularity
table from a single-strategy run of its strategy, parents from the stored token ranges.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import CharSpans, FixedTokens, GivenChunks, LateChunker, MarkdownSections, Paragraphs, sink
from latechunk_dagster.core.chunking import ChunkingStrategy, Sentences
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.pipeline.shard import (
    GRANULARITY_KEYS,
    SUMMARY_KEYS,
    ShardSettings,
    run_shard,
    shard_summary,
    strategy_from_run_config,
)
from latechunk_dagster.sink import validation
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.parents import parents_exist
from latechunk_dagster.sink.schema import chunk_id, granularity_table
from latechunk_dagster.sources.files import Document, DocumentStore

P = "p"
GRANULARITIES: dict[str, ChunkingStrategy] = {
    "small": FixedTokens(chunk_size=8),
    "medium": Paragraphs(max_tokens=16),
    "large": MarkdownSections(96),
}
MARKDOWN = (
    "# Berlin\n\nBerlin is the capital of Germany. It has 3.8 million people.\n\n"
    "## Transport\n\nIts trams are yellow. The U-Bahn has ten lines.\n"
)
LONG = "The pump failed twice. Its maintenance team replaced the seal. " * 30  # windowed at window_length 64
TEXTS = {
    "md": MARKDOWN,
    "long": LONG,
    "short": "Short one.",
    "owls": "Owls hunt at night. They fly almost silently.\n\nTheir ears sit at different heights.",
    "tea": "Green tea is steamed. Black tea is oxidised.\n\nBoth come from one plant.",
}


def documents(texts: dict[str, str] = TEXTS) -> list[Document]:
    return [Document.from_text(d, t) for d, t in texts.items()]


def rows_of(table: Any, partition: str = P) -> list[dict]:
    got = table.search().where(f"partition = '{partition}'").limit(None).to_arrow().to_pylist()
    return sorted(got, key=lambda r: (r["doc_id"], r["chunk_index"]))


def open_tables(root: Path, chunker: LateChunker, names: list[str], table: str = "chunks") -> tuple[dict, Any]:
    db = sink.connect(str(root))
    schema = sink.chunk_schema(chunker.embedding_dim)
    tables = {g: sink.open_or_create(db, granularity_table(table, g), schema) for g in names}
    return tables, sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)


def single_run(chunker: LateChunker, docs: list[Document], strategy: ChunkingStrategy, root: Path) -> tuple:
    tables, rejected = open_tables(root, chunker, [""])
    report = materialize_partition(
        chunker, docs, P, strategy, chunk_table=tables[""], rejected_table=rejected, run_id="one", batch_tokens=256
    )
    return report, rows_of(tables[""])


def same_rows(got: list[dict], want: list[dict]) -> None:
    """Identical ranges and texts, vectors within 1e-6 (the granularity's own run is the truth)."""
    keys = ("doc_id", "chunk_index", "token_start", "token_end", "char_start", "char_end", "text", "doc_sha256")
    assert [tuple(r[k] for k in keys) for r in got] == [tuple(r[k] for k in keys) for r in want]
    np.testing.assert_allclose(
        np.array([r["vector"] for r in got]), np.array([r["vector"] for r in want]), atol=1e-6, rtol=0
    )


# -- (a) a store whose documents carry their own chunks ------------------------------------------------

GIVEN = {  # doc_id -> (text, its chunks as char ranges, checked by hand below)
    "a": ("Owls hunt at night. They fly almost silently.", [(0, 19), (20, 45)]),
    "b": ("Green tea is steamed. Black tea is oxidised. Both come from one plant.", [(0, 21), (22, 44), (45, 70)]),
    "c": ("Berlin is big. It has trams. The trams are yellow.", [(0, 14), (15, 50)]),
    "d": ("One. Two. Three. Four.", [(0, 4), (5, 9), (10, 22)]),
}


def test_a_store_of_given_chunks_equals_per_document_char_spans(chunker: LateChunker, tmp_path: Path) -> None:
    for text, ranges in GIVEN.values():  # the hand-written ranges cut the texts where meant
        assert all(text[a:b].strip() == text[a:b] and text[a:b] for a, b in ranges)
    rows = []
    for k, (doc_id, (text, ranges)) in enumerate(GIVEN.items()):
        chunks: list = [list(r) for r in ranges] if k % 2 == 0 else [text[a:b] for a, b in ranges]  # ranges / texts
        rows.append({"id": doc_id, "text": text, "chunks": chunks})
    rows.append({"id": "bad", "text": "Cats sleep. Dogs bark.", "chunks": [[0, 11], [5, 22]]})  # overlap: chunk 1
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = DocumentStore.from_path(path, chunks_column="chunks")
    tables, rejected = open_tables(tmp_path / "db", chunker, [""])
    report = run_shard(
        chunker,
        store.iter_shard("docs"),
        "docs",
        GivenChunks(),
        chunk_table=tables[""],
        rejected_table=rejected,
        run_id="r1",
        settings=ShardSettings(batch_tokens=100, chunks_column="chunks"),
    )
    assert 2 <= report.batches < len(rows)  # batched: several documents per engine call, several calls
    assert report.rejected_reasons == {"bad_spans": 1}
    [rej] = rejected.to_arrow().to_pylist()
    assert rej["doc_id"] == "bad" and rej["detail"].startswith("chunk 1 (5, 22) overlaps")  # the first misfit
    got = rows_of(tables[""], "docs")
    assert {r["doc_id"] for r in got} == set(GIVEN)
    for doc_id, (text, ranges) in GIVEN.items():
        [want] = chunker.chunk([text], CharSpans(ranges=tuple(ranges)))
        mine = [r for r in got if r["doc_id"] == doc_id]
        assert [(r["char_start"], r["char_end"]) for r in mine] == [c.char_range for c in want.chunks]
        assert [(r["token_start"], r["token_end"]) for r in mine] == [c.token_range for c in want.chunks]
        np.testing.assert_allclose(np.array([r["vector"] for r in mine]), want.vectors, atol=1e-6, rtol=0)
        assert {r["strategy_params"] for r in mine} == {json.dumps({"name": "given_chunks"})}


def test_given_chunks_needs_the_chunks_column(chunker: LateChunker, tmp_path: Path) -> None:
    tables, rejected = open_tables(tmp_path, chunker, [""])
    with pytest.raises(ValueError, match="given_chunks.*chunks_column"):
        run_shard(
            chunker, [], P, GivenChunks(), chunk_table=tables[""], rejected_table=rejected, run_id="r",
            settings=ShardSettings(),
        )  # fmt: skip
    with pytest.raises(ValueError, match="granularity 'mine' is given_chunks"):
        ShardSettings().check_strategies({"mine": GivenChunks(), "big": Sentences(max_tokens=64)})


# -- (b) three granularities, one encode -----------------------------------------------------------------


def test_three_granularities_equal_their_single_runs_from_one_encode(chunker: LateChunker, tmp_path: Path) -> None:
    docs = documents()
    settings = LanceDBSettings(str(tmp_path / "db"))
    rejected = settings.rejected_table(sink.REJECTED_TABLE)
    report = run_shard(
        chunker,
        docs,
        P,
        GRANULARITIES,
        rejected_table=rejected,
        run_id="r1",
        settings=ShardSettings(batch_tokens=256),
        db=settings,
        table_name="chunks",
    )
    tables = {g: settings.open_table(granularity_table("chunks", g)) for g in GRANULARITIES}
    assert [t.name for t in tables.values()] == ["chunks_small", "chunks_medium", "chunks_large"]
    assert settings.open_table("chunks") is None  # no table of the definition's own name
    singles = {g: single_run(chunker, docs, s, tmp_path / f"single-{g}") for g, s in GRANULARITIES.items()}
    # each document encoded once: the tokens of one single-strategy run, not three
    assert {s[0].tokens_encoded for s in singles.values()} == {report.tokens_encoded}
    assert report.documents_reencoded == len(docs)
    for g, table in tables.items():
        got = rows_of(table)
        same_rows(got, singles[g][1])
        assert {r["granularity"] for r in got} == {g}
        assert {r["strategy"] for r in got} == {GRANULARITIES[g].describe()}
        assert all(r["chunk_id"] == chunk_id(P, r["doc_id"], r["chunk_index"], g) for r in got)
        part = report.granularities[g]
        assert part.table == table.name and part.chunks_written == part.partition_rows == len(got)
        assert part.version == table.version
    assert report.chunks_written == sum(len(rows_of(t)) for t in tables.values()) == report.partition_rows
    # the checks hold per granularity table, parents included
    for g, table in tables.items():
        outcomes = validation.check_partitions(
            table,
            rejected,
            [P],
            dim=chunker.embedding_dim,
            expected_rows={P: report.granularities[g].partition_rows},
            accounted=lambda p, rows, rej: validation.documents_accounted(rows, rej, {d.doc_id: d for d in docs}),
        )
        assert all(ok for ok, _ in outcomes.values()), (g, outcomes)
    names = list(GRANULARITIES)
    for fine, coarse in zip(names, names[1:]):
        ok, details = parents_exist(tables[fine], tables[coarse], [P])
        assert ok and details[P]["rows"] == len(rows_of(tables[fine])), details
    # the coarse table as a "fine" one: its rows have no parent, and the check says so
    ok, details = parents_exist(tables["large"], tables["small"], [P])
    assert not ok and details[P]["no_parent"] == len(rows_of(tables["large"]))
    # the summary: the single keys, and one entry per granularity table
    summary = shard_summary(
        report, chunker, GRANULARITIES, table_uri=settings.table_uri("chunks"), table_name="chunks",
        table_version=0, run_id="r1",
    )  # fmt: skip
    assert tuple(summary) == SUMMARY_KEYS and list(summary["granularities"]) == names
    for g, entry in summary["granularities"].items():
        assert tuple(entry) == GRANULARITY_KEYS
        assert entry["table"] == f"chunks_{g}" and entry["table_uri"] == settings.table_uri(f"chunks_{g}")
        assert entry["version"] == tables[g].version and entry["partition_rows"] == len(rows_of(tables[g]))
    assert summary["chunks_written"] == sum(e["chunks_written"] for e in summary["granularities"].values())
    assert summary["rows_inserted"] == report.chunks_written
    json.dumps(summary)


def test_one_strategy_keeps_its_rows_ids_and_summary(chunker: LateChunker, tmp_path: Path) -> None:
    docs = documents()
    report, got = single_run(chunker, docs, Paragraphs(max_tokens=16), tmp_path)
    assert {r["granularity"] for r in got} == {""} and {r["parent_chunk_id"] for r in got} == {None}
    assert all(r["chunk_id"] == chunk_id(P, r["doc_id"], r["chunk_index"]) for r in got)
    assert list(report.granularities) == [""] and report.granularities[""].partition_rows == len(got)
    summary = shard_summary(
        report, chunker, Paragraphs(max_tokens=16), table_uri="u/chunks", table_name="chunks", table_version=0,
        run_id="one",
    )  # fmt: skip
    [entry] = summary["granularities"].values()
    assert entry == {k: summary[k] for k in GRANULARITY_KEYS}


# -- (c) parents ---------------------------------------------------------------------------------------


def best_parent(child: dict, parents: list[dict]) -> dict:
    """The parent holding the most of ``child``'s tokens, the earlier on a tie (contract section 7)."""

    def held(p: dict) -> int:
        return min(child["token_end"], p["token_end"]) - max(child["token_start"], p["token_start"])

    return max(parents, key=lambda p: (held(p), -p["chunk_index"]))


def test_parent_links_with_windows_headings_and_a_straddling_chunk(chunker: LateChunker, tmp_path: Path) -> None:
    old = chunker.window_length
    chunker.window_length = 64  # the long document is encoded in several windows
    try:
        tables, rejected = open_tables(tmp_path, chunker, list(GRANULARITIES))
        materialize_partition(
            chunker, documents(), P, GRANULARITIES, chunk_table=tables, rejected_table=rejected, run_id="r1"
        )
    finally:
        chunker.window_length = old
    rows = {g: rows_of(t) for g, t in tables.items()}
    assert max(r["windows"] for r in rows["small"]) > 1
    by_id = {g: {r["chunk_id"]: r for r in rs} for g, rs in rows.items()}
    straddlers = 0
    for fine, coarse in (("small", "medium"), ("medium", "large")):
        for r in rows[fine]:
            parent = by_id[coarse][r["parent_chunk_id"]]
            candidates = [p for p in rows[coarse] if p["doc_id"] == r["doc_id"]]
            assert parent["chunk_id"] == best_parent(r, candidates)["chunk_id"]
            overlapping = [
                p for p in candidates if p["token_start"] < r["token_end"] and r["token_start"] < p["token_end"]
            ]
            straddlers += len(overlapping) > 1
    assert straddlers >= 1  # some 8-token chunk crosses a paragraph boundary and still has one parent
    assert {r["parent_chunk_id"] for r in rows["large"]} == {None}
    # Markdown headings: the medium chunks of "## Transport" have the Transport section as parent
    transport = [r for r in rows["medium"] if r["doc_id"] == "md" and "trams" in r["text"]]
    assert transport and all(by_id["large"][r["parent_chunk_id"]]["headings"][-1] == "Transport" for r in transport)
    berlin = [r for r in rows["medium"] if r["doc_id"] == "md" and "capital" in r["text"]]
    assert berlin and all(by_id["large"][r["parent_chunk_id"]]["headings"] == ["Berlin"] for r in berlin)


# -- (d) incremental -----------------------------------------------------------------------------------


def materialize(chunker: LateChunker, root: Path, strategies: dict, run_id: str) -> Any:
    tables, rejected = open_tables(root, chunker, list(strategies))
    report = materialize_partition(
        chunker, documents(), P, strategies, chunk_table=tables, rejected_table=rejected, run_id=run_id
    )
    return report, {g: rows_of(t) for g, t in tables.items()}


def run_ids(rows: list[dict]) -> set[str]:
    return {r["run_id"] for r in rows}


def test_granularities_are_incremental_per_table(chunker: LateChunker, tmp_path: Path) -> None:
    small, large = FixedTokens(chunk_size=8), MarkdownSections(96)
    first, rows = materialize(chunker, tmp_path, {"small": small, "large": large}, "r1")
    assert first.documents_reencoded == len(TEXTS) and first.tokens_encoded > 0
    # the same granularities again: nothing encoded, nothing committed
    again, rows2 = materialize(chunker, tmp_path, {"small": small, "large": large}, "r2")
    assert (again.documents_reencoded, again.tokens_encoded, again.chunks_written) == (0, 0, 0)
    assert all(p.write is None for p in again.granularities.values())
    assert rows2 == rows
    # a new finest granularity: each document encoded once, only the new table written
    added, rows3 = materialize(
        chunker, tmp_path, {"tiny": FixedTokens(chunk_size=4), "small": small, "large": large}, "r3"
    )
    assert added.tokens_encoded == first.tokens_encoded and added.documents_reencoded == len(TEXTS)
    assert added.granularities["small"].write is None and added.granularities["large"].write is None
    assert run_ids(rows3["tiny"]) == {"r3"} and run_ids(rows3["small"]) == run_ids(rows3["large"]) == {"r1"}
    assert rows3["small"] == rows["small"] and rows3["large"] == rows["large"]
    # a changed coarse strategy: its table and the one whose parents it holds are rewritten
    changed, rows4 = materialize(
        chunker, tmp_path, {"tiny": FixedTokens(chunk_size=4), "small": small, "large": Paragraphs(max_tokens=48)}, "r4"
    )
    assert changed.tokens_encoded == first.tokens_encoded
    assert run_ids(rows4["large"]) == run_ids(rows4["small"]) == {"r4"} and run_ids(rows4["tiny"]) == {"r3"}
    by_id = {r["chunk_id"]: r for r in rows4["large"]}
    assert all(r["parent_chunk_id"] in by_id for r in rows4["small"])  # links to the new coarse chunks
    assert {r["strategy"] for r in rows4["large"]} == {Paragraphs(max_tokens=48).describe()}
    # a granularity removed: nothing encoded (the removed table is left alone)
    removed, _ = materialize(chunker, tmp_path, {"small": small, "large": Paragraphs(max_tokens=48)}, "r5")
    assert (removed.documents_reencoded, removed.chunks_written) == (0, 0)


def test_a_document_rejected_now_loses_its_rows_in_every_table(chunker: LateChunker, tmp_path: Path) -> None:
    strategies: dict[str, ChunkingStrategy] = {"small": FixedTokens(chunk_size=8), "large": Paragraphs(max_tokens=48)}
    materialize(chunker, tmp_path, strategies, "r1")
    tables, rejected = open_tables(tmp_path, chunker, list(strategies))
    docs = [d if d.doc_id != "tea" else Document.from_text("tea", "   ") for d in documents()]  # now empty
    report = materialize_partition(
        chunker, docs, P, strategies, chunk_table=tables, rejected_table=rejected, run_id="r2"
    )
    assert report.rejected_reasons == {"empty_text": 1} and report.documents_reencoded == 1
    for table in tables.values():
        assert "tea" not in {r["doc_id"] for r in rows_of(table)}
    assert [r["doc_id"] for r in rejected.to_arrow().to_pylist()] == ["tea"]


def test_a_run_stopped_between_two_table_commits_is_repaired_by_encoding_what_a_table_lacks(
    chunker: LateChunker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LanceDB commits one table at a time: a run that dies after the fine table's commit leaves the
    coarse table old; the next run encodes only the changed document, for the coarse table alone."""
    from latechunk_dagster.pipeline import tables as tables_module

    strategies: dict[str, ChunkingStrategy] = {"small": FixedTokens(chunk_size=8), "large": Paragraphs(max_tokens=48)}
    _, before = materialize(chunker, tmp_path, strategies, "r1")
    texts = TEXTS | {"owls": TEXTS["owls"] + " They eat mice."}
    real, calls = tables_module.commit_documents, []

    def dies_after_the_first_table(table: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(table.name)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between two table commits")
        return real(table, *args, **kwargs)

    monkeypatch.setattr(tables_module, "commit_documents", dies_after_the_first_table)
    tables, rejected = open_tables(tmp_path, chunker, list(strategies))
    with pytest.raises(KeyboardInterrupt):
        materialize_partition(
            chunker, documents(texts), P, strategies, chunk_table=tables, rejected_table=rejected, run_id="r2"
        )
    monkeypatch.setattr(tables_module, "commit_documents", real)
    assert calls == ["chunks_small", "chunks_large"]
    assert {r["run_id"] for r in rows_of(tables["small"]) if r["doc_id"] == "owls"} == {"r2"}
    assert rows_of(tables["large"]) == before["large"]  # still the old rows
    report = materialize_partition(
        chunker, documents(texts), P, strategies, chunk_table=tables, rejected_table=rejected, run_id="r3"
    )
    [owls] = [d for d in documents(texts) if d.doc_id == "owls"]
    assert report.documents_reencoded == 1 and report.tokens_encoded == len(chunker.tokenize(owls.text).token_ids)
    assert report.granularities["small"].write is None and report.granularities["large"].write is not None
    large = rows_of(tables["large"])
    assert {r["run_id"] for r in large if r["doc_id"] == "owls"} == {"r3"}
    assert {r["run_id"] for r in large if r["doc_id"] != "owls"} == {"r1"}
    ok, details = parents_exist(tables["small"], tables["large"], [P])
    assert ok, details


# -- (e) host worker processes -------------------------------------------------------------------------


def halves(text: str) -> tuple[tuple[int, int], ...]:
    """Two chunks of ``text``, cut at the first space after its middle."""
    i = text.index(" ", len(text) // 2)
    return ((0, i), (i + 1, len(text)))


def test_host_workers_write_the_rows_of_the_threads(chunker: LateChunker, tmp_path: Path) -> None:
    """Given chunks and three granularities through one worker process: the rows of the in-process run."""
    strategies: dict[str, ChunkingStrategy] = {
        "given": GivenChunks(),
        "medium": Paragraphs(max_tokens=16),
        "large": MarkdownSections(96),
    }
    docs = [Document.from_text(d, t, halves(t)) for d, t in TEXTS.items() if d != "md"]
    i = MARKDOWN.index("## Transport")
    docs.append(Document.from_text("md", MARKDOWN, (MARKDOWN[:i].strip(), MARKDOWN[i:].strip())))  # chunk texts
    got = {}
    for workers in (0, 1):
        tables, rejected = open_tables(tmp_path / f"w{workers}", chunker, list(strategies))
        report = materialize_partition(
            chunker, docs, P, strategies, chunk_table=tables, rejected_table=rejected, run_id="r",
            host_workers=workers, batch_tokens=64,
        )  # fmt: skip
        assert report.batches >= 3
        got[workers] = {
            g: pa.Table.from_pylist(rows_of(t)).drop_columns(["materialized_at"]) for g, t in tables.items()
        }
        got[workers]["rejected"] = rejected.to_arrow().drop_columns(["rejected_at"]).sort_by("doc_id")
    for g in got[0]:
        assert got[1][g].equals(got[0][g]), g
    assert got[0]["given"].num_rows == 2 * len(docs) and got[0]["rejected"].num_rows == 0


# -- run config ----------------------------------------------------------------------------------------


def test_several_named_strategies_from_run_config() -> None:
    default = Sentences(max_tokens=128)
    got = strategy_from_run_config(
        None,
        None,
        default,
        strategies={"small": {"name": "fixed_tokens", "chunk_size": "32"}, "own": {"name": "given_chunks"}, "big": {}},
    )
    assert got == {"small": FixedTokens(chunk_size=32), "own": GivenChunks(), "big": default}
    assert list(got) == ["small", "own", "big"]  # finest first, as given
    for bad, match in (
        ({"small": {"name": "char_spans"}}, "granularity 'small': char_spans"),
        ({"small": {"name": "fixed_tokens"}}, "granularity 'small': bad parameters"),
        ({"no-dash": {}}, "granularity name 'no-dash'"),
        ({}, "non-empty mapping"),
    ):
        with pytest.raises(ValueError, match=match):
            strategy_from_run_config(None, None, default, strategies=bad)
    with pytest.raises(ValueError, match="not both"):
        strategy_from_run_config("sentences", None, default, strategies={"a": {}})
