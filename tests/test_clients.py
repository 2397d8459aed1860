"""The chunk table read by the stock LangChain and LlamaIndex LanceDB stores; the query embedders;
hybrid search; the examples of the README's "Querying" and of docs/querying.md, run as written.

One real table of standard-library docstrings (the shipped MiniLM, where exact top hits matter),
written by the pipeline, and the same rows in the layout written before ``id``/``metadata``
existed (migrated here). The expected hits come from ``search(..., exact=True)`` (what
``latechunk search --exact`` prints) and from float64 cosines over the stored vectors.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.app import cli
from latechunk_dagster.app.demo_corpus import build_demo_store
from latechunk_dagster.clients import LangChainEmbeddings, LlamaIndexEmbedding
from latechunk_dagster.evaluation import LabeledQuery, Passage, evaluate_table
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sink.creation import migrate
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sink.schema import METADATA_FIELDS
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import DocumentStore
from tests.doc_examples import example, lend_engine

warnings.filterwarnings("ignore", message=".*validate_default.*")  # pydantic, on importing llama_index

MODULES = ["bz2", "csv", "getopt", "glob", "gzip", "zlib"]
QUERIES = ["compress data with zlib", "parse command-line options", "read and write CSV files"]
FRESH, OLD = "chunks", "chunks_old"
#: The chunk table's columns added after its first layout, in order: a table without them is an old one.
NEWER_COLUMNS = [
    "id", "metadata", "granularity", "parent_chunk_id", "converter", "page_start", "page_end", "boxes", "source_stamp",
]  # fmt: skip
#: The table the README's search example and docs/querying.md's LangChain, LlamaIndex and hybrid examples
#: read: the demo's 128-token granularity (a copy of FRESH's rows, with its own indexes).
README_TABLE = "chunks_sentences128"
#: Commits a migration of the first layout makes: the SQL columns up to
#: ``page_end`` in one ``add_columns``, ``boxes`` (a list column: by its Arrow type) in one, ``source_stamp``
#: in one (``sink.creation.migrate``: runs of SQL columns between list columns).
MIGRATION_STEPS = 3


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, chunker: LateChunker) -> Path:
    """``data/lancedb`` with ``chunks`` (written by the pipeline, indexes refreshed) and ``chunks_old``:
    the same rows in the layout of the previous version (no ``id``/``metadata``), indexes built."""
    root = tmp_path_factory.mktemp("clients")
    store = DocumentStore.from_path(build_demo_store(root / "documents", modules=MODULES))
    settings = LanceDBSettings(uri=str(root / "data" / "lancedb"))
    chunks = settings.chunk_table(FRESH, chunker.embedding_dim)
    rejected = settings.rejected_table(sink.REJECTED_TABLE)
    for shard in store.shards():
        materialize_partition(
            chunker, store.iter_shard(shard), shard, Sentences(max_tokens=128),
            chunk_table=chunks, rejected_table=rejected, run_id="r1",
        )  # fmt: skip
    refresh_indexes(chunks)
    old = settings.connect().create_table(OLD, chunks.to_arrow().drop_columns(NEWER_COLUMNS))
    refresh_indexes(old)
    # the demo's granularity table: its rows say granularity "sentences128" (issue 40: rows, not names, decide)
    rows = chunks.to_arrow()
    rows = rows.set_column(
        rows.schema.get_field_index("granularity"), "granularity", pa.array(["sentences128"] * rows.num_rows)
    )
    refresh_indexes(settings.connect().create_table(README_TABLE, rows))
    return root


def uri(project: Path) -> str:
    return str(project / "data" / "lancedb")


def copy_table(project: Path, name: str, dest: Path) -> str:
    """A copy of table ``name`` in a database of its own at ``dest``; returns its uri."""
    shutil.copytree(Path(uri(project)) / f"{name}.lance", dest / f"{name}.lance")
    return str(dest)


@pytest.fixture(scope="module")
def migrated(project: Path) -> str:
    """``chunks_old`` brought to the current schema the way a writer does it (on open)."""
    db = sink.connect(uri(project))
    dim = db.open_table(OLD).schema.field("vector").type.list_size
    sink.open_or_create(db, OLD, sink.chunk_schema(dim))
    return OLD


@pytest.fixture(scope="module", params=[FRESH, OLD])
def table_name(request: pytest.FixtureRequest, migrated: str) -> str:
    return request.param


def expected(chunker: LateChunker, project: Path, query: str, k: int = 3, **kw) -> list:
    """What ``latechunk search --exact`` prints for ``query``, on the fresh table."""
    return search(query, chunker=chunker, uri=uri(project), table_name=FRESH, k=k, exact=True, **kw)


def row_metadata(project: Path) -> dict[str, dict]:
    """chunk_id -> the metadata fields, read from the columns of the fresh table."""
    rows = sink.connect(uri(project)).open_table(FRESH).to_arrow().select(list(METADATA_FIELDS)).to_pylist()
    return {r["chunk_id"]: r for r in rows}


# -- the table: schema, migration -----------------------------------------------------------------


def test_metadata_struct_holds_the_row_columns_and_only_scalars(project: Path, migrated: str) -> None:
    truth = row_metadata(project)
    for name in (FRESH, OLD):
        table = sink.connect(uri(project)).open_table(name)
        assert table.schema == sink.chunk_schema(384)  # names, types, nullability (not field metadata)
        rows = table.to_arrow().select(["chunk_id", "id", "metadata"]).to_pylist()
        assert len(rows) == len(truth) > 20
        assert all(r["id"] == r["chunk_id"] and r["metadata"] == truth[r["chunk_id"]] for r in rows)
        struct = table.schema.field("metadata").type
        assert [f.name for f in struct] == list(METADATA_FIELDS)
        assert not [f for f in struct if f.type.num_fields]  # no list/struct inside: LlamaIndex's to_json


def test_migration_adds_two_column_files_and_rewrites_no_vector(project: Path, tmp_path: Path, capsys) -> None:
    import lance

    fresh = sink.connect(uri(project)).open_table(FRESH)
    dest = tmp_path / "db"
    old_rows = fresh.to_arrow().drop_columns(NEWER_COLUMNS)
    table = sink.connect(str(dest)).create_table("chunks", old_rows)
    ds = lance.dataset(str(dest / "chunks.lance"))
    before = {f.fragment_id: {d.path: list(d.fields) for d in f.data_files()} for f in ds.get_fragments()}
    version = table.version
    assert cli.main(["migrate", "--uri", str(dest)]) == 0
    assert capsys.readouterr().out.strip() == f"table 'chunks': added {', '.join(NEWER_COLUMNS)}"
    ds = lance.dataset(str(dest / "chunks.lance"))
    assert ds.version == version + MIGRATION_STEPS  # one commit per step
    for frag in ds.get_fragments():
        files = {d.path: list(d.fields) for d in frag.data_files()}
        # the old files are kept as they were (vectors included) ...
        assert {p: files[p] for p in before[frag.fragment_id]} == before[frag.fragment_id]
        new = [fields for p, fields in files.items() if p not in before[frag.fragment_id]]
        # ... and one new file per fragment holds the computed columns (the struct and its children); the
        # all-null columns of the later steps add no file (lance records them in the schema alone)
        assert len(new) == 1
        assert not {i for f in new for i in f} & {i for fields in before[frag.fragment_id].values() for i in fields}
    after = sink.connect(str(dest)).open_table("chunks")
    assert after.schema.names == sink.chunk_schema(384).names
    assert after.to_arrow().select(["id", "metadata", "vector"]).sort_by("id") == fresh.to_arrow().select(
        ["id", "metadata", "vector"]
    ).sort_by("id")
    assert cli.main(["migrate", "--uri", str(dest)]) == 0
    assert capsys.readouterr().out.strip() == "table 'chunks': added nothing (already current)"


def test_writers_migrating_one_table_at_once_make_one_migration(project: Path, tmp_path: Path) -> None:
    """Four writers open an old table and migrate it at the same moment: one commit lands, no error."""
    import threading

    import lance

    rows = sink.connect(uri(project)).open_table(FRESH).to_arrow().drop_columns(NEWER_COLUMNS)
    sink.connect(str(tmp_path)).create_table("chunks", rows)
    barrier, errors = threading.Barrier(4), []

    def writer() -> None:
        try:
            table = sink.connect(str(tmp_path)).open_table("chunks")
            barrier.wait()
            migrate(table, sink.chunk_schema(384))
        except Exception as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ds = lance.dataset(str(tmp_path / "chunks.lance"))
    steps = MIGRATION_STEPS  # each step's commit lands once: the other writers find it done
    assert ds.version == 1 + steps
    assert [len(f.data_files()) for f in ds.get_fragments()] == [2] * len(ds.get_fragments())
    assert sink.connect(str(tmp_path)).open_table("chunks").schema == sink.chunk_schema(384)


def test_a_migrated_table_rematerializes_incrementally(project: Path, chunker: LateChunker, tmp_path: Path) -> None:
    db = sink.connect(copy_table(project, OLD, tmp_path))
    table = sink.open_or_create(db, OLD, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    docs = DocumentStore.from_path(project / "documents").read_shard("f-g")
    same = materialize_partition(
        chunker, docs, "f-g", Sentences(max_tokens=128), chunk_table=table, rejected_table=rejected, run_id="r2"
    )
    assert (same.documents_skipped, same.documents_reencoded) == (len(docs), 0)
    changed = [d if d.doc_id != "glob" else type(d).from_text("glob", d.text + " Patterns match paths.") for d in docs]
    report = materialize_partition(
        chunker, changed, "f-g", Sentences(max_tokens=128), chunk_table=table, rejected_table=rejected, run_id="r3"
    )
    assert report.documents_reencoded == 1
    rows = table.to_arrow().to_pylist()
    assert all(r["id"] == r["chunk_id"] and r["metadata"] == {f: r[f] for f in METADATA_FIELDS} for r in rows)
    glob = [r for r in rows if r["doc_id"] == "glob"]
    assert {r["run_id"] for r in glob} == {"r3"} and glob[-1]["text"].endswith("Patterns match paths.")


# -- the query embedders ----------------------------------------------------------------------------


def test_query_embedders_are_embed_queries_and_sentence_transformers(chunker: LateChunker, minilm_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    lc, li = LangChainEmbeddings(chunker), LlamaIndexEmbedding(chunker)
    ours = chunker.embed_queries(QUERIES)
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(QUERIES, convert_to_numpy=True)
    for i, q in enumerate(QUERIES):
        for got in (lc.embed_query(q), li.get_query_embedding(q)):
            assert len(got) == chunker.embedding_dim
            assert np.abs(np.asarray(got) - ours[i]).max() <= 1e-6
            assert np.abs(np.asarray(got) - reference[i]).max() <= 1e-5
    docs = lc.embed_documents(QUERIES)
    assert np.abs(np.asarray(docs) - reference).max() <= 1e-5  # MiniLM: no prompts, so texts embed like queries
    assert np.abs(np.asarray(li.get_text_embedding_batch(QUERIES)) - np.asarray(docs)).max() == 0.0
    assert li.model_name == chunker.settings.model_name


@pytest.mark.parametrize("embedder", [LangChainEmbeddings, LlamaIndexEmbedding])
def test_an_embedder_closes_the_chunker_it_loaded_and_never_one_handed_to_it(
    embedder: type, chunker: LateChunker, minilm_dir: Path
) -> None:
    """The one rule of both embedders' ``close()`` and ``with`` block (``clients.vectors.OwnedChunker``):
    a model directory's chunker (the light engine) is shut down with the embedder, twice is safe; a
    chunker handed in stays open and keeps embedding."""
    with embedder(str(minilm_dir)) as emb:
        loaded = emb._chunker
        assert loaded is not chunker and loaded.engine is not None
    assert loaded.engine is None
    emb.close()  # again: nothing left to close
    with embedder(chunker) as emb:
        assert emb._chunker is chunker
    emb.close()
    assert chunker.engine is not None
    assert chunker.embed_queries(QUERIES[:1]).shape == (1, chunker.embedding_dim)


# -- LangChain --------------------------------------------------------------------------------------


def langchain_store(project: Path, chunker: LateChunker, name: str, **kw):
    import lancedb
    from langchain_community.vectorstores import LanceDB

    kw.setdefault("mode", "append")
    return LanceDB(
        connection=lancedb.connect(uri(project)), table_name=name, embedding=LangChainEmbeddings(chunker),
        distance="cosine", **kw,
    )  # fmt: skip


def test_langchain_top_hits_metadata_filters_and_cosine(project: Path, chunker: LateChunker, table_name: str) -> None:
    store = langchain_store(project, chunker, table_name)
    truth = row_metadata(project)
    for q in QUERIES:
        want = expected(chunker, project, q)
        got = store.similarity_search_with_score(q, k=3, metrics="cosine")
        assert [d.metadata["chunk_id"] for d, _ in got] == [h.chunk_id for h in want]
        assert [d.metadata for d, _ in got] == [truth[h.chunk_id] for h in want]
        assert [d.page_content for d, _ in got] == [h.text for h in want]
        assert np.allclose([s for _, s in got], [h.distance for h in want], atol=1e-6)
        rel = store.similarity_search_with_relevance_scores(q, k=3, metrics="cosine")
        assert np.allclose([s for _, s in rel], [1 - h.distance for h in want], atol=1e-6)
    q = "compress data"
    by_doc = store.similarity_search(q, k=3, filter={"doc_id": "gzip"}, prefilter=True, metrics="cosine")
    assert [d.metadata["chunk_id"] for d in by_doc] == [
        h.chunk_id for h in expected(chunker, project, q, where="doc_id = 'gzip'")
    ]
    by_part = store.similarity_search(q, k=3, filter={"partition": "b"}, prefilter=True, metrics="cosine")
    assert [d.metadata["chunk_id"] for d in by_part] == [
        h.chunk_id for h in expected(chunker, project, q, where="partition = 'b'")
    ]
    assert {d.metadata["doc_id"] for d in by_part} == {"bz2"}
    mmr = store.max_marginal_relevance_search(q, k=3, fetch_k=10)
    assert len(mmr) == 3 and all(d.metadata["chunk_id"] in truth for d in mmr)


def test_langchain_default_overwrite_replaces_the_table_and_append_refuses(
    project: Path, chunker: LateChunker, tmp_path: Path
) -> None:
    import lancedb

    rows = sink.connect(uri(project)).open_table(FRESH).count_rows()
    safe = langchain_store(project, chunker, FRESH)  # mode="append", as docs/querying.md says
    with pytest.raises(Exception):  # noqa: B017 - LanceDB's schema error: the rows lack the pipeline's columns
        safe.add_texts(["a text of the application"])
    assert sink.connect(uri(project)).open_table(FRESH).count_rows() == rows
    copy = copy_table(project, FRESH, tmp_path)
    from langchain_community.vectorstores import LanceDB

    default = LanceDB(connection=lancedb.connect(copy), table_name=FRESH, embedding=LangChainEmbeddings(chunker))
    default.add_texts(["a text of the application"])
    assert sink.connect(copy).open_table(FRESH).count_rows() == 1  # the hazard docs/querying.md warns about


# -- LlamaIndex -------------------------------------------------------------------------------------


def llama_retriever(project: Path, chunker: LateChunker, name: str, **kw):
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.lancedb import LanceDBVectorStore

    store = LanceDBVectorStore(uri=uri(project), table_name=name, mode="append")
    index = VectorStoreIndex.from_vector_store(store, embed_model=LlamaIndexEmbedding(chunker))
    return index.as_retriever(similarity_top_k=3, **kw)


def test_llamaindex_top_hits_metadata_filters_and_cosine(project: Path, chunker: LateChunker, table_name: str) -> None:
    truth = row_metadata(project)
    retriever = llama_retriever(project, chunker, table_name)
    for q in QUERIES:
        want = expected(chunker, project, q)
        nodes = retriever.retrieve(q)
        assert [n.node.node_id for n in nodes] == [h.chunk_id for h in want]
        assert [n.node.metadata for n in nodes] == [truth[h.chunk_id] for h in want]
        assert [n.node.ref_doc_id for n in nodes] == [h.doc_id for h in want]
        assert [n.node.get_content() for n in nodes] == [h.text for h in want]
        # LlamaIndex's score is exp(-squared L2); on unit vectors squared L2 = 2 - 2 cos
        assert np.allclose([1 + math.log(n.score) / 2 for n in nodes], [1 - h.distance for h in want], atol=1e-5)
        assert all(n.node.to_json() for n in nodes)
    q = "compress data"
    for where in ("metadata.doc_id = 'gzip'", "metadata.partition = 'b'"):
        nodes = llama_retriever(project, chunker, table_name, vector_store_kwargs={"where": where}).retrieve(q)
        want = expected(chunker, project, q, where=where.removeprefix("metadata."))
        assert [n.node.node_id for n in nodes] == [h.chunk_id for h in want]


# -- hybrid search ----------------------------------------------------------------------------------


def test_hybrid_is_reciprocal_rank_fusion_of_the_two_searches_with_cosine_distances(
    project: Path, chunker: LateChunker
) -> None:
    table = sink.connect(uri(project)).open_table(FRESH)
    rows = table.to_arrow()
    vectors = np.asarray(rows.column("vector").to_pylist(), dtype=np.float64)  # shape: [n, 384]
    ids = rows.column("chunk_id").to_pylist()
    k = 5
    for q in QUERIES:
        [qv] = chunker.embed_queries([q])
        cos = vectors @ qv.astype(np.float64) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(qv))
        by_vector = [ids[i] for i in np.argsort(-cos, kind="stable")[:k]]
        by_text = [r["chunk_id"] for r in table.search(q, query_type="fts").limit(k).select(["chunk_id"]).to_list()]
        rrf: dict[str, float] = {}
        for ranked in (by_vector, by_text):
            for rank, cid in enumerate(ranked, 1):
                rrf[cid] = rrf.get(cid, 0.0) + 1 / (60 + rank)
        hits = search(q, chunker=chunker, uri=uri(project), table_name=FRESH, k=k, exact=True, mode="hybrid")
        assert len(hits) == k
        assert [h.relevance for h in hits] == sorted((h.relevance for h in hits), reverse=True)
        assert all(abs(h.relevance - rrf[h.chunk_id]) < 1e-6 for h in hits)
        assert sorted(rrf.values(), reverse=True)[k - 1] <= min(h.relevance for h in hits) + 1e-6
        assert all(abs(h.distance - (1 - cos[ids.index(h.chunk_id)])) < 1e-6 for h in hits)
    filtered = search("compress", chunker=chunker, uri=uri(project), mode="hybrid", where="partition = 'b'")
    assert filtered and {h.doc_id for h in filtered} == {"bz2"}


def test_hybrid_needs_the_full_text_index(project: Path, chunker: LateChunker, tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path))
    db.create_table(FRESH, sink.connect(uri(project)).open_table(FRESH).to_arrow())
    with pytest.raises(ValueError, match="no full-text index on text"):
        search("zlib", chunker=chunker, uri=str(tmp_path), mode="hybrid")
    with pytest.raises(ValueError, match="mode must be one of"):
        search("zlib", chunker=chunker, uri=str(tmp_path), mode="fts")


def test_cli_search_hybrid(project: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(cli, "_chunker", lambda args: contextlib.nullcontext(chunker))  # the module's engine
    assert cli.main(["search", "compress data with zlib", "--hybrid", "--exact", "-k", "3", "--uri", uri(project)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "rrf_score\tcosine_distance\tdoc_id\tchar_range\ttext"
    hits = search("compress data with zlib", chunker=chunker, uri=uri(project), k=3, exact=True, mode="hybrid")
    assert [line.split("\t")[2] for line in lines[1:]] == [h.doc_id for h in hits]
    assert [float(line.split("\t")[1]) for line in lines[1:]] == [round(h.distance, 4) for h in hits]


def test_evaluation_has_a_hybrid_row_where_the_table_has_the_full_text_index(
    project: Path, chunker: LateChunker, tmp_path: Path
) -> None:
    queries = [
        LabeledQuery("compress data with zlib", (Passage("zlib", None, 1),)),
        LabeledQuery("parse command-line options", (Passage("getopt", None, 2),)),
        LabeledQuery("gzip file compression", (Passage("gzip", None, 3),)),
    ]
    table = sink.connect(uri(project)).open_table(FRESH)
    report = evaluate_table(chunker, table, queries, k=10, bootstrap_samples=200)
    assert report.hybrid is not None and report.hybrid.shape == report.late.shape
    lines = report.markdown().splitlines()
    assert lines[5].startswith("| hybrid | ") and lines[6].startswith("| hybrid - late (95% CI) | ")
    assert "hybrid_ndcg_at_10" in report.floats() and "hybrid_delta_ndcg_at_10" in report.floats()
    # the hybrid ranks are search(mode="hybrid", exact=True)'s: MRR@10 from the first relevant doc_id
    for i, q in enumerate(queries):
        hits = search(q.query, chunker=chunker, uri=uri(project), k=10, exact=True, mode="hybrid")
        first = next((r for r, h in enumerate(hits, 1) if h.doc_id == q.passages[0].doc_id), None)
        assert report.hybrid[i, report.metrics.index("mrr@10")] == pytest.approx(1 / first if first else 0.0)
    db = sink.connect(str(tmp_path))
    plain = db.create_table(FRESH, table.to_arrow())
    assert evaluate_table(chunker, plain, queries, bootstrap_samples=200).hybrid is None
    with pytest.raises(ValueError, match="full-text index"):
        evaluate_table(chunker, plain, queries, hybrid=True)


# -- the examples of the README and docs/querying.md, run as written ------------------------------------


@pytest.fixture
def in_project(project: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in the project directory (``data/lancedb``), with ``LateChunker(model)`` handing back the
    module's engine on the same model (``tests.doc_examples.lend_engine``)."""
    lend_engine(monkeypatch, chunker)
    monkeypatch.chdir(project)
    yield


def test_readme_search_example(in_project: None, project: Path, chunker: LateChunker, capsys) -> None:
    """The README's query example: its hits are the top 3 by cosine, computed here in float64 over the
    stored vectors (not by ``search``), and it prints each one's distance, document and range."""
    scope: dict = {}
    exec(example("search.py"), scope)
    rows = sink.connect(uri(project)).open_table(README_TABLE).to_arrow()
    vectors = np.asarray(rows.column("vector").to_pylist(), dtype=np.float64)
    query = chunker.embed_queries([scope["QUERY"]])[0].astype(np.float64)
    cosine = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    top = np.argsort(-cosine, kind="stable")[:3]
    assert [h.chunk_id for h in scope["hits"]] == [rows.column("chunk_id")[int(i)].as_py() for i in top]
    assert np.allclose([h.distance for h in scope["hits"]], 1 - cosine[top], atol=1e-5)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    first = rows.slice(int(top[0]), 1).to_pylist()[0]
    assert out[0].split()[:2] == [f"{1 - cosine[top[0]]:.3f}", first["doc_id"]]
    assert f"({first['char_start']}, {first['char_end']})" in out[0]


def test_querying_guide_langchain_example(in_project: None, project: Path, chunker: LateChunker, capsys) -> None:
    scope: dict = {}
    exec(example("search_with_langchain.py"), scope)
    truth = row_metadata(project)
    want = expected(chunker, project, scope["QUERY"])
    assert [d.metadata["chunk_id"] for d, _ in scope["hits"]] == [h.chunk_id for h in want]
    assert [d.metadata for d, _ in scope["hits"]] == [truth[h.chunk_id] for h in want]
    assert np.allclose([s for _, s in scope["hits"]], [1 - h.distance for h in want], atol=1e-6)
    assert {d.metadata["doc_id"] for d in scope["in_doc"]} == {"zlib"}
    assert {d.metadata["partition"] for d in scope["in_partition"]} == {"f-g"}
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[1:] == [want[0].doc_id, str(want[0].char_range[0]), str(want[0].char_range[1])]


def test_querying_guide_llamaindex_example(in_project: None, project: Path, chunker: LateChunker, capsys) -> None:
    scope: dict = {}
    exec(example("llamaindex.py"), scope)
    want = expected(chunker, project, scope["QUERY"])
    assert [n.node.node_id for n in scope["nodes"]] == [h.chunk_id for h in want]
    assert all(n.node.metadata["doc_id"] == h.doc_id for n, h in zip(scope["nodes"], want))
    assert {n.node.metadata["doc_id"] for n in scope["in_doc"]} == {"zlib"}
    assert {n.node.metadata["partition"] for n in scope["in_partition"]} == {"f-g"}
    out = capsys.readouterr().out.splitlines()
    assert float(out[0].split()[0]) == pytest.approx(1 - want[0].distance, abs=1e-3)


def test_querying_guide_hybrid_example(in_project: None, project: Path, chunker: LateChunker) -> None:
    scope: dict = {}
    exec(example("hybrid.py"), scope)
    want = search(scope["QUERY"], chunker=chunker, uri=uri(project), k=5, mode="hybrid")
    assert [h.chunk_id for h in scope["hits"]] == [h.chunk_id for h in want]
