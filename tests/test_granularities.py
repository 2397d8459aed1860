"""Several granularities from one encoder pass, and each document's own chunks (issue 29), on the real engine.

The right answers come from outside the code under test: a granularity's vectors are compared
with a separate ``chunk()`` call of its strategy alone, given chunks with per-document
``CharSpans`` calls, and parents with ranges checked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from latechunk_dagster import (
    CharSpans,
    DocumentBatchError,
    FixedTokens,
    GivenChunks,
    LateChunker,
    MarkdownSections,
    Paragraphs,
    SpanError,
)
from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.granularities import document_spans, granularity_means, parent_indices

DOCS = [
    "# Berlin\n\nBerlin is the capital of Germany. It has 3.8 million people.\n\n"
    "## Transport\n\nIts trams are yellow. The U-Bahn has ten lines.\n",
    "The pump failed twice. Its maintenance team replaced the seal. " * 30,  # windowed below
    "Short one.",
]
GRANULARITIES = {"small": FixedTokens(chunk_size=8), "medium": Paragraphs(max_tokens=16), "large": MarkdownSections(96)}


@pytest.mark.parametrize("engine_path", ["spans", "token_states"])
def test_each_granularity_equals_its_own_run(chunker: LateChunker, engine_path: str) -> None:
    multi = chunker.chunk_granularities(DOCS, GRANULARITIES, engine_path=engine_path)  # type: ignore[arg-type]
    for name, strategy in GRANULARITIES.items():
        alone = chunker.chunk(DOCS, strategy, engine_path=engine_path)  # type: ignore[arg-type]
        for doc, single in zip(multi, alone):
            got = doc[name]
            assert got.granularity == name
            assert [c.token_range for c in got.chunks] == [c.token_range for c in single.chunks]
            assert [c.char_range for c in got.chunks] == [c.char_range for c in single.chunks]
            np.testing.assert_allclose(got.vectors, single.vectors, atol=1e-6, rtol=0)
            assert got.token_ids == single.token_ids


def test_windowed_document_granularities_equal_their_own_runs(minilm_dir: object, chunker: LateChunker) -> None:
    # a short window forces the second document into several windows of the same engine
    old = chunker.window_length
    chunker.window_length = 64
    try:
        multi = chunker.chunk_granularities(DOCS[1:2], GRANULARITIES)
        assert multi[0]["small"].windows > 1
        for name, strategy in GRANULARITIES.items():
            [alone] = chunker.chunk(DOCS[1:2], strategy)
            np.testing.assert_allclose(multi[0][name].vectors, alone.vectors, atol=1e-6, rtol=0)
    finally:
        chunker.window_length = old


def test_parents_contain_their_children(chunker: LateChunker) -> None:
    [doc] = chunker.chunk_granularities(DOCS[:1], GRANULARITIES)
    small, medium, large = doc["small"], doc["medium"], doc["large"]
    assert large.parents is None
    for fine, coarse in ((small, medium), (medium, large)):
        assert fine.parents is not None and len(fine.parents) == len(fine.chunks)
        for c, p in zip(fine.chunks, fine.parents):
            parent = coarse.chunks[p].token_range
            held = min(c.token_range[1], parent[1]) - max(c.token_range[0], parent[0])
            # the parent holds the most of the chunk's tokens of any coarse chunk
            best = max(
                min(c.token_range[1], o.token_range[1]) - max(c.token_range[0], o.token_range[0]) for o in coarse.chunks
            )
            assert held == best > 0
    # the two Markdown sections: every medium chunk under "## Transport" has the second section as parent
    transport = [c for c in medium.chunks if "trams" in (c.text or "")]
    assert transport and all(large.chunks[medium.parents[c.index]].headings[-1] == "Transport" for c in transport)


def test_a_straddling_chunk_goes_to_the_parent_holding_most_of_it() -> None:
    coarse = [Span(0, 10), Span(10, 20)]
    # hand-checked: (8, 14) holds 2 tokens of the first and 4 of the second; (5, 15) ties: the earlier
    assert parent_indices([Span(0, 8), Span(8, 14), Span(14, 20)], coarse) == [0, 1, 1]
    assert parent_indices([Span(0, 5), Span(5, 15), Span(15, 20)], coarse) == [0, 0, 1]


def test_atoms_are_the_common_refinement() -> None:
    spans = {"a": [Span(0, 4), Span(4, 10)], "b": [Span(0, 6), Span(6, 10)]}
    doc = document_spans(spans, prompt_tokens=1)
    assert [(s.start, s.end) for s in doc.atoms] == [(1, 4), (4, 6), (6, 10)]
    sums = np.arange(30, dtype=np.float64).reshape(3, 10)
    means = granularity_means(sums, doc)
    np.testing.assert_array_equal(means["a"], np.stack([sums[0] / 3, (sums[1] + sums[2]) / 6]))
    np.testing.assert_array_equal(means["b"], np.stack([(sums[0] + sums[1]) / 5, sums[2] / 4]))


def test_given_chunks_equal_per_document_char_spans(chunker: LateChunker) -> None:
    texts = ["Berlin is big. It has trams. The end.", "Paris is old. Its metro is fast."]
    ranges = [[(0, 14), (15, 28), (29, 37)], [(0, 13), (14, 32)]]
    as_texts = [[t[a:b] for a, b in r] for t, r in zip(texts, ranges)]
    by_ranges = chunker.chunk(texts, GivenChunks(), chunks=ranges)
    by_texts = chunker.chunk(texts, GivenChunks(), chunks=as_texts)
    for k, text in enumerate(texts):
        [one] = chunker.chunk([text], CharSpans(ranges=ranges[k]))
        for got in (by_ranges[k], by_texts[k]):
            assert [c.char_range for c in got.chunks] == [c.char_range for c in one.chunks]
            np.testing.assert_allclose(got.vectors, one.vectors, atol=1e-6, rtol=0)


def test_given_chunks_that_do_not_fit_reject_their_document_alone(chunker: LateChunker) -> None:
    texts = ["Berlin is big. It has trams.", "Paris is old. Its metro is fast.", "Rome."]
    chunks = [["Berlin is big.", "It has buses."], [(0, 13), (10, 32)], ["Rome."]]
    with pytest.raises(DocumentBatchError) as info:
        chunker.chunk(texts, GivenChunks(), chunks=chunks, doc_ids=["b", "p", "r"])
    first, second, third = info.value.results
    assert isinstance(first, SpanError) and "chunk 1 'It has buses.' is not found after chunk 0 (0, 14)" in str(first)
    assert "document 'b'" in str(first)
    assert isinstance(second, SpanError) and "chunk 1 (10, 32) overlaps chunk 0 (0, 13)" in str(second)
    assert third.chunks[0].char_range == (0, 5)


def test_given_chunks_call_errors(chunker: LateChunker) -> None:
    with pytest.raises(ValueError, match="GivenChunks needs chunks="):
        chunker.chunk(["a b"], GivenChunks())
    with pytest.raises(ValueError, match="no granularity is GivenChunks"):
        chunker.chunk(["a b"], FixedTokens(4), chunks=[["a b"]])
    with pytest.raises(ValueError, match="one entry per text"):
        chunker.chunk(["a b", "c"], GivenChunks(), chunks=[["a b"]])


def test_granularity_names_and_errors_name_the_granularity(chunker: LateChunker) -> None:
    with pytest.raises(ValueError, match="granularity name 'a-b'"):
        chunker.chunk_granularities(["x"], {"a-b": FixedTokens(4)})
    with pytest.raises(ValueError, match="no granularities"):
        chunker.chunk_granularities(["x"], {})
    [res] = chunker.chunk_granularities(
        ["Berlin is big."], {"own": GivenChunks(), "fixed": FixedTokens(4)}, chunks=[["Paris"]], errors="return"
    )
    assert isinstance(res, SpanError) and "granularity 'own': given chunks: chunk 0 'Paris'" in str(res)


def test_the_granularities_value_is_checked_once_and_the_chunker_takes_it(chunker: LateChunker) -> None:
    """Issue 35 item 2: ``Granularities.of`` checks the union once; the chunker takes the value and gives
    the same results, to the bit, as for the union; a single strategy's results are plain documents."""
    import pickle

    from latechunk_dagster.core.granularities import SINGLE, Granularities, check_granularities

    many = Granularities.of(GRANULARITIES)
    assert many.names == ("small", "medium", "large") and not many.single
    assert [many.parent(n) for n in many.names] == ["medium", "large", None]
    assert Granularities.of(many) is many and pickle.loads(pickle.dumps(many)) == many
    assert check_granularities(GRANULARITIES) == GRANULARITIES  # the old form, unchanged
    one = Granularities.of(FixedTokens(chunk_size=8))
    assert one.single and one.names == (SINGLE,) and one.native_strategy == FixedTokens(chunk_size=8)
    for bad, error in (({}, ValueError), ({"a b": FixedTokens(8)}, ValueError), ("x", TypeError)):
        with pytest.raises(error):
            Granularities.of(bad)  # type: ignore[arg-type]

    by_value = chunker.chunk(DOCS, one)
    for got, want in zip(by_value, chunker.chunk(DOCS, FixedTokens(chunk_size=8))):
        assert got.granularity == SINGLE and got.chunks == want.chunks
        assert np.array_equal(got.vectors, want.vectors)
    for got, want in zip(chunker.chunk_granularities(DOCS, many), chunker.chunk_granularities(DOCS, GRANULARITIES)):
        assert list(got) == list(want)
        assert all(np.array_equal(got[n].vectors, want[n].vectors) for n in got)


def test_the_granularities_value_reads_as_the_mapping_it_was_built_from() -> None:
    """The pipeline passes the checked value where a ``{name: strategy}`` mapping was passed before:
    same pairs in the same order, equal to that dict, picklable (host workers), never re-checked."""
    import pickle

    from latechunk_dagster.core.granularities import Granularities

    fine, coarse = FixedTokens(chunk_size=8), FixedTokens(chunk_size=32)
    g = Granularities.of({"fine": fine, "coarse": coarse})
    assert g == {"fine": fine, "coarse": coarse} and list(g.items()) == [("fine", fine), ("coarse", coarse)]
    assert g["coarse"] is coarse and "fine" in g and g.get("other") is None and len(g) == 2
    assert Granularities.of(g) is g and pickle.loads(pickle.dumps(g)) == g
    with pytest.raises(KeyError):
        g["other"]
