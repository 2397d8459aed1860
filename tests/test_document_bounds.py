"""Memory and time bounded per document (issue 47 kind 4; issue 49 item 3).

- A long text is tokenized in overlapping pieces (``core.tokenizer_call.encode_in_pieces``), joined
  where two pieces agree: the ids, offsets and special marks must equal one call's on the whole text,
  for the three tokenizer kinds the package meets (WordPiece: the shipped model's; SentencePiece
  Unigram with Metaspace and byte-level BPE: the replicas of ``tests/families.py``). The reference is
  the tokenizer's own single call, which the code under test does not use for these inputs.
- A file's text over ``ConversionLimits.max_text_chars`` is ``too_large``, converted or read as it is.
- A converter that hangs (:class:`HangingConverter`, registered for the made-up suffix ``.hang``
  through the store's ``converters=``) is killed in its host worker's child after
  ``convert_timeout_s``: that file alone is ``timed_out``; every other document is written as in a
  partition without it (real engine, real LanceDB, real host workers).
- With no ``host_workers`` setting, document files are converted in worker processes all the same
  (issue 49 item 3): a converter that kills its process rejects that one file; ``host_workers=0``
  still converts in the calling thread.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from transformers import AutoTokenizer

from latechunk_dagster import LateChunker, sink
from latechunk_dagster.core.chunking import FixedTokens
from latechunk_dagster.core.tokenizer_call import _one_call, encodings, joined_pieces, rust_backend
from latechunk_dagster.pipeline.config import conversion_workers
from latechunk_dagster.sources.converters import ConversionLimits, Converted
from latechunk_dagster.sources.files import DocumentStore
from tests.families import MULTILINGUAL, byte_bpe_tokenizer, unigram_tokenizer, wordpiece_tokenizer

#: Pieces of text the long documents are drawn from: several scripts, emoji, combining marks, a
#: special token written in the text, runs of spaces, line breaks, a long word, digits, punctuation.
FRAGMENTS = [
    *MULTILINGUAL,
    "Cafe\u0301 na\u00efve re\u0301sume\u0301 ",
    "[SEP] </s> <s> [CLS] ",
    "a   b    c ",
    "\n\n# Heading\n\n- item one\n- item two\r\n",
    "Donaudampfschifffahrtsgesellschaftskapitän ",
    "3.14159 2,718 1e-9 #42 @user https://example.org/a?b=c ",
    "👩‍👩‍👧 🏳️‍🌈 ",
    "\t\tindented\tcode(x) -> y; ",
]


def long_text(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    n = 0
    while n < chars:
        piece = rng.choice(FRAGMENTS)
        out.append(piece)
        n += len(piece)
    return "".join(out)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> dict[str, object]:
    out = {}
    for name, build in (
        ("wordpiece", lambda d: wordpiece_tokenizer(d, minilm_dir)),
        ("unigram", unigram_tokenizer),
        ("byte_bpe", byte_bpe_tokenizer),
    ):
        d = tmp_path_factory.mktemp(name)
        build(d)
        out[name] = AutoTokenizer.from_pretrained(str(d))
    return out


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "byte_bpe"])
@pytest.mark.parametrize("piece_chars", [256, 1000, 4096])
def test_pieces_join_to_one_call(tokenizers: dict[str, object], kind: str, piece_chars: int) -> None:
    tok = tokenizers[kind]
    # the Rust backend's call where it stands in for transformers' (rust_backend), transformers' own otherwise
    backend = rust_backend(tok) if piece_chars != 1000 else None
    for seed in range(3):
        text = "passage: " + long_text(seed, 20_000)
        whole = _one_call(tok, backend, [text])[0]
        joined = joined_pieces(tok, backend, text, piece_chars)
        assert joined is not None, f"{kind}: pieces of {piece_chars} did not agree on ordinary text"
        for got, want, what in zip(joined, whole, ("ids", "offsets", "special")):
            assert got.shape == want.shape, (kind, piece_chars, seed, what, got.shape, want.shape)
            assert np.array_equal(got, want), (kind, piece_chars, seed, what)


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe"])
def test_pieces_that_disagree_fall_back_to_one_call(tokenizers: dict[str, object], kind: str) -> None:
    """What cannot be cut where two pieces agree comes back from one call, not guessed: for WordPiece a
    word of 3,000 characters (one ``[UNK]`` whose range each piece sees cut), for byte-level BPE 3,000
    spaces (one token). (WordPiece drops spaces, so it joins there; BPE's merges over a run of ``x``
    repeat, so its pieces agree there: both still equal one call, asserted below.)"""
    tok = tokenizers[kind]
    word, spaces = "start " + "x" * 3000 + " end " * 300, "start" + " " * 3000 + "end " * 300
    for text in (word, spaces):
        whole = _one_call(tok, rust_backend(tok), [text])[0]
        joined = joined_pieces(tok, rust_backend(tok), text, 1000)
        if (text is word) == (kind == "wordpiece"):
            assert joined is None
        [got] = encodings(tok, [text], piece_chars=1000)
        for g, w in zip(got, whole):
            assert np.array_equal(g, w)


@dataclass(frozen=True)
class HangingConverter:
    """Reads ``.hang`` files as UTF-8 text; one whose text starts with ``hang`` never returns (a converter
    stuck in a loop). Module-level, so the host workers unpickle it."""

    name: ClassVar[str] = "hang"
    version: ClassVar[str] = "1"
    suffixes: ClassVar[tuple[str, ...]] = (".hang",)

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        if data.startswith(b"hang"):
            while True:
                time.sleep(1)
        return Converted(data.decode(), "")


@dataclass(frozen=True)
class CrashingConverter:
    """Reads ``.crash`` files as UTF-8 text; one whose text starts with ``crash`` kills its process (a
    fault in a converter's native library). Module-level, so the host workers unpickle it."""

    name: ClassVar[str] = "crash"
    version: ClassVar[str] = "1"
    suffixes: ClassVar[tuple[str, ...]] = (".crash",)

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        if data.startswith(b"crash"):
            os.kill(os.getpid(), signal.SIGKILL)
        return Converted(data.decode(), "")


def test_the_default_conversion_workers_leave_the_engine_its_cores() -> None:
    assert [conversion_workers(c, engine_on_cpu=False) for c in (1, 2, 4, 16, 64)] == [1, 1, 2, 8, 8]
    assert [conversion_workers(c, engine_on_cpu=True) for c in (1, 2, 8, 16)] == [1, 1, 2, 4]


def test_without_a_setting_document_files_convert_in_a_worker_and_a_crash_rejects_one_file(
    tmp_path: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from latechunk_dagster.pipeline import hostpool, materialize_partition
    from latechunk_dagster.pipeline.config import HOST_WORKERS_ENV

    monkeypatch.delenv(HOST_WORKERS_ENV, raising=False)
    shard = tmp_path / "store" / "s"
    shard.mkdir(parents=True)
    for k, text in enumerate(["Owls hunt at night.", "crash the converter", "Tea is steamed."]):
        (shard / f"{k}.crash").write_text(text)
    store = DocumentStore.from_path(tmp_path / "store", converters=[CrashingConverter()])
    db = sink.connect(str(tmp_path / "db"))
    chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    hostpool.shutdown_host_pools()
    report = materialize_partition(
        chunker, store.iter_shard("s", defer_conversion=True), "s", FixedTokens(16), chunk_table=chunks,
        rejected_table=rejected, run_id="default",
    )  # fmt: skip
    hostpool.shutdown_host_pools()
    assert report.rejected_reasons == {"unreadable_file": 1}
    [row] = rejected.to_arrow().to_pylist()
    assert row["doc_id"] == "s/1.crash"
    assert row["detail"] == f"{shard / '1.crash'}: converting it crashed the converter's process (exit code -9)"
    assert sorted(chunks.to_arrow().column("doc_id").to_pylist()) == ["s/0.crash", "s/2.crash"]


def test_a_text_over_max_text_chars_is_too_large_naming_the_limit(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "long.txt").write_text("word " * 300)  # 1,500 characters
    (tmp_path / "s" / "long.hang").write_text("text " * 300)
    (tmp_path / "s" / "short.txt").write_text("word " * 100)
    limits = ConversionLimits(max_text_chars=1000)
    store = DocumentStore.from_path(tmp_path, limits=limits, converters=[HangingConverter()])
    got = {d.doc_id: d for d in store.iter_shard("s")}
    assert got["s/short.txt"].text == "word " * 100
    for doc_id in ("s/long.txt", "s/long.hang"):
        assert got[doc_id].reason == "too_large", got[doc_id]
        assert got[doc_id].detail.endswith(
            "its text is 1,500 characters, over the limit of 1,000 "
            "(ConversionLimits.max_text_chars, or LATECHUNK_MAX_DOCUMENT_CHARS)"
        )


def test_a_hanging_converter_is_stopped_and_its_file_alone_timed_out(tmp_path: Path, chunker: LateChunker) -> None:
    from latechunk_dagster.pipeline import hostpool, materialize_partition

    shard = tmp_path / "store" / "s"
    shard.mkdir(parents=True)
    for k, text in enumerate(["Owls hunt at night.", "hang forever", "Tea is steamed.", "Rivers carry sand."]):
        (shard / f"{k}.hang").write_text(text)
    (shard / "4.txt").write_text("Glaciers carve valleys.")
    store = DocumentStore.from_path(
        tmp_path / "store", converters=[HangingConverter()], limits=ConversionLimits(convert_timeout_s=3)
    )
    tables = {}
    for run_id, workers, keep in (("reference", 0, lambda d: d != "s/1.hang"), ("bounded", 1, lambda d: True)):
        db = sink.connect(str(tmp_path / run_id))
        tables[run_id] = chunks, rejected = (
            sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim)),
            sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
        )
        items = (i for i in store.iter_shard("s", defer_conversion=True) if keep(i.doc_id))
        t0 = time.monotonic()
        report = materialize_partition(
            chunker, items, "s", FixedTokens(16), chunk_table=chunks, rejected_table=rejected, run_id=run_id,
            host_workers=workers,
        )  # fmt: skip
        seconds = time.monotonic() - t0
    hostpool.shutdown_host_pools()
    assert report.rejected == 1 and report.rejected_reasons == {"timed_out": 1}
    assert 3 <= seconds < 60
    [row] = tables["bounded"][1].to_arrow().to_pylist()
    assert (row["doc_id"], row["reason"]) == ("s/1.hang", "timed_out")
    where = str(shard / "1.hang")
    assert row["detail"] == (
        f"{where}: converting it took longer than the limit of 3 s and was stopped "
        "(ConversionLimits.convert_timeout_s, or LATECHUNK_CONVERT_TIMEOUT_S)"
    )
    columns = ["chunk_id", "doc_id", "text", "char_start", "char_end", "converter"]
    want, got = (tables[r][0].to_arrow().select(columns).sort_by("chunk_id") for r in ("reference", "bounded"))
    assert got.num_rows == 4 and got.equals(want)


def test_the_time_bound_worker_pool_is_closed_at_interpreter_exit(tmp_path: Path) -> None:
    """A bounded call from a thread other than the main one runs in ``core.timebound``'s worker pool;
    the process then exits with no "Exception ignored in: Pool.__del__" (ResourceWarning made an error,
    as CI's warning filters do)."""
    import subprocess
    import sys

    script = tmp_path / "bounded.py"
    script.write_text(
        "import threading\n"
        "from latechunk_dagster.core.timebound import call_with_time_limit\n"
        "if __name__ == '__main__':\n"
        "    out = []\n"
        "    t = threading.Thread(target=lambda: out.append(call_with_time_limit(abs, (-3,), 60.0)))\n"
        "    t.start(); t.join()\n"
        "    print(out)\n"
    )
    run = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert run.returncode == 0 and run.stdout.strip() == "[3]", run.stderr[-2000:]
    assert "Exception ignored" not in run.stderr and "ResourceWarning" not in run.stderr, run.stderr[-2000:]
