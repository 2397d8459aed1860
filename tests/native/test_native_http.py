"""The native late-chunking path over HTTP: a vLLM 0.33 server of the shipped model behind
``RemoteLateChunker(engine_path="native")``, against the in-process token-state path and the
float64 reference.

Runs where ``make test-native`` runs (``.venv-native``: the server is started from the same
interpreter, so it is the vLLM 0.33 build); elsewhere deselected.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker, RemoteLateChunker, Sentences
from latechunk_dagster.core.errors import ModelNotSupportedError
from tests.native.test_native_path import DOCS
from tests.reference import reference_chunk_vectors
from tests.servers import ServerProcess, start_vllm_server
from tests.test_remote_engine import Proxy
from tests.tiny_models import build_tiny_bert

pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def server(minilm_dir: Path) -> Iterator[ServerProcess]:
    srv = start_vllm_server(minilm_dir)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def local(minilm_dir: Path) -> Iterator[LateChunker]:
    with LateChunker(minilm_dir, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1) as c:
        yield c


@pytest.mark.parametrize("size", [1, 7, 64])
def test_remote_native_equals_in_process_token_states_and_the_reference(
    server: ServerProcess, local: LateChunker, minilm_dir: Path, size: int
) -> None:
    with RemoteLateChunker(server.url, minilm_dir, engine_path="native") as remote:
        assert remote.engine.supports_native and remote.path == "native"
        got = remote.chunk(DOCS, FixedTokens(size))
    want = local.chunk(DOCS, FixedTokens(size), engine_path="token_states")
    for a, b in zip(got, want):
        assert a.path == "native" and b.path == "token_states"
        assert a.token_ids == b.token_ids
        assert [c.token_range for c in a.chunks] == [c.token_range for c in b.chunks]
        assert [c.char_range for c in a.chunks] == [c.char_range for c in b.chunks]
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-5, rtol=0)
        ref = reference_chunk_vectors(minilm_dir, a.token_ids, [c.token_range for c in a.chunks])
        assert np.abs(a.vectors - ref).max() < 1e-6


def test_remote_native_cuts_and_normalizes_on_our_side(tmp_path: Path, minilm_dir: Path) -> None:
    """vLLM 0.33's late chunking returns un-normalized means and takes no ``dimensions``: the
    Matryoshka cut and the L2 norm are ours (contract section 3). A tiny Matryoshka BERT
    (dimensions 16/32/64 listed), remote native against in-process token states, both cut to 16."""
    model = build_tiny_bert(tmp_path / "matryoshka", minilm_dir, matryoshka=[16, 32, 64], seed=13)
    srv = start_vllm_server(model, max_model_len=128)
    try:
        with RemoteLateChunker(srv.url, model, engine_path="native", dimensions=16) as remote:
            got = remote.chunk(DOCS, FixedTokens(7))
        # the same server's token states, pooled and cut here (this process already holds the
        # module's in-process engine, and a second one cannot start beside it)
        with RemoteLateChunker(srv.url, model, engine_path="token_states", dimensions=16) as remote:
            want = remote.chunk(DOCS, FixedTokens(7))
    finally:
        srv.stop()
    for a, b in zip(got, want):
        assert a.path == "native" and b.path == "token_states"
        assert a.vectors.shape == b.vectors.shape == (len(b.chunks), 16)
        assert [c.token_range for c in a.chunks] == [c.token_range for c in b.chunks]
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.linalg.norm(a.vectors, axis=1), 1.0, atol=1e-6)
        ref = reference_chunk_vectors(model, a.token_ids, [c.token_range for c in a.chunks], dimensions=16)
        assert np.abs(a.vectors - ref).max() < 1e-5


def test_what_native_cannot_take_goes_the_token_state_way(server: ServerProcess, minilm_dir: Path) -> None:
    with RemoteLateChunker(server.url, minilm_dir, engine_path="auto") as remote:
        [s] = remote.chunk([DOCS[0]], Sentences(max_tokens=16))
        [w] = remote.chunk(["The pump of plant seven was repaired by its team. " * 80], FixedTokens(32))
    assert s.path == "token_states" and w.path == "token_states" and w.windows > 1


def test_a_server_without_late_chunking_falls_back_under_auto_and_is_refused_under_native(
    server: ServerProcess, minilm_dir: Path
) -> None:
    """A server that answers ``/v1/embeddings`` without ``late_chunking`` in its answer (a model or a
    build whose late chunking does not take the request): ``engine_path="auto"`` uses the
    token-state path for everything; ``engine_path="native"`` is refused at start
    (``ModelNotSupportedError``, naming the server)."""
    plain = Proxy(server.url)
    plain.rewrite_response = lambda path, body: body.replace(b'"late_chunking"', b'"something_else"')
    try:
        with RemoteLateChunker(plain.url, minilm_dir, engine_path="auto") as remote:
            assert not remote.engine.supports_native
            [doc] = remote.chunk([DOCS[0]], FixedTokens(7))
            assert doc.path == "token_states"
        with pytest.raises(ModelNotSupportedError, match=f"{plain.url}.*no native late chunking"):
            RemoteLateChunker(plain.url, minilm_dir, engine_path="native")
    finally:
        plain.close()
