"""Documents longer than the model: overlapping windows, no truncation (contract section 5)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import DocumentTooLongError, FixedTokens, LateChunker, Sentences, sink
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sources.files import Document
from tests.conftest import TEST_ENGINE_ARGS
from tests.families import windowed_states
from tests.reference import reference_head, reference_states

SENTENCE = "The pump of plant {i} was repaired by its maintenance team in spring. "


# First in the module on purpose: it starts an engine of its own, which vLLM allows only while no
# other in-process engine (the module's ``chunker``, created by the first test that asks for it) lives.
def test_the_recorded_dtype_is_the_one_the_engine_computes_in(minilm_dir) -> None:
    """``dtype="auto"`` is resolved by vLLM (float16 for a pooling model where the platform has it);
    the settings record what the weights are, not ``"auto"``. The weights' dtype is read from the
    engine's model itself (vLLM's ``collective_rpc``), not from the code under test."""
    args = {**TEST_ENGINE_ARGS, "dtype": "auto"}
    with LateChunker(minilm_dir, **args) as c:
        [weights] = c.engine.llm.collective_rpc(lambda worker: str(next(worker.model_runner.model.parameters()).dtype))
        assert c.settings.dtype != "auto"
        assert f"torch.{c.settings.dtype}" == weights


@contextmanager
def windows(chunker: LateChunker, length: int, overlap: int | None) -> Iterator[None]:
    old = chunker.window_length, chunker.window_overlap
    chunker.window_length, chunker.window_overlap = length, overlap
    try:
        yield
    finally:
        chunker.window_length, chunker.window_overlap = old


def text_of(n_sentences: int) -> str:
    return "".join(SENTENCE.format(i=i) for i in range(n_sentences)).strip()


def windowed_reference(model_dir, ids: list[int], length: int, overlap: int) -> np.ndarray:
    """Independent reference: [CLS] body [SEP] cut into windows, each run through transformers
    (the window rule of ``tests/families.windowed_states``)."""
    return windowed_states(lambda x: reference_states(model_dir, x), ids, 1, 1, length, overlap)


def check_against_reference(doc, model_dir, length: int, overlap: int) -> None:
    h = windowed_reference(model_dir, doc.token_ids, length, overlap)
    means = np.stack([h[s:e].mean(axis=0) for s, e in (c.token_range for c in doc.chunks)])
    np.testing.assert_allclose(doc.vectors, reference_head(model_dir, means), atol=1e-4)


def test_windowed_states_equal_an_independent_windowed_reference(chunker: LateChunker, minilm_dir) -> None:
    text = text_of(12)  # fits in 256 tokens, forced into windows of 48
    [single] = chunker.chunk([text], FixedTokens(1))
    with windows(chunker, 48, 12):
        [win] = chunker.chunk([text], FixedTokens(1))
        [win_s] = chunker.chunk([text], Sentences(max_tokens=40))
    assert win.windows > 1 and single.windows == 1
    assert [c.token_range for c in win.chunks] == [c.token_range for c in single.chunks]
    assert win.token_ids == single.token_ids
    check_against_reference(win, minilm_dir, 48, 12)
    check_against_reference(win_s, minilm_dir, 48, 12)
    # and windowing really changed the states (the reference is not just the single pass)
    assert np.abs(win.vectors - single.vectors).max() > 1e-3


@pytest.mark.parametrize("extra", [0, 1, "3w+1"])
def test_exact_boundaries_of_the_window_length(chunker: LateChunker, minilm_dir, extra) -> None:
    length, overlap = 64, 16
    width, stride = length - 2, length - 2 - overlap
    target = length + (width + 2 * stride + 1 - width if extra == "3w+1" else extra)
    words = ["pump"] * (target - 2)  # "pump" is one token
    text = " ".join(words)
    with windows(chunker, length, overlap):
        [doc] = chunker.chunk([text], FixedTokens(7))
    assert len(doc.token_ids) == target
    assert doc.windows == {0: 1, 1: 2, "3w+1": 4}[extra]
    check_against_reference(doc, minilm_dir, length, overlap)


def test_ten_times_the_model_length_is_never_truncated(chunker: LateChunker) -> None:
    text = text_of(200)
    [doc] = chunker.chunk([text], Sentences(max_tokens=60))
    n = len(doc.token_ids)
    assert n > 10 * chunker.max_model_len
    assert doc.windows >= 10
    pos = 0
    for c in doc.chunks:
        assert c.token_range[0] == pos
        pos = c.token_range[1]
    assert pos == n
    ranges = [c.char_range for c in doc.chunks]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(text)
    assert "".join(text[a:b] for a, b in ranges).replace(" ", "") == text.replace(" ", "")
    tok = chunker.tokenizer
    assert doc.token_ids.count(tok.cls_token_id) == 1 and doc.token_ids.count(tok.sep_token_id) == 1
    assert doc.token_ids[0] == tok.cls_token_id and doc.token_ids[-1] == tok.sep_token_id
    np.testing.assert_allclose(np.linalg.norm(doc.vectors, axis=1), 1.0, atol=1e-5)


# -- the overlap: one number, resolved once, recorded as used (issue 27, item 16) --------------------


def body_starts(doc_ids: list[int], windows: list[list[int]]) -> list[tuple[int, int]]:
    """``(start, end)`` in the document's token ids of each window's body (the window less its own
    [CLS] and [SEP]), found by searching the document for it (each body occurs exactly once)."""
    out = []
    for w in windows:
        body = w[1:-1]
        at = [k for k in range(len(doc_ids) - len(body) + 1) if doc_ids[k : k + len(body)] == body]
        assert len(at) == 1, "a window body must occur once in the document"
        out.append((at[0], at[0] + len(body)))
    return out


@pytest.mark.parametrize(("length", "overlap"), [(None, None), (64, None), (64, 5)])
def test_the_recorded_overlap_is_the_number_of_tokens_two_windows_share(
    chunker: LateChunker, length: int | None, overlap: int | None
) -> None:
    text = text_of(60)
    with windows(chunker, length or chunker.window_length, overlap):
        prepared = chunker.prepare([text], FixedTokens(16))
        recorded = chunker.settings.window_overlap
    [(_, tokens, _, plan)] = prepared.state_jobs
    ids = tokens.token_ids
    tok = chunker.tokenizer
    assert all(w[0] == tok.cls_token_id and w[-1] == tok.sep_token_id for w in plan.windows)
    ranges = body_starts(ids, plan.windows)
    shared = [end - start for (_, end), (start, _) in zip(ranges, ranges[1:])]
    assert len(shared) >= 2
    # every pair but the last (which ends at the document's end) shares exactly the recorded number
    assert set(shared[:-1]) == {recorded} and shared[-1] >= recorded
    # the windows cover the document's body in order
    assert ranges[0][0] == 1 and ranges[-1][1] == len(ids) - 1
    # the default is an eighth of the window length (README, docs/contract.md): 32 of 256, 8 of 64
    assert recorded == {(None, None): 32, (64, None): 8, (64, 5): 5}[(length, overlap)]


def test_an_explicit_overlap_equal_to_the_default_gives_the_same_settings_and_vectors(
    chunker: LateChunker, minilm_dir
) -> None:
    # chunkers built by the public constructor on the module's engine (one in-process engine per
    # process); not closed here, since closing one closes the shared engine
    assert chunker.window_overlap is None and chunker.window_length == 256
    text = text_of(40)
    [default] = chunker.chunk([text], FixedTokens(16))
    assert default.windows >= 3
    explicit = LateChunker(minilm_dir, window_overlap=32, engine=chunker.engine)
    assert explicit.settings == chunker.settings
    [same] = explicit.chunk([text], FixedTokens(16))
    assert same.token_ids == default.token_ids and same.windows == default.windows
    np.testing.assert_allclose(same.vectors, default.vectors, rtol=0, atol=1e-6)
    other = LateChunker(minilm_dir, window_overlap=24, engine=chunker.engine)
    assert other.settings != chunker.settings
    assert dataclasses.replace(other.settings, window_overlap=32) == chunker.settings
    [changed] = other.chunk([text], FixedTokens(16))
    assert np.abs(changed.vectors - default.vectors).max() > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_overlap": -1}, "window_overlap must be an int >= 0"),
        ({"window_overlap": True}, "window_overlap must be an int >= 0"),
        ({"window_overlap": 2.5}, "window_overlap must be an int >= 0"),
        # 256 tokens less [CLS] and [SEP]: 254 document tokens, so 253 is the largest overlap
        ({"window_overlap": 254}, "window_overlap=254 must be below the 254 document tokens"),
        ({"window_length": 2}, "window_length=2 leaves no room for document tokens beside the 2"),
        # a 9-token window holds 7 document tokens; its default overlap (9 // 8 = 1) fits
        ({"window_length": 9, "window_overlap": 7}, "window_overlap=7 must be below the 7 document tokens"),
    ],
)
def test_window_settings_no_document_could_use_are_refused_by_name(
    chunker: LateChunker, minilm_dir, kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LateChunker(minilm_dir, engine=chunker.engine, **kwargs)


def test_window_settings_that_fit_are_taken(chunker: LateChunker, minilm_dir) -> None:
    edge = LateChunker(minilm_dir, window_overlap=253, engine=chunker.engine)
    assert edge.settings.window_overlap == 253
    short = LateChunker(minilm_dir, window_length=9, engine=chunker.engine)
    assert short.settings.window_overlap == 1
    off = LateChunker(minilm_dir, window_length=2, allow_windows=False, engine=chunker.engine)
    assert off.settings.allow_windows is False


def test_a_document_its_window_settings_cannot_plan_is_refused_alone(chunker: LateChunker) -> None:
    """Settings changed after construction (no check then) that leave a window no stride: each long
    document is refused by name, the short one still encoded."""
    short, long = "A short note about pumps.", text_of(5)
    with windows(chunker, 40, 38):  # 38 document tokens per window, all of them shared
        out = chunker.chunk([short, long], FixedTokens(8), doc_ids=["short", "long"], errors="return")
    assert out[0].chunks[0].text == short
    assert isinstance(out[1], DocumentTooLongError) and out[1].doc_id == "long"
    assert "window_overlap=38 must be in [0, 38)" in str(out[1])


def test_an_incremental_run_after_an_overlap_change_reencodes_the_windowed_documents(
    chunker: LateChunker, tmp_path: Path
) -> None:
    texts = {"short": "Owls hunt at night. Their feathers make their flight almost silent.", "long": text_of(40)}
    strategy = Sentences(max_tokens=64)
    db = sink.connect(str(tmp_path / "db"))
    table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    docs = [Document.from_text(k, v) for k, v in texts.items()]

    def run(overlap: int | None, run_id: str):  # noqa: ANN202 - the partition report
        chunker.window_overlap = overlap
        report = materialize_partition(
            chunker, docs, "p", strategy, chunk_table=table, rejected_table=rejected, run_id=run_id
        )
        # whatever was skipped or re-encoded, the table holds what the chunker now makes
        [fresh] = chunker.chunk([texts["long"]], strategy)
        rows = sorted(
            (r for r in table.to_arrow().to_pylist() if r["doc_id"] == "long"), key=lambda r: r["chunk_index"]
        )
        stored = np.array([r["vector"] for r in rows], dtype=np.float32)
        assert fresh.windows >= 3 and {r["windows"] for r in rows} == {fresh.windows}
        np.testing.assert_allclose(stored, fresh.vectors, rtol=0, atol=1e-5)
        return report, stored

    try:
        first, v1 = run(None, "r1")
        assert (first.documents_new, first.documents_reencoded) == (2, 2)
        # the default spelled out: the same recorded overlap and the same windows, nothing to redo
        same, _ = run(32, "r2")
        assert (same.documents_skipped, same.documents_reencoded, same.tokens_encoded) == (2, 0, 0)
        changed, v3 = run(8, "r3")
        assert changed.documents_reencoded == 2 and changed.documents_skipped == 0
        assert np.abs(v3 - v1).max() > 1e-3  # the new overlap's vectors replaced the old ones
        back, _ = run(None, "r4")
        assert back.documents_reencoded == 2
        assert {r["run_id"] for r in table.to_arrow().to_pylist()} == {"r4"}
    finally:
        chunker.window_overlap = None
