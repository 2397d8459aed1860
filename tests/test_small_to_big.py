"""Small-to-big search (issue 29): one LanceDB table per granularity, the fine chunks matched, their
parents returned; ``latechunk search --granularity --parent``; the client retrievers; the stock
LangChain and LlamaIndex stores reading one granularity by its table name.

Three hand-written documents of hand-written paragraphs, late-chunked in three granularities from
one encoder pass: ``sentence`` (one sentence a chunk), ``paragraph`` (the documents' own chunks: the
paragraphs, ``GivenChunks``) and ``document`` (one chunk). The expected parents come from outside
the code under test: the paragraph literal whose characters hold the fine chunk, and the ranking
from float64 cosines over the stored fine vectors.
"""

from __future__ import annotations

import contextlib
import math
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import ChunkingStrategy, FixedTokens, GivenChunks, LateChunker, Sentences, sink
from latechunk_dagster.app import cli
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sink import small_to_big
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.granularity_tables import granularity_names, granularity_tables, parent_granularity
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sink.search import ParentHit, search
from latechunk_dagster.sources.documents import Document
from tests.doc_examples import example, lend_engine

PARAGRAPHS = {
    "zlib": [
        "The zlib module compresses data with the DEFLATE algorithm. It returns a bytes object. "
        "Level nine is the slowest and the smallest.",
        "Checksums are computed with adler32 and crc32. Both return an unsigned integer. They detect corrupted data.",
        "Streams are compressed piece by piece with a compressobj. Call flush at the end to get the last bytes.",
    ],
    "garden": [
        "Tomatoes need six hours of sun a day. Water them at the roots in the morning. "
        "Yellow leaves mean too much water.",
        "Roses are pruned in late winter. Cut just above an outward-facing bud. Remove the dead wood first.",
        "Compost feeds the soil slowly. Turn the heap every two weeks.",
    ],
    "trains": [
        "The night train leaves Vienna at ten in the evening. Sleeping cars have beds for two or four people. "
        "Breakfast is served before arrival.",
        "Tickets can be booked six months ahead. Prices rise as the train fills up.",
    ],
}
TEXTS = {doc_id: "\n\n".join(ps) for doc_id, ps in PARAGRAPHS.items()}
#: finest first: each sentence's parent is its paragraph, each paragraph's the whole document
GRANULARITIES = {"sentence": Sentences(max_tokens=12), "paragraph": GivenChunks(), "document": FixedTokens(512)}
PARTITION = "p"
#: The granularity names ``make demo`` writes (docs/querying.md's example reads their tables by name),
#: on strategies sized for these short texts: sentences, and each document's paragraphs as their parents.
GUIDE_GRANULARITIES = {"sentences32": Sentences(max_tokens=12), "sentences128": GivenChunks()}


def write_granularities(
    chunker: LateChunker,
    uri: str,
    table: str = sink.CHUNK_TABLE,
    granularities: Mapping[str, ChunkingStrategy] = GRANULARITIES,
) -> dict[str, int]:
    """The granularity tables of ``table`` at ``uri`` (the three of :data:`GRANULARITIES` by default)
    written by the pipeline (one encoder pass, one commit per table); returns rows per table."""
    settings = LanceDBSettings(uri=uri)
    tables = {g: settings.chunk_table(granularity_table(table, g), chunker.embedding_dim) for g in granularities}
    docs = [Document.from_text(d, TEXTS[d], tuple(PARAGRAPHS[d])) for d in TEXTS]  # the paragraphs: own chunks
    report = materialize_partition(
        chunker, docs, PARTITION, granularities, chunk_table=tables,
        rejected_table=settings.rejected_table(sink.REJECTED_TABLE), run_id="r1", host_workers=0,
    )  # fmt: skip
    assert report.rejected == 0
    return {g: t.count_rows() for g, t in tables.items()}


@pytest.fixture(scope="module")
def db_uri(tmp_path_factory: pytest.TempPathFactory, chunker: LateChunker) -> str:
    uri = str(tmp_path_factory.mktemp("small_to_big") / "lancedb")
    rows = write_granularities(chunker, uri)
    assert rows == {"sentence": rows["sentence"], "paragraph": 8, "document": 3} and rows["sentence"] >= 20
    return uri


def paragraph_of(doc_id: str, char_range: tuple[int, int]) -> tuple[str, tuple[int, int]]:
    """The paragraph literal (and its range) whose characters hold ``char_range`` (hand rule, not the code's)."""
    start = 0
    for p in PARAGRAPHS[doc_id]:
        if start <= char_range[0] and char_range[1] <= start + len(p):
            return p, (start, start + len(p))
        start += len(p) + 2  # the blank line
    raise AssertionError(f"{doc_id} {char_range} straddles two paragraphs: the corpus must not")


def reference_parents(chunker: LateChunker, uri: str, query: str, k: int) -> list[tuple[str, str, float]]:
    """(doc_id, paragraph, best distance) of the ``k`` best distinct paragraphs: float64 cosines over
    every stored sentence vector, each sentence mapped to its paragraph by the hand rule."""
    rows = sink.connect(uri).open_table("chunks_sentence").to_arrow().to_pylist()
    vectors = np.asarray([r["vector"] for r in rows], dtype=np.float64)
    q = chunker.embed_queries([query])[0].astype(np.float64)
    distance = 1 - vectors @ q / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q))
    out: dict[tuple[str, str], float] = {}
    for i in np.argsort(distance, kind="stable"):
        r = rows[int(i)]
        key = (r["doc_id"], paragraph_of(r["doc_id"], (r["char_start"], r["char_end"]))[0])
        out.setdefault(key, float(distance[i]))
    return [(d, p, dist) for (d, p), dist in list(out.items())[:k]]


def test_every_sentence_lies_in_one_paragraph_and_links_to_it(db_uri: str) -> None:
    """The corpus's premise (no sentence chunk straddles a paragraph), and the links the pipeline wrote."""
    db = sink.connect(db_uri)
    paragraphs = {r["chunk_id"]: r for r in db.open_table("chunks_paragraph").to_arrow().to_pylist()}
    for r in db.open_table("chunks_sentence").to_arrow().to_pylist():
        text, char_range = paragraph_of(r["doc_id"], (r["char_start"], r["char_end"]))
        parent = paragraphs[r["parent_chunk_id"]]
        assert (parent["doc_id"], parent["text"], (parent["char_start"], parent["char_end"])) == (
            r["doc_id"], text, char_range,
        )  # fmt: skip


def test_the_granularity_tables_chain_finest_first_by_the_tables_that_hold_their_parents(
    db_uri: str, tmp_path: Path
) -> None:
    """sink.granularity_tables: the three tables ordered by where their parent ids are (not by name:
    sorted they would be document, paragraph, sentence), the coarsest without a parent granularity;
    a table named like a granularity whose rows say otherwise, or without the column, is not one."""
    db = sink.connect(db_uri)
    tables = granularity_tables(db, sink.CHUNK_TABLE)
    assert list(tables) == ["sentence", "paragraph", "document"]
    assert [parent_granularity(tables, g) for g in tables] == ["paragraph", "document", None]
    assert granularity_names(db.list_tables().tables, sink.CHUNK_TABLE) == ["document", "paragraph", "sentence"]
    for name in ("chunks_sentence", "chunks_paragraph", "chunks_document"):
        shutil.copytree(Path(db_uri) / f"{name}.lance", tmp_path / f"{name}.lance")
    copy = sink.connect(str(tmp_path))
    copy.create_table("chunks_old", copy.open_table("chunks_sentence").to_arrow())  # rows say "sentence"
    copy.create_table("chunks_x", pa.table({"x": [1]}))
    assert list(granularity_tables(copy, "chunks", ordered=False)) == ["document", "paragraph", "sentence"]
    assert list(granularity_tables(copy, "chunks")) == ["sentence", "paragraph", "document"]
    copy.drop_table("chunks_document")  # the paragraphs' parents are in no table left
    with pytest.raises(ValueError, match="the parents of granularity 'paragraph' are in no granularity table"):
        granularity_tables(copy, "chunks")


@pytest.mark.parametrize(
    ("query", "top"),
    [
        ("when should roses be pruned", PARAGRAPHS["garden"][1]),
        ("which checksum functions does zlib offer", PARAGRAPHS["zlib"][1]),
        ("booking tickets for the train", PARAGRAPHS["trains"][1]),
    ],
)
def test_parents_are_the_paragraphs_of_the_best_sentences_without_duplicates(
    chunker: LateChunker, db_uri: str, query: str, top: str
) -> None:
    k = 4
    got = search(query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=k, exact=True)
    want = reference_parents(chunker, db_uri, query, k)
    assert all(isinstance(h, ParentHit) for h in got)
    assert got[0].text == top  # hand-checked: the paragraph that answers the query
    assert [(h.doc_id, h.text) for h in got] == [(d, p) for d, p, _ in want]
    assert np.allclose([h.distance for h in got], [dist for *_, dist in want], atol=1e-6)
    assert len({h.chunk_id for h in got}) == len(got) == k  # k distinct parents
    paragraphs = {r["chunk_id"]: r for r in sink.connect(db_uri).open_table("chunks_paragraph").to_arrow().to_pylist()}
    for h in got:
        text, char_range = paragraph_of(h.doc_id, h.matched[0].char_range)
        row = paragraphs[h.chunk_id]
        assert h.char_range == char_range and TEXTS[h.doc_id][slice(*char_range)] == h.text == text
        assert h.token_range == (row["token_start"], row["token_end"]) and h.token_range[0] < h.token_range[1]
        assert (h.granularity, h.table, h.partition, h.headings) == ("paragraph", "chunks_paragraph", PARTITION, ())
        # every matched sentence lies in the parent, best first, and the parent keeps the best distance
        assert all(paragraph_of(h.doc_id, m.char_range)[0] == text and m.doc_id == h.doc_id for m in h.matched)
        assert [m.distance for m in h.matched] == sorted(m.distance for m in h.matched)
        assert h.distance == h.matched[0].distance
    matched = [m.chunk_id for h in got for m in h.matched]
    assert len(matched) == len(set(matched))  # a fine hit is listed under one parent only
    assert len(matched) > k  # duplicates were merged: some parent matched more than one sentence


def test_fewer_fine_hits_than_parents_needed_reads_more(
    chunker: LateChunker, db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One fine hit per parent wanted at first: the read grows until all 8 paragraphs are found."""
    monkeypatch.setattr(small_to_big, "FETCH_FACTOR", 1)
    monkeypatch.setattr(small_to_big, "FETCH_GROWTH", 2)
    query = "compress data"
    got = search(query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=8, exact=True)
    assert [(h.doc_id, h.text) for h in got] == [(d, p) for d, p, _ in reference_parents(chunker, db_uri, query, 8)]
    assert sorted(h.text for h in got) == sorted(p for ps in PARAGRAPHS.values() for p in ps)
    # more parents asked than exist: all of them, once each
    many = search(query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=50, exact=True)
    assert [h.chunk_id for h in many] == [h.chunk_id for h in got]


def test_paragraphs_return_their_documents_and_where_filters_the_fine_chunks(chunker: LateChunker, db_uri: str) -> None:
    got = search("pruning roses", chunker=chunker, uri=db_uri, granularity="paragraph", return_parent=True, k=3)
    assert sorted(h.doc_id for h in got) == sorted(TEXTS) and got[0].doc_id == "garden"
    assert all(h.text == TEXTS[h.doc_id] and h.char_range == (0, len(TEXTS[h.doc_id])) for h in got)
    assert all(h.granularity == "document" and h.table == "chunks_document" for h in got)
    assert {m.text for m in got[0].matched} <= set(PARAGRAPHS["garden"])
    only = search(
        "pruning roses", chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=5,
        where=f"doc_id = {sink.sql_string('trains')}",
    )  # fmt: skip
    assert [h.text for h in only] and {h.doc_id for h in only} == {"trains"}
    assert sorted(h.text for h in only) == sorted(PARAGRAPHS["trains"])  # fewer than k: all there are


def test_granularity_chooses_the_table(chunker: LateChunker, db_uri: str) -> None:
    for g, table in (("sentence", "chunks_sentence"), ("document", "chunks_document")):
        hits = search("night train", chunker=chunker, uri=db_uri, granularity=g, k=2, exact=True)
        ids = set(sink.connect(db_uri).open_table(table).to_arrow().column("chunk_id").to_pylist())
        assert hits and {h.chunk_id for h in hits} <= ids
    same = search("night train", chunker=chunker, uri=db_uri, table_name="chunks_sentence", k=2, exact=True)
    assert same == search("night train", chunker=chunker, uri=db_uri, granularity="sentence", k=2, exact=True)
    with pytest.raises(ValueError, match=r"no table 'chunks_word' .*granularities of 'chunks': document, paragraph"):
        search("train", chunker=chunker, uri=db_uri, granularity="word")


def test_a_table_without_parent_links_is_refused_naming_it(chunker: LateChunker, db_uri: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"table 'chunks_document' has no parent chunks .*coarsest granularity"):
        search("train", chunker=chunker, uri=db_uri, granularity="document", return_parent=True)
    # a single strategy's table written by the pipeline (parent_chunk_id NULL), and one written before
    # the two columns existed
    settings = LanceDBSettings(uri=str(tmp_path))
    single = settings.chunk_table("single", chunker.embedding_dim)
    docs = [Document.from_text(d, TEXTS[d]) for d in TEXTS]
    materialize_partition(
        chunker, docs, PARTITION, Sentences(max_tokens=12), chunk_table=single,
        rejected_table=settings.rejected_table(sink.REJECTED_TABLE), run_id="r1", host_workers=0,
    )  # fmt: skip
    assert set(single.to_arrow().column("parent_chunk_id").to_pylist()) == {None}
    settings.connect().create_table("old", single.to_arrow().drop_columns(["granularity", "parent_chunk_id"]))
    for name, why in (("single", "parent_chunk_id is NULL in every row"), ("old", "no parent_chunk_id column")):
        with pytest.raises(ValueError, match=f"table '{name}' has no parent chunks .*{why}"):
            search("train", chunker=chunker, uri=str(tmp_path), table_name=name, return_parent=True)
    assert search("train", chunker=chunker, uri=str(tmp_path), table_name="old", k=1)  # the chunks themselves


def test_parents_missing_from_the_next_table_are_an_error_naming_both(
    chunker: LateChunker, db_uri: str, tmp_path: Path
) -> None:
    for name in ("chunks_sentence", "chunks_paragraph", "chunks_document"):
        shutil.copytree(Path(db_uri) / f"{name}.lance", tmp_path / f"{name}.lance")
    paragraphs = sink.connect(str(tmp_path)).open_table("chunks_paragraph")
    paragraphs.delete(f"text = {sink.sql_string(PARAGRAPHS['garden'][1])}")
    with pytest.raises(
        ValueError, match=r"table 'chunks_paragraph' lacks 1 of the 2 parent chunks .*'chunks_sentence'"
    ):
        search("roses", chunker=chunker, uri=str(tmp_path), granularity="sentence", return_parent=True, k=2)
    sink.connect(str(tmp_path)).drop_table("chunks_paragraph")
    with pytest.raises(ValueError, match=r"in none of the tables of its table definition 'chunks' \(chunks_document\)"):
        search("roses", chunker=chunker, uri=str(tmp_path), granularity="sentence", return_parent=True, k=2)


def test_hybrid_small_to_big_ranks_parents_by_their_best_fused_score(
    chunker: LateChunker, db_uri: str, capfd: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder
) -> None:
    from latechunk_dagster.sink.indexing import refresh_indexes

    capfd.readouterr()
    refresh_indexes(sink.connect(db_uri).open_table("chunks_sentence"))
    # issue 40.5: no deprecated LanceDB call (create_scalar_index, create_fts_index: DeprecatedWarning)
    assert [str(w.message) for w in recwarn if issubclass(w.category, DeprecationWarning)] == []
    query = "adler32 crc32 checksums"
    fine = search(query, chunker=chunker, uri=db_uri, granularity="sentence", k=20, exact=True, mode="hybrid")
    got = search(
        query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=3, exact=True, mode="hybrid"
    )
    assert got[0].text == PARAGRAPHS["zlib"][1]
    order: list[str] = []
    for h in fine:  # the fused order of the sentences, their paragraphs' first appearance
        p = paragraph_of(h.doc_id, h.char_range)[0]
        if p not in order:
            order.append(p)
    assert [h.text for h in got] == order[:3]
    assert all(h.relevance == max(m.relevance for m in h.matched) for h in got)
    # issue 40.5: lance's "Deprecation warning ... did not include `_distance`" (its Rust log, on stderr)
    err = capfd.readouterr().err
    assert "Deprecation" not in err and "_distance" not in err, err


# -- latechunk search --granularity --parent --------------------------------------------------------


def test_cli_granularity_and_parent(
    chunker: LateChunker, db_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(cli, "_chunker", lambda args: contextlib.nullcontext(chunker))  # the module's engine
    query = "when should roses be pruned"
    argv = ["search", query, "--uri", db_uri, "--exact", "-k", "3", "--granularity", "sentence"]
    assert cli.main([*argv, "--parent"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "cosine_distance\tdoc_id\tchar_range\tmatched\ttext"
    want = search(query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=3, exact=True)
    cells = [line.split("\t") for line in lines[1:]]
    assert [c[1] for c in cells] == [h.doc_id for h in want] and len(cells) == 3
    assert [c[2] for c in cells] == [str(h.char_range) for h in want]
    assert [int(c[3]) for c in cells] == [len(h.matched) for h in want]
    assert cells[0][4] == " ".join(PARAGRAPHS["garden"][1].split())
    assert cli.main(argv) == 0  # the sentences themselves
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "cosine_distance\tdoc_id\tchar_range\ttext"
    fine = search(query, chunker=chunker, uri=db_uri, granularity="sentence", k=3, exact=True)
    assert [line.split("\t")[2] for line in lines[1:]] == [str(h.char_range) for h in fine]
    # refused in one line before the model loads: a missing granularity, the coarsest with --parent
    monkeypatch.setattr(cli, "_chunker", lambda args: pytest.fail("the model must not load"))
    assert cli.main(["search", query, "--uri", db_uri, "--granularity", "word"]) == 2
    assert "no table 'chunks_word'" in capsys.readouterr().err
    assert cli.main(["search", query, "--uri", db_uri, "--granularity", "document", "--parent"]) == 2
    assert "table 'chunks_document' has no parent chunks" in capsys.readouterr().err


def test_a_plain_cli_search_on_a_definition_matches_the_finest_granularity_and_prints_its_parents(
    chunker: LateChunker, db_uri: str, tmp_path: Path
) -> None:
    """Issue 40.2: after `make demo` (a table definition of granularities, no table 'chunks') a plain
    `latechunk search "query"` failed with "no table 'chunks'... pass --granularity NAME". It now
    does what the demo shows: the finest granularity (sentence) matched, its parents (paragraph)
    printed, the header line saying so. The command run as a user runs it, on the pipeline's tables."""
    from tests.test_cli import run_cli

    query = "when should roses be pruned"
    out = run_cli(["search", query, "--uri", db_uri, "--exact", "-k", "3"], tmp_path / "home")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == (
        "# chunks: matched on its finest granularity 'sentence', printed: their parents in 'paragraph' "
        "(small-to-big; --granularity sentence prints the matches themselves)"
    )
    assert lines[1] == "cosine_distance\tdoc_id\tchar_range\tmatched\ttext"
    cells = [line.split("\t") for line in lines[2:]]
    start = len(PARAGRAPHS["garden"][0]) + 2  # the second paragraph, after the blank line
    assert cells[0][1:3] == ["garden", str((start, start + len(PARAGRAPHS["garden"][1])))]
    assert cells[0][4] == " ".join(PARAGRAPHS["garden"][1].split())  # the hand-picked paragraph on roses
    want = reference_parents(chunker, db_uri, query, 3)  # float64 cosines over the stored sentences
    assert [(c[1], c[4]) for c in cells] == [(d, " ".join(p.split())[:160]) for d, p, _ in want]
    assert [float(c[0]) for c in cells] == pytest.approx([dist for _, _, dist in want], abs=2e-4)
    # --table names the definition too; --granularity still searches the granularity's own chunks
    out = run_cli(["search", query, "--uri", db_uri, "--table", "chunks", "--granularity", "sentence"], tmp_path / "h")
    assert out.returncode == 0 and out.stdout.splitlines()[0] == "cosine_distance\tdoc_id\tchar_range\ttext"


# -- the client retrievers and the stock stores ------------------------------------------------------


def test_langchain_retriever_small_to_big(chunker: LateChunker, db_uri: str) -> None:
    from latechunk_dagster.clients import LangChainRetriever

    query = "when should roses be pruned"
    want = search(query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=3)
    retriever = LangChainRetriever(chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=3)
    docs = retriever.invoke(query)
    assert [d.page_content for d in docs] == [h.text for h in want] and docs[0].page_content == PARAGRAPHS["garden"][1]
    assert [d.id for d in docs] == [h.chunk_id for h in want]
    m = docs[0].metadata
    assert (m["doc_id"], m["char_start"], m["char_end"]) == ("garden", *want[0].char_range)
    assert (m["granularity"], m["cosine_distance"]) == ("paragraph", pytest.approx(want[0].distance, abs=1e-7))
    assert m["matched_chunk_ids"] == [h.chunk_id for h in want[0].matched]
    fine = LangChainRetriever(chunker=chunker, uri=db_uri, granularity="sentence", k=2).invoke(query)
    with pytest.raises(ValueError, match="granularty"):  # a misspelt option is refused, not ignored
        LangChainRetriever(chunker=chunker, uri=db_uri, granularty="sentence")
    assert [d.id for d in fine] == [
        h.chunk_id for h in search(query, chunker=chunker, uri=db_uri, granularity="sentence", k=2)
    ]
    assert "parent_chunk_id" not in fine[0].metadata or fine[0].metadata["granularity"] == "sentence"


def test_llamaindex_retriever_small_to_big(chunker: LateChunker, db_uri: str) -> None:
    from latechunk_dagster.clients import LlamaIndexRetriever

    query = "booking tickets for the train"
    want = search(query, chunker=chunker, uri=db_uri, granularity="sentence", return_parent=True, k=2)
    nodes = LlamaIndexRetriever(chunker, uri=db_uri, granularity="sentence", return_parent=True, k=2).retrieve(query)
    assert [n.node.get_content() for n in nodes] == [h.text for h in want]
    assert nodes[0].node.get_content() == PARAGRAPHS["trains"][1]
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in want]
    assert [n.score for n in nodes] == pytest.approx([1 - h.distance for h in want], abs=1e-7)
    assert nodes[0].node.metadata["matched_chunk_ids"] == [h.chunk_id for h in want[0].matched]
    assert nodes[0].node.ref_doc_id == "trains" and nodes[0].node.to_json()


@pytest.fixture
def in_project(chunker: LateChunker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A project directory whose ``data/lancedb`` holds the tables ``make demo`` writes
    (:data:`GUIDE_GRANULARITIES`); ``LateChunker(model)`` hands back the module's engine
    (``tests.doc_examples.lend_engine``)."""
    write_granularities(chunker, str(tmp_path / "data" / "lancedb"), granularities=GUIDE_GRANULARITIES)
    lend_engine(monkeypatch, chunker)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_querying_guide_granularity_example(in_project: Path, chunker: LateChunker, capsys) -> None:
    """docs/querying.md: the stock LangChain and LlamaIndex stores read one granularity by its table
    name alone; the package's small-to-big search returns the paragraphs."""
    scope: dict = {}
    exec(example("granularities.py"), scope)
    uri = str(in_project / "data" / "lancedb")
    query = scope["QUERY"]
    fine = search(query, chunker=chunker, uri=uri, granularity="sentences32", k=3, exact=True)
    assert [d.metadata["chunk_id"] for d, _ in scope["lc_hits"]] == [h.chunk_id for h in fine]
    assert np.allclose([s for _, s in scope["lc_hits"]], [1 - h.distance for h in fine], atol=1e-6)
    assert [n.node.node_id for n in scope["li_nodes"]] == [h.chunk_id for h in fine]
    assert np.allclose(
        [1 + math.log(n.score) / 2 for n in scope["li_nodes"]], [1 - h.distance for h in fine], atol=1e-5
    )
    parents = search(query, chunker=chunker, uri=uri, granularity="sentences32", return_parent=True, k=2, exact=True)
    assert [h.chunk_id for h in scope["parents"]] == [h.chunk_id for h in parents]
    assert scope["parents"][0].text == PARAGRAPHS["zlib"][1]
    assert (
        [d.id for d in scope["lc_docs"]]
        == [n.node.node_id for n in scope["li_parents"]]
        == [h.chunk_id for h in parents]
    )
    assert [d.page_content for d in scope["lc_docs"]] == [h.text for h in parents]
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].split()[:2] == [f"{parents[0].distance:.3f}", "zlib"]
    assert f"{parents[0].char_range} {len(parents[0].matched)} matched: Checksums are computed with adl" in out[0]
