"""vLLM >= 0.33: the native path applies even a non-linear projection after the mean (own engine, own module)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, HeadNotSupportedError, LateChunker, Sentences
from tests.reference import reference_chunk_vectors
from tests.tiny_models import build_tiny_bert

pytestmark = pytest.mark.native
TEXT = "The maintenance team of Acme Corp. fixed the pump. Its engineers were praised by the city."


def test_native_path_applies_a_non_linear_projection_after_the_mean(tmp_path: Path, minilm_dir) -> None:
    tanh = build_tiny_bert(tmp_path / "tanh", minilm_dir, dense=[(64, 32, "torch.nn.modules.activation.Tanh")])
    with LateChunker(tanh, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.05) as c:
        [d] = c.chunk([TEXT], FixedTokens(6))
        # a boundary strategy would need the token-state path, where tanh cannot follow the mean
        with pytest.raises(HeadNotSupportedError):
            c.chunk([TEXT], Sentences(max_tokens=8))
    ref = reference_chunk_vectors(tanh, d.token_ids, [ch.token_range for ch in d.chunks])
    np.testing.assert_allclose(d.vectors, ref, atol=1e-4)
    assert d.path == "native"
