"""Host worker processes give the rows of the in-process stream, and a dead worker fails its partition cleanly.

Real engine (the shipped model, in this process), real worker processes, real LanceDB in temp dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, sink
from latechunk_dagster.core.chunking import CharSpans, FixedTokens, MarkdownSections, Paragraphs, Sentences
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.pipeline import hostpool, materialize_partition
from latechunk_dagster.pipeline.accounting import DocumentSummary
from latechunk_dagster.pipeline.config import HOST_WORKERS_ENV, default_host_workers
from latechunk_dagster.pipeline.hostpool import TEST_WORKER_KILL_ENV, HostWorkerError, shutdown_host_pools
from latechunk_dagster.sources.files import Document

TOPICS = ["pumps", "owls", "tea", "harbours", "lighthouses", "glaciers"]


def corpus() -> list[Document]:
    docs = []
    for i in range(14):
        topic = TOPICS[i % len(TOPICS)]
        sentences = [f"Note {j} on {topic}: item {i} is checked every {j + 2} days." for j in range(1 + i % 4)]
        text = " ".join(sentences) if i % 3 else f"# Note on {topic}\n\n" + "\n\n".join(sentences)
        docs.append(Document.from_text(f"doc{i:02d}", text))
    # two documents longer than the 256-token engine: windows (contract section 5)
    for k, n in (("long-a", 40), ("long-b", 75)):
        text = " ".join(f"Paragraph {j} explains how the heat exchanger of unit {j} is cleaned." for j in range(n))
        docs.append(Document.from_text(k, text))
    docs.append(Document.from_text("blank", "   \n"))  # rejected: empty_text
    return docs


def materialize(chunker: LateChunker, docs: list[Document], path: Path, strategy, **kw) -> tuple:  # noqa: ANN001
    db = sink.connect(str(path))
    chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    report = materialize_partition(
        chunker, docs, "p", strategy, chunk_table=chunks, rejected_table=rejected, run_id="r", batch_tokens=400, **kw
    )
    return report, chunks, rejected


def rows_of(table, key: str = "chunk_id") -> pa.Table:  # noqa: ANN001
    return table.to_arrow().sort_by(key)


@pytest.fixture(autouse=True)
def fresh_pools() -> Iterator[None]:
    shutdown_host_pools()
    yield
    shutdown_host_pools()


STRATEGIES = [
    FixedTokens(16),
    Sentences(max_tokens=32),
    Paragraphs(max_tokens=48),
    MarkdownSections(max_tokens=48),
    CharSpans(ranges=((0, 4), (5, 6))),  # fits the "Note ..." documents; the long ones are rejected alone
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_worker_processes_give_the_rows_of_the_in_process_stream(
    chunker: LateChunker, tmp_path: Path, strategy
) -> None:  # noqa: ANN001
    docs = corpus()
    if isinstance(strategy, CharSpans):  # the same ranges for every document: those they fit, two that they do not
        docs = [d for d in docs if not d.text.startswith("#")]
    one, chunks_one, rejected_one = materialize(chunker, docs, tmp_path / "threads", strategy, host_workers=0)
    two, chunks_two, rejected_two = materialize(chunker, docs, tmp_path / "workers", strategy, host_workers=2)
    a, b = rows_of(chunks_one), rows_of(chunks_two)
    assert a.num_rows == b.num_rows > 0 and one.batches > 2
    assert one.windowed_documents == two.windowed_documents == (0 if isinstance(strategy, CharSpans) else 2)
    for col in ("chunk_id", "doc_id", "chunk_index", "token_start", "token_end", "char_start", "char_end", "text"):
        assert a.column(col).equals(b.column(col)), col
    va = np.stack(a.column("vector").to_numpy(zero_copy_only=False))
    vb = np.stack(b.column("vector").to_numpy(zero_copy_only=False))
    assert np.abs(va - vb).max() < 1e-6
    for field in ("tokens_encoded", "window_tokens", "windows", "chunks_written", "rejected", "rejected_reasons"):
        assert getattr(one, field) == getattr(two, field), field
    ra, rb = rows_of(rejected_one, "rejection_id"), rows_of(rejected_two, "rejection_id")
    assert ra.column("rejection_id").equals(rb.column("rejection_id"))
    assert ra.column("detail").equals(rb.column("detail"))  # the documents' errors crossed the process boundary whole


def test_a_worker_that_dies_mid_partition_fails_it_and_leaves_the_old_rows(
    chunker: LateChunker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = corpus()
    strategy = Sentences(max_tokens=32)
    _, chunks, rejected = materialize(chunker, docs, tmp_path, strategy, host_workers=0)
    before, version = rows_of(chunks), chunks.version
    monkeypatch.setenv(TEST_WORKER_KILL_ENV, "finish")  # each worker SIGKILLs itself on its 2nd finish
    pool = hostpool.host_pool(chunker, 2)  # the pool the call will use, started with the hook set
    changed = [Document.from_text(d.doc_id, d.text + " Changed.") if d.text.strip() else d for d in docs]
    # the error names what the worker died on: a batch, by its documents
    with pytest.raises(HostWorkerError, match=r"died \(exit code -9\) while finishing a batch of \d+ documents \('"):
        materialize_partition(
            chunker,
            changed,
            "p",
            strategy,
            chunk_table=chunks,
            rejected_table=rejected,
            run_id="r2",
            batch_tokens=400,
            host_workers=2,
        )
    assert chunks.version == version and rows_of(chunks).equals(before)
    assert pool.broken is not None and pool.closed
    assert pool.made and not [n for n in pool.made if Path("/dev/shm", n.lstrip("/")).exists()]  # none left behind
    monkeypatch.delenv(TEST_WORKER_KILL_ENV)
    shutdown_host_pools()
    report = materialize_partition(
        chunker, changed, "p", strategy, chunk_table=chunks, rejected_table=rejected, run_id="r3", host_workers=2
    )
    assert report.documents_reencoded == len(docs) and rows_of(chunks).num_rows == before.num_rows


def test_document_errors_and_summaries_cross_the_process_boundary() -> None:
    import pickle

    from latechunk_dagster.core.errors import StrategyTimeoutError

    err = StrategyTimeoutError(3, "doc-3", "took too long")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is StrategyTimeoutError
    assert (back.index, back.doc_id, back.detail) == (3, "doc-3", "took too long")
    assert str(back) == str(err) and isinstance(back, DocumentError)
    assert pickle.loads(pickle.dumps(DocumentSummary(10, 2, "token_states"))) == DocumentSummary(10, 2, "token_states")


def test_host_workers_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_WORKERS_ENV, "3")
    assert default_host_workers() == 3
    monkeypatch.setenv(HOST_WORKERS_ENV, "-1")
    with pytest.raises(ValueError, match=HOST_WORKERS_ENV):
        default_host_workers()
    monkeypatch.delenv(HOST_WORKERS_ENV)
    assert default_host_workers() == 0  # whatever the machine: workers are opted into


def test_a_changed_chunker_setting_reaches_the_workers(chunker: LateChunker, tmp_path: Path) -> None:
    docs = corpus()
    first = hostpool.host_pool(chunker, 1)
    assert hostpool.host_pool(chunker, 1) is first  # kept across calls
    length = chunker.window_length
    chunker.window_length = 64  # a setting the settings (and the rows' vector_config) follow
    try:
        threads, _, _ = materialize(chunker, docs, tmp_path / "threads", Sentences(max_tokens=32), host_workers=0)
        report, _, _ = materialize(chunker, docs, tmp_path / "workers", Sentences(max_tokens=32), host_workers=1)
        assert hostpool.host_pool(chunker, 1) is not first and first.closed
        # the workers planned 64-token windows, as the threads did (long-a and long-b: 10+ and 19+ each)
        assert (report.windows, report.window_tokens) == (threads.windows, threads.window_tokens)
        assert report.windows >= len(docs) - 3 + 10 + 19
    finally:
        chunker.window_length = length


def test_a_strategy_the_workers_cannot_take_is_refused_by_name_or_kept_in_process(
    chunker: LateChunker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Local(Sentences):  # defined in a function: pickle cannot name it
        pass

    docs = corpus()[:4]
    with pytest.raises(ValueError, match="host_workers=2: the strategy .* cannot be pickled"):
        materialize(chunker, docs, tmp_path / "a", Local(max_tokens=32), host_workers=2)
    monkeypatch.setenv(HOST_WORKERS_ENV, "2")  # the default, set by the environment: kept in process, said
    report, _, _ = materialize(chunker, docs, tmp_path / "b", Local(max_tokens=32))
    assert report.chunks_written > 0 and "host work stays in this process" in caplog.text
