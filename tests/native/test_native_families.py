"""The model families on vLLM >= 0.33's native late chunking, against the token-state path of the same engine.

vLLM 0.33's late chunking (``LateChunkingParams``) is a pooler-level feature of the ``token_embed``
task: it accepts every architecture whose engine starts with that task (BERT, XLM-R, NomicBert,
ModernBERT here). Native FixedTokens chunks must equal the token-state path's (vectors within 1e-5,
identical token and char ranges), including the prompt (a byte-level token straddling it), the
Matryoshka cut and the normalization vLLM applies. Runs only in ``.venv-native`` (``make test-native``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker
from latechunk_dagster.core.engines.vllm_local import native_late_chunking_available
from tests import families as F
from tests.tiny_models import build_tiny_bert

pytestmark = pytest.mark.native

ENGINE = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.05}

FAMILIES = {
    "xlmr-e5": (lambda d, m: F.build_xlmr(d, prompts={"query": "query: ", "document": "passage: "}), {}),
    "nomic-bert": (
        lambda d, m: F.build_nomic(
            d, m, prompts={"document": "search_document: "}, n_positions=256, max_trained_positions=256
        ),
        {"trust_remote_code": True},
    ),
    "modernbert": (lambda d, m: F.build_modernbert(d, prompts={"document": "search_document: "}), {}),
    "matryoshka": (lambda d, m: build_tiny_bert(d, m, matryoshka=[16, 32, 64], seed=13), {"dimensions": 16}),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_native_chunks_equal_the_token_state_path(name: str, tmp_path: Path, minilm_dir: Path) -> None:
    assert native_late_chunking_available(), "this environment must have vLLM >= 0.33 (see Makefile test-native)"
    build, kwargs = FAMILIES[name]
    model = build(tmp_path / name, minilm_dir)
    docs = F.MULTILINGUAL[:4]  # each fits one window (the native path reduces single-window documents)
    with LateChunker(model, **kwargs, **ENGINE) as c:
        assert c.path == "native"
        worst = 0.0
        for size in (3, 7, 16):
            nat = c.chunk(docs, FixedTokens(size))
            tok = c.chunk(docs, FixedTokens(size), engine_path="token_states")
            for a, b in zip(nat, tok):
                assert a.path == "native" and b.path == "token_states"
                assert [x.token_range for x in a.chunks] == [x.token_range for x in b.chunks]
                assert [x.char_range for x in a.chunks] == [x.char_range for x in b.chunks]
                assert a.vectors.shape == b.vectors.shape
                worst = max(worst, float(np.abs(a.vectors - b.vectors).max()))
    print(f"\n{name}: native vs token states, worst deviation {worst:.2e}")
    assert worst < 1e-5
