"""vLLM >= 0.33 native late chunking (worker-side span means) against the token-state path.

Runs only in an environment with vLLM 0.33 (`make test` builds `.venv-native` from the wheels that
the Makefile's `VLLM033_WHEELS` names, where there are some: docs/testing.md); elsewhere these tests
are deselected.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker, Sentences
from latechunk_dagster.core.engines.vllm_local import native_late_chunking_available
from tests.reference import reference_chunk_vectors

pytestmark = pytest.mark.native

DOCS = [
    "Berlin is the capital and largest city of Germany. Its 3.8 million inhabitants make it the "
    "most populous city of the European Union.",
    "Tabs\tand\r\nCRLF lines, 東京 and ünïcödé, emoji 🎉👩‍👩‍👧 and Mr. Smith's e.g. abbreviations.",
    "x",
    "The maintenance team of Acme Corp. fixed the pump. Its engineers were praised by the city. " * 3,
]


@pytest.fixture(scope="module")
def native(minilm_dir: Path) -> Iterator[LateChunker]:
    assert native_late_chunking_available(), "this environment must have vLLM >= 0.33 (see Makefile test-native)"
    with LateChunker(minilm_dir, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1) as c:
        assert c.path == "native"
        yield c


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 64, 1000])
def test_native_equals_token_states_and_reference(native: LateChunker, minilm_dir, size: int) -> None:
    nat = native.chunk(DOCS, FixedTokens(size))
    tok = native.chunk(DOCS, FixedTokens(size), engine_path="token_states")
    for a, b in zip(nat, tok):
        assert a.path == "native" and b.path == "token_states"
        assert [c.token_range for c in a.chunks] == [c.token_range for c in b.chunks]
        assert [c.char_range for c in a.chunks] == [c.char_range for c in b.chunks]
        assert np.abs(a.vectors - b.vectors).max() < 1e-5
        ref = reference_chunk_vectors(minilm_dir, a.token_ids, [c.token_range for c in a.chunks])
        assert np.abs(a.vectors - ref).max() < 1e-4


def test_boundary_strategies_and_long_documents_use_the_span_path(native: LateChunker) -> None:
    """Documents the native path cannot serve go to the span path (issue 26), not to token states."""
    [s] = native.chunk([DOCS[0]], Sentences(max_tokens=16))
    assert s.path == "spans"
    long_text = "The pump of plant seven was repaired by its team. " * 80
    [fixed] = native.chunk([long_text], FixedTokens(32))
    assert fixed.windows > 1 and fixed.path == "spans"


def test_prefix_native_matches_token_states(native: LateChunker) -> None:
    native.prefix = "passage: "
    try:
        nat = native.chunk(DOCS[:2], FixedTokens(5))
        tok = native.chunk(DOCS[:2], FixedTokens(5), engine_path="token_states")
    finally:
        native.prefix = ""
    for a, b in zip(nat, tok):
        assert np.abs(a.vectors - b.vectors).max() < 1e-5
        assert a.chunks[0].char_range is not None and a.chunks[0].char_range[0] == 0
