"""Issue 27, items 12-15: query text, the store filters of docs/querying.md, the index refresh beside a writer,
``read_consistency_interval_s``.

* 12: a query holding a lone surrogate (a byte that is not UTF-8 on the command line, half an emoji
  from a JavaScript client) is refused in one line naming the character, by ``latechunk search``,
  ``search()``, both client embedders, an evaluation built in code and a query file.
* 13: docs/querying.md's LangChain and LlamaIndex recipes, run as written on a table holding
  ``O'Brien notes.txt``: exactly that document, and nothing for a crafted id.
* 14: ``refresh_indexes`` while another connection commits partitions (a real LanceDB commit
  conflict on the compaction) succeeds and loses no row.
* 15: ``read_consistency_interval_s`` out of range is refused naming the setting (the Airflow
  connection's side is in ``tests/test_airflow_provider.py``).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import lancedb
import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import FixedTokens, LateChunker, sink
from latechunk_dagster.clients import LangChainEmbeddings, LlamaIndexEmbedding
from latechunk_dagster.clients.vectors import query_vectors
from latechunk_dagster.core.errors import InvalidQueryError
from latechunk_dagster.evaluation import LabeledQuery, Passage, QueryFileError, evaluate_table, read_queries
from latechunk_dagster.integration.resources import LanceDBResource
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.indexing import refresh_indexes
from latechunk_dagster.sink.queries import has_fts_index
from latechunk_dagster.sink.search import search
from latechunk_dagster.sink.writes import replace_partition
from latechunk_dagster.sources.files import Document
from tests.doc_examples import example, lend_engine
from tests.test_cli import run_cli

warnings.filterwarnings("ignore", message=".*validate_default.*")  # pydantic, on importing llama_index

APOSTROPHE = "O'Brien notes.txt"
DOCS = {
    APOSTROPHE: "Notes of Mr O'Brien on the harbour pumps. The pumps compress data with zlib before the upload.",
    "notes.txt": "Plain notes on the harbour pumps. Data is compressed with zlib before it is sent.",
    "Brien.txt": "Brien keeps the owls. The owls are fed twice a day in the old barn by the harbour.",
    "x": "A document whose id is the start of a crafted filter value. It is about tea and glaciers.",
}
#: A filter value that, pasted between quotes unescaped, matches every other document.
CRAFTED = "x' OR doc_id != 'x"
HALF_EMOJI = "harbour pumps \ud83d"  # the high half of U+1F642, as a UTF-16 client may cut it


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, chunker: LateChunker) -> Path:
    """``data/lancedb`` with a ``chunks`` table written by the pipeline from :data:`DOCS`, in the
    partition the guide's examples filter on (``f-g``), and a copy of it named as the table those
    examples read (``make demo``'s ``chunks_sentences128``)."""
    root = tmp_path_factory.mktemp("faults")
    settings = LanceDBSettings(uri=str(root / "data" / "lancedb"))
    chunks = settings.chunk_table(sink.CHUNK_TABLE, chunker.embedding_dim)
    materialize_partition(
        chunker, [Document.from_text(k, v) for k, v in DOCS.items()], "f-g", FixedTokens(chunk_size=12),
        chunk_table=chunks, rejected_table=settings.rejected_table(sink.REJECTED_TABLE), run_id="r1",
    )  # fmt: skip
    settings.connect().create_table("chunks_sentences128", chunks.to_arrow())
    return root


def uri(project: Path) -> str:
    return str(project / "data" / "lancedb")


def chunk_counts(project: Path) -> dict[str, int]:
    """doc_id -> its number of chunk rows, read from the table."""
    ids = sink.connect(uri(project)).open_table(sink.CHUNK_TABLE).to_arrow().column("doc_id").to_pylist()
    return {d: ids.count(d) for d in set(ids)}


# -- 12. a query that is not valid Unicode --------------------------------------------------------------


def test_cli_search_names_a_byte_that_is_not_utf8_in_one_line_before_the_model_loads(tmp_path: Path) -> None:
    """``latechunk search caf<0xE9>``: Python gives argv's undecodable byte as U+DCE9; the tokenizer
    raised a 25-line TypeError. ``--model`` names no model: the check must come before it loads."""
    db = tmp_path / "db"
    lancedb.connect(str(db)).create_table(sink.CHUNK_TABLE, schema=sink.chunk_schema(384))
    args = ["search", b"caf\xe9 pumps", "--uri", str(db), "--model", str(tmp_path / "no-model")]
    out = run_cli(args, tmp_path / "home")  # type: ignore[arg-type]  # bytes: a raw argv entry
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "latechunk search: error: query 'caf\\udce9 pumps': not valid UTF-8: byte 0xe9 at character 3 "
        "(typed in a terminal set to Latin-1 or another legacy encoding? send the query as UTF-8)"
    )


def test_search_and_both_embedders_name_a_lone_surrogate(project: Path, chunker: LateChunker) -> None:
    message = "query 'harbour pumps \\ud83d': not valid Unicode: a lone surrogate U+D83D at character 14"
    with pytest.raises(InvalidQueryError) as info:
        search(HALF_EMOJI, chunker=chunker, uri=uri(project))
    assert str(info.value) == message and isinstance(info.value, ValueError)
    with pytest.raises(InvalidQueryError, match=re.escape(message)):
        search(HALF_EMOJI, chunker=chunker, uri=uri(project), mode="hybrid")
    with pytest.raises(InvalidQueryError, match=re.escape(message)):
        LangChainEmbeddings(chunker).embed_query(HALF_EMOJI)
    with pytest.raises(InvalidQueryError, match=re.escape(message)):
        LlamaIndexEmbedding(chunker).get_query_embedding(HALF_EMOJI)
    with pytest.raises(InvalidQueryError, match=re.escape("query 1 'bad \\udce9'")):
        query_vectors(chunker, ["harbour pumps", "bad \udce9"])
    # a whole emoji is valid text: the same query with both halves is searched
    hits = search("harbour pumps \U0001f642", chunker=chunker, uri=uri(project), k=2)
    assert len(hits) == 2 and {h.doc_id for h in hits} <= set(DOCS)


def test_client_embed_documents_names_the_text_and_the_character(chunker: LateChunker) -> None:
    """embed_documents embeds texts as documents: the document rule, naming the text's index and character."""
    texts = ["harbour pumps", "owls \ud800 barn"]
    why = r"1 of 2 texts .*'1' \(index 1\): not valid Unicode: a lone surrogate U\+D800 at character 5"
    with pytest.raises(ValueError, match=why):
        LangChainEmbeddings(chunker).embed_documents(texts)
    with pytest.raises(ValueError, match=r"a lone surrogate U\+D800 at character 5"):
        LlamaIndexEmbedding(chunker).get_text_embedding_batch(texts)


def test_evaluation_queries_name_a_lone_surrogate(project: Path, chunker: LateChunker, tmp_path: Path) -> None:
    table = sink.connect(uri(project)).open_table(sink.CHUNK_TABLE)
    queries = [LabeledQuery("harbour pumps", (Passage(APOSTROPHE),)), LabeledQuery(HALF_EMOJI, (Passage("x"),))]
    with pytest.raises(InvalidQueryError, match=r"lone surrogate U\+D83D at character 14"):
        evaluate_table(chunker, table, queries, k=3)
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"query": "harbour \ud83d", "doc_id": "x"}) + "\n")  # JSON holds "\\ud83d"
    why = r"line 1: 'query' 'harbour \\\\ud83d' is not valid Unicode: a lone surrogate U\+D83D at character 8"
    with pytest.raises(QueryFileError, match=why):
        read_queries(path)


# -- 13. the guide's store filters on an id with an apostrophe ------------------------------------------------


def example_for(name: str, doc_id: str) -> str:
    """The example ``name`` (docs/querying.md) with its ``DOC_ID = ...`` line set to ``doc_id`` (nothing else
    changed)."""
    code, n = re.subn(r"^DOC_ID = .*$", f"DOC_ID = {doc_id!r}", example(name), flags=re.M)
    assert n == 1, f"the example {name!r} has no DOC_ID line"
    return code


@pytest.fixture
def in_project(project: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in the project directory, ``LateChunker(model)`` handing back the module's engine
    (``tests.doc_examples.lend_engine``, as tests/test_clients.py's example tests)."""
    lend_engine(monkeypatch, chunker)
    monkeypatch.chdir(project)
    yield


def test_guide_langchain_filter_matches_exactly_an_id_with_an_apostrophe(
    in_project: None, project: Path, capsys
) -> None:
    counts = chunk_counts(project)
    assert counts[APOSTROPHE] >= 2 and len(counts) == len(DOCS)
    scope: dict = {}
    crafted: dict = {}
    exec(example_for("search_with_langchain.py", APOSTROPHE), scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # LangChain's "No results found for the query."
        exec(example_for("search_with_langchain.py", CRAFTED), crafted)
    assert [d.metadata["doc_id"] for d in scope["in_doc"]] == [APOSTROPHE] * min(3, counts[APOSTROPHE])
    assert {d.metadata["doc_id"] for d in scope["in_partition"]} <= set(DOCS)
    assert crafted["in_doc"] == []
    # why the guide says so: langchain-community pastes a dict filter's value between quotes as it is
    store, search_kw = scope["store"], scope["search"]
    with pytest.raises(ValueError, match="invalid SQL predicate: Unterminated string literal"):
        store.similarity_search("pumps", filter={"doc_id": APOSTROPHE}, **search_kw)
    leaked = store.similarity_search("pumps", filter={"doc_id": CRAFTED}, **{**search_kw, "k": 100})
    assert {d.metadata["doc_id"] for d in leaked} == set(DOCS)


def test_guide_llamaindex_filter_matches_exactly_an_id_with_an_apostrophe(
    in_project: None, project: Path, capsys
) -> None:
    counts = chunk_counts(project)
    scope: dict = {}
    exec(example_for("llamaindex.py", APOSTROPHE), scope)
    assert [n.node.metadata["doc_id"] for n in scope["in_doc"]] == [APOSTROPHE] * min(3, counts[APOSTROPHE])
    crafted: dict = {}
    with pytest.raises(Warning, match="query results are empty"):  # how LlamaIndex's store says "nothing"
        exec(example_for("llamaindex.py", CRAFTED), crafted)
    assert "nodes" in crafted and "in_doc" not in crafted  # it was the filter line that found nothing


# -- 14. the index refresh beside a partition writer ----------------------------------------------------------

PARTITIONS = [f"p{i:02d}" for i in range(40)]
ROWS = 20
DIM = 8


def partition_rows(partition: str, version: str) -> pa.Table:
    """``ROWS`` rows of ``partition`` (what ``refresh_indexes`` indexes: chunk_id, doc_id, partition, text, vector)."""
    rng = np.random.default_rng(sum(map(ord, partition + version)))
    vectors = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    return pa.table(
        {
            "chunk_id": [f"{partition}-{i}" for i in range(ROWS)],
            "doc_id": [f"{partition}-d{i // 5}" for i in range(ROWS)],
            "partition": [partition] * ROWS,
            "text": [f"note {i} of {partition}, {version}" for i in range(ROWS)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
        }
    )


class _Conflicts(logging.Handler):
    """Records the retry warnings of ``latechunk_dagster.sink.retry``; signals the refresh's first one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.messages.append(message)
        if not message.startswith("replace partition"):  # the refresh's commit lost, not the writer's
            self.seen.set()


def test_index_refresh_retries_when_a_partition_commit_lands_during_compaction(tmp_path: Path) -> None:
    """One fragment per partition (each partition committed on its own, as runs do). A second
    connection rewrites the partitions one after another (``replace_partition``, the package's own
    partition commit: an Update of the fragments the compaction rewrites) until the refresh's
    compaction has lost to one of them (LanceDB: "Retryable commit conflict ... preempted by
    concurrent transaction Update"); before the fix that error failed the refresh."""
    table = lancedb.connect(str(tmp_path)).create_table("t", partition_rows(PARTITIONS[0], "v0"))
    for p in PARTITIONS[1:]:
        table.add(partition_rows(p, "v0"))
    writer_table = lancedb.connect(str(tmp_path)).open_table("t")
    conflicts = _Conflicts()
    retry_log = logging.getLogger("latechunk_dagster.sink.retry")
    retry_log.addHandler(conflicts)
    rewritten: list[str] = []

    def writer() -> None:
        for p in PARTITIONS:
            if conflicts.seen.is_set():
                return
            replace_partition(writer_table, "chunk_id", p, partition_rows(p, "v1"))
            rewritten.append(p)

    thread = threading.Thread(target=writer)
    try:
        thread.start()
        report = refresh_indexes(table)
    finally:
        thread.join()
        retry_log.removeHandler(conflicts)
    assert any("compaction of 't': commit conflict (attempt 1 of" in m for m in conflicts.messages), conflicts.messages
    assert report["rows"] == len(PARTITIONS) * ROWS and report["fts_index"] == "text"
    latest = lancedb.connect(str(tmp_path)).open_table("t")
    assert latest.version >= report["version"] and has_fts_index(latest)
    rows = latest.to_arrow()
    assert sorted(rows.column("chunk_id").to_pylist()) == sorted(f"{p}-{i}" for p in PARTITIONS for i in range(ROWS))
    texts = dict(zip(rows.column("chunk_id").to_pylist(), rows.column("text").to_pylist()))
    assert rewritten and all(texts[f"{p}-0"].endswith(", v1") for p in rewritten)
    assert all(texts[f"{p}-0"].endswith(", v0") for p in PARTITIONS if p not in rewritten)


# -- 15. read_consistency_interval_s out of range ---------------------------------------------------------------

BAD_INTERVALS = [-1, math.nan, math.inf, "five", True]


@pytest.mark.parametrize("value", BAD_INTERVALS, ids=repr)
def test_read_consistency_interval_out_of_range_is_refused_naming_the_setting(value: object, tmp_path: Path) -> None:
    why = "read_consistency_interval_s must be a finite number of seconds >= 0 (0: every read; unset: never)"
    with pytest.raises(ValueError, match=re.escape(f"LanceDB: {why}, got {value!r}")):
        LanceDBSettings(uri=str(tmp_path), read_consistency_interval_s=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(f"LanceDBResource: {why}, got {value!r}")):
        LanceDBResource(uri=str(tmp_path), read_consistency_interval_s=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "seconds"), [(0, 0.0), (2.5, 2.5), ("2.5", 2.5), (None, None)])
def test_read_consistency_interval_in_range_reaches_lancedb(
    value: object, seconds: float | None, tmp_path: Path
) -> None:
    settings = LanceDBResource(uri=str(tmp_path), read_consistency_interval_s=value).settings()  # type: ignore[arg-type]
    assert settings.read_consistency_interval_s == seconds
    table = settings.chunk_table("chunks", 4)  # a real table call: a negative interval panicked here
    assert table.count_rows() == 0


def test_dagster_run_with_a_negative_interval_fails_at_resource_init_naming_the_field(tmp_path: Path) -> None:
    """Run config read at the run's start: the resource is refused before any table call (which panicked)."""
    touched: list[str] = []

    @dg.asset
    def tables(db: LanceDBResource) -> None:
        touched.append(db.uri)
        db.chunk_table("chunks", 4)

    result = dg.materialize(
        [tables],
        resources={"db": LanceDBResource.configure_at_launch()},
        run_config={"resources": {"db": {"config": {"uri": str(tmp_path), "read_consistency_interval_s": -1}}}},
        raise_on_error=False,
    )
    assert not result.success and touched == []
    failures = [e for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE" or e.is_failure]
    text = " ".join(str(e.event_specific_data) for e in failures)
    assert "LanceDBResource: read_consistency_interval_s must be a finite number of seconds >= 0" in text
    assert "got -1" in text


# -- 15, the same fault kind: the vLLM server's numeric settings ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("timeout_s", -1, "a finite number of seconds > 0"),
        ("timeout_s", math.nan, "a finite number of seconds > 0"),
        ("backoff_s", -0.5, "a finite number of seconds >= 0"),
        ("retries", -1, "an integer >= 0"),
        ("retries", 2.5, "an integer >= 0"),
        ("max_in_flight", 0, "an integer >= 1"),
        ("max_inputs_per_request", "five", "an integer >= 1"),
        ("max_tokens_per_request", True, "an integer >= 1"),
    ],
)
def test_server_settings_out_of_range_are_refused_naming_the_setting(name: str, value: object, rule: str) -> None:
    """A negative backoff failed only at the first retry (time.sleep), retries=-1 sent no request,
    max_inputs_per_request=0 was quietly made 1, "five" named no setting."""
    from latechunk_dagster.core.engines.vllm_server import ServerSettings
    from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

    with pytest.raises(ValueError, match=re.escape(f"ServerSettings: {name} must be {rule}, got {value!r}")):
        ServerSettings(**{name: value})
    with pytest.raises(ValueError, match=re.escape(f"VLLMServerEngineResource: {name} must be {rule}, got {value!r}")):
        VLLMServerEngineResource(base_url="http://127.0.0.1:9", model="m", **{name: value})


def test_server_settings_in_range_keep_their_types() -> None:
    from latechunk_dagster.core.engines.vllm_server import ServerSettings
    from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

    settings = ServerSettings(max_in_flight="8", timeout_s=30, retries=2.0, backoff_s=0)  # type: ignore[arg-type]
    assert (settings.max_in_flight, settings.timeout_s, settings.retries, settings.backoff_s) == (8, 30.0, 2, 0.0)
    assert isinstance(settings.retries, int) and isinstance(settings.timeout_s, float)
    res = VLLMServerEngineResource(base_url="http://127.0.0.1:9", model="m", max_in_flight=2, timeout_s=30)
    assert res.server_settings() == ServerSettings(max_in_flight=2, timeout_s=30.0)
