"""A partition as a bounded stream: same rows as one shot, atomic, bounded, bad rows alone.

Real engine (the shipped model), real LanceDB in temp dirs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.core.chunking import FixedTokens
from latechunk_dagster.pipeline import IN_FLIGHT_BATCHES, Progress, SystemicFailureError, materialize_partition
from latechunk_dagster.sources.files import Document, DocumentStore, RejectedRow

TOPICS = ["pumps", "owls", "tea", "harbours", "lighthouses", "glaciers", "violins", "bridges"]


def corpus(n: int = 24, tag: str = "") -> list[Document]:
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        sentences = [f"Note {j} on {topic}{tag}: item {i} is checked every {j + 2} days." for j in range(1 + i % 5)]
        docs.append(Document.from_text(f"doc{i:02d}", " ".join(sentences)))
    long_text = " ".join(f"Paragraph {k} explains how the heat exchanger of unit {k} is cleaned." for k in range(40))
    docs.append(Document.from_text("long", long_text))  # > 256 tokens: windows
    docs.append(Document.from_text("blank", "   \n"))  # rejected: empty_text
    return docs


def tables(tmp_path: Path, chunker: LateChunker) -> tuple:
    db = sink.connect(str(tmp_path / "db"))
    return (
        sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim)),
        sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
    )


def rows_of(table, partition: str = "p") -> pa.Table:
    return table.search().where(f"partition = '{partition}'").limit(None).to_arrow().sort_by("chunk_id")


def run(chunker, docs, tmp_path, strategy=None, **kw):
    chunks, rejected = kw.pop("tables", None) or tables(tmp_path, chunker)
    report = materialize_partition(
        chunker,
        docs,
        kw.pop("partition", "p"),
        strategy or Sentences(max_tokens=32),
        chunk_table=chunks,
        rejected_table=rejected,
        run_id=kw.pop("run_id", "r1"),
        **kw,
    )
    return report, chunks, rejected


def test_tiny_batches_equal_one_batch(chunker: LateChunker, tmp_path: Path) -> None:
    small, small_rows, _ = run(chunker, corpus(), tmp_path / "small", batch_tokens=40)
    big, big_rows, _ = run(chunker, corpus(), tmp_path / "big", batch_tokens=10**9)
    assert big.batches == 1 and small.batches >= 10
    a, b = rows_of(small_rows), rows_of(big_rows)
    assert a.num_rows == b.num_rows > 26
    for col in ("chunk_id", "doc_id", "chunk_index", "token_start", "token_end", "char_start", "char_end", "text"):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col
    va = np.array(a.column("vector").to_pylist(), np.float32)
    vb = np.array(b.column("vector").to_pylist(), np.float32)
    np.testing.assert_allclose(va, vb, atol=1e-6)
    assert small.documents == big.documents == 26 and small.rejected == big.rejected == 1
    assert small.windowed_documents == 1 and small.tokens_encoded == big.tokens_encoded > 0


def test_stream_equals_the_engine_called_directly(chunker: LateChunker, tmp_path: Path) -> None:
    docs = corpus(6)
    _, table, _ = run(chunker, docs, tmp_path, strategy=FixedTokens(16), batch_tokens=50)
    rows = rows_of(table).to_pylist()
    good = [d for d in docs if d.text.strip()]
    direct = chunker.chunk([d.text for d in good], FixedTokens(16), doc_ids=[d.doc_id for d in good])
    for doc, res in zip(good, direct):
        mine = sorted((r for r in rows if r["doc_id"] == doc.doc_id), key=lambda r: r["chunk_index"])
        assert [(r["token_start"], r["token_end"]) for r in mine] == [c.token_range for c in res.chunks]
        np.testing.assert_allclose(np.array([r["vector"] for r in mine]), res.vectors, atol=1e-6)
        assert all(r["doc_sha256"] == doc.sha256 and len(r["vector_config"]) == 32 for r in mine)


def failing_after(docs: list[Document], n: int) -> Iterator[Document]:
    for i, doc in enumerate(docs):
        if i == n:
            raise OSError("disk went away while reading the shard")
        yield doc


def test_failure_between_batches_keeps_the_old_rows_whole(chunker: LateChunker, tmp_path: Path) -> None:
    _, chunks, rejected = run(chunker, corpus(), tmp_path, batch_tokens=40)
    before, version = rows_of(chunks), chunks.version
    rejected_before = rejected.to_arrow()
    edited = corpus(tag=" (edited)")  # every document changed: all would be replaced
    with pytest.raises(OSError, match="disk went away"):
        run(chunker, failing_after(edited, 15), tmp_path, batch_tokens=40, tables=(chunks, rejected), run_id="r2")
    assert chunks.version == version
    after = rows_of(chunks)
    assert after.equals(before)  # the complete old rows, none of the 3+ batches already encoded
    assert rejected.to_arrow().equals(rejected_before)


def test_a_strategy_failing_from_midway_fails_the_partition_and_keeps_old_rows(
    chunker: LateChunker, tmp_path: Path
) -> None:
    """Issue 11 item 3: a systemic failure (every document from the 9th on) must not replace good rows."""

    class Explodes(Sentences):
        calls = 0

        def spans(self, text, tokens):  # type: ignore[no-untyped-def]
            Explodes.calls += 1
            if Explodes.calls > 8:
                raise RuntimeError("segmenter has no language 'pt'")
            return super().spans(text, tokens)

    _, chunks, rejected = run(chunker, corpus(), tmp_path, batch_tokens=40)
    before, version = rows_of(chunks), chunks.version
    with pytest.raises(SystemicFailureError, match=r"1[0-9] of 26 documents rejected .* 'strategy_failed'"):
        run(chunker, corpus(tag="!"), tmp_path, Explodes(max_tokens=32), batch_tokens=40, tables=(chunks, rejected))
    assert chunks.version == version and rows_of(chunks).equals(before)


def test_documents_in_flight_stay_bounded(chunker: LateChunker, tmp_path: Path) -> None:
    done = [0]
    peak = [0]

    def counting(docs: list[Document]) -> Iterator[Document]:
        for i, doc in enumerate(docs):
            peak[0] = max(peak[0], i + 1 - done[0])  # read, not yet written
            yield doc

    def progress(p: Progress) -> None:
        done[0] = p.documents_done

    docs = corpus(60)
    report, _, _ = run(chunker, counting(docs), tmp_path, batch_tokens=1, progress=progress, progress_interval=0)
    assert report.batches == len(docs)  # a budget of 1 token: one document per engine call
    # every batch is one document: the pipeline holds at most IN_FLIGHT_BATCHES of them, plus
    # the one the iterator is handing over
    assert 2 <= peak[0] <= IN_FLIGHT_BATCHES + 1, peak[0]


def test_progress_reports_documents_tokens_and_time_left(chunker: LateChunker, tmp_path: Path) -> None:
    seen: list[Progress] = []
    docs = corpus(10)
    report, _, _ = run(
        chunker,
        docs,
        tmp_path,
        batch_tokens=60,
        expected_documents=len(docs),
        progress=seen.append,
        progress_interval=0,
    )
    assert seen[-1].final and seen[-1].documents_done == len(docs) and seen[-1].tokens_done == report.tokens_encoded
    middle = [p for p in seen if not p.final and 0 < p.documents_done < len(docs)]
    assert middle and all(p.seconds_left is not None and p.seconds_left >= 0 for p in middle)
    assert "tokens/s" in middle[0].describe() and "s left" in middle[0].describe()


# ------------------------------------------------------------------------- bad rows (issue 11)


def test_one_bad_row_does_not_take_its_neighbours_down(chunker: LateChunker, tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    rows = [
        {"id": "x", "text": "Owls hunt at night.", "shard": "x"},
        {"id": "y", "text": None, "shard": "y"},
        {"id": "z", "text": "Green tea is steamed.", "shard": "z"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = DocumentStore.from_path(path)
    assert store.shards() == ["x", "y", "z"]
    chunks, rejected = tables(tmp_path, chunker)
    for shard in store.shards():
        run(chunker, store.iter_shard(shard), tmp_path, partition=shard, tables=(chunks, rejected))
    assert sorted(set(chunks.to_arrow().column("doc_id").to_pylist())) == ["x", "z"]
    [rej] = rejected.to_arrow().to_pylist()
    assert (rej["doc_id"], rej["partition"], rej["reason"]) == ("y", "y", "bad_text")
    assert f"{path.resolve()}: row 2: 'text' must be a string, got null" in rej["detail"]


def test_parquet_bad_rows_are_rejected_alone(chunker: LateChunker, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", None, "c", "a"], "text": ["Owls hunt.", "Tea.", None, "Dup."]}), path)
    store = DocumentStore.from_path(path)
    report, chunks, rejected = run(chunker, store.iter_shard("docs"), tmp_path, partition="docs")
    assert chunks.to_arrow().column("doc_id").unique().to_pylist() == ["a"]
    got = sorted((r["doc_id"], r["reason"]) for r in rejected.to_arrow().to_pylist())
    assert got == [("a", "duplicate_id"), ("c", "bad_text"), ("row 2", "missing_id")]
    assert report.rejected == 3 and report.documents == 4


def test_rows_all_rejected_for_one_reason_fail_the_partition_and_keep_old_rows(
    chunker: LateChunker, tmp_path: Path
) -> None:
    _, chunks, rejected = run(chunker, corpus(), tmp_path)
    before = rows_of(chunks)
    broken = [RejectedRow(d.doc_id, f"f: row {i}", "bad_text", "null text") for i, d in enumerate(corpus())]
    with pytest.raises(SystemicFailureError, match=r"partition 'p' failed: 26 of 26 .* 'bad_text'"):
        run(chunker, broken, tmp_path, tables=(chunks, rejected))
    assert rows_of(chunks).equals(before)


def test_an_unreadable_file_fails_its_partition(chunker: LateChunker, tmp_path: Path) -> None:
    _, chunks, rejected = run(chunker, corpus(4), tmp_path)
    before = rows_of(chunks)
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    store = DocumentStore.from_path(tmp_path / "bad.parquet")
    with pytest.raises(SystemicFailureError, match="unreadable_file"):
        run(chunker, store.iter_shard("bad"), tmp_path, tables=(chunks, rejected))
    assert rows_of(chunks).equals(before)


class Recording:
    """The real chunker, with the document tokens of each engine call written down."""

    def __init__(self, chunker: LateChunker) -> None:
        self._chunker = chunker
        self.calls: list[tuple[int, int]] = []  # (documents, document tokens) per engine call

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._chunker, name)

    def pool_results(self, encoded, **kw):  # type: ignore[no-untyped-def]
        results = self._chunker.pool_results(encoded, **kw)  # one per encode: the batch of one engine call
        self.calls.append((len(results), sum(len(r.token_ids) for r in results if hasattr(r, "token_ids"))))
        return results


def test_batches_keep_to_the_token_budget(chunker: LateChunker, tmp_path: Path) -> None:
    recording = Recording(chunker)
    docs = [d for d in corpus(40) if d.doc_id != "long"]
    report, _, _ = run(recording, docs, tmp_path, batch_tokens=120)  # type: ignore[arg-type]
    assert len(recording.calls) == report.batches >= 6
    assert all(tokens <= 120 for n, tokens in recording.calls if n > 1), recording.calls
    assert sum(t for _, t in recording.calls) == report.tokens_encoded


def test_the_token_estimate_tightens_after_a_batch(chunker: LateChunker) -> None:
    """The reader estimates tokens before tokenizing (chars x ratio + specials, ratio 1.0 at first: never
    under the budget); after observing encoded documents the ratio falls to what the text needs.
    (Tested directly: how many batches the reader forms before the first result returns is timing.)"""
    from latechunk_dagster.pipeline.run import TokenEstimate as _TokenEstimate

    docs = [d for d in corpus(12) if d.doc_id not in ("long", "blank")]
    results = chunker.chunk([d.text for d in docs], FixedTokens(chunk_size=64), doc_ids=[d.doc_id for d in docs])
    estimate = _TokenEstimate(specials=2)
    before = [estimate.estimate(d.text) for d in docs]
    estimate.observe(list(zip(docs, results)))
    after = [estimate.estimate(d.text) for d in docs]
    assert estimate.ratio < 0.5 and all(a < b for a, b in zip(after, before))
    # the estimate stays at or above the real count for most documents (ratio x 1.25 headroom)
    assert sum(a >= len(r.token_ids) for a, r in zip(after, results)) >= len(docs) * 0.75


def test_an_emptied_shard_keeps_the_partitions_rows(chunker: LateChunker, tmp_path: Path) -> None:
    """From a user trial: truncating a shard file to 0 bytes used to delete its partition quietly."""
    _, chunks, rejected = run(chunker, corpus(4), tmp_path)
    before = rows_of(chunks)
    with pytest.raises(SystemicFailureError, match=r"read 0 documents but the partition holds \d+"):
        run(chunker, [], tmp_path, tables=(chunks, rejected))
    assert rows_of(chunks).equals(before)


def test_the_heap_is_trimmed_once_enough_states_were_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.pipeline import memory

    trims: list[int] = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: trims.append(1) or True)
    freed = memory.FreedMemory(every=100)
    assert [freed.freed(n) for n in (40, 40, 40, 10, 200, 0)] == [False, False, True, False, True, False]
    assert len(trims) == 2 and freed.pending == 0
