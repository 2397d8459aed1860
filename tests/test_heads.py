"""Heads and model refusals on tiny random-weight BERT models (contract sections 3 and 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, HeadNotSupportedError, LateChunker, ModelNotSupportedError, Sentences
from latechunk_dagster.core.model_card import check_late_chunking_allowed, read_model_card
from tests.reference import reference_chunk_vectors
from tests.tiny_models import build_tiny_bert

IDENTITY = "torch.nn.modules.linear.Identity"
TEXT = "The maintenance team of Acme Corp. fixed the pump. Its engineers were praised by the city."
SMALL_ENGINE = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.05}


@pytest.fixture(scope="module")
def dense_model(tmp_path_factory, minilm_dir) -> Path:
    return build_tiny_bert(
        tmp_path_factory.mktemp("dense"), minilm_dir, dense=[(64, 32, IDENTITY)], matryoshka=[16, 32]
    )


def test_projection_and_matryoshka_cut_after_the_mean(dense_model: Path) -> None:
    card = read_model_card(dense_model, dimensions=16)
    assert card.head.describe() == "dense(64->32,Identity)+cut(16)+l2"
    with LateChunker(dense_model, dimensions=16, **SMALL_ENGINE) as c:
        docs = c.chunk([TEXT, "short text"], FixedTokens(5)) + c.chunk([TEXT], Sentences(max_tokens=12))
        assert c.embedding_dim == 16
    for d in docs:
        spans = [ch.token_range for ch in d.chunks]
        ref = reference_chunk_vectors(dense_model, d.token_ids, spans, dimensions=16)
        assert d.vectors.shape == (len(spans), 16)
        np.testing.assert_allclose(d.vectors, ref, atol=1e-4)
        # the cut comes before the normalization: rows are unit length in 16 dims
        np.testing.assert_allclose(np.linalg.norm(d.vectors, axis=1), 1.0, atol=1e-5)


def test_unsupported_matryoshka_dimension_is_refused(dense_model: Path) -> None:
    with pytest.raises(ValueError, match="matryoshka_dimensions"):
        read_model_card(dense_model, dimensions=12)


def test_non_linear_projection_is_refused_on_the_token_state_path(tmp_path: Path, minilm_dir) -> None:
    tanh = build_tiny_bert(tmp_path / "tanh", minilm_dir, dense=[(64, 32, "torch.nn.modules.activation.Tanh")])
    with pytest.raises(HeadNotSupportedError, match="non-linear"):
        LateChunker(tanh, engine_path="token_states", **SMALL_ENGINE)


def test_cls_pooled_model_is_refused_unless_opted_in(tmp_path: Path, minilm_dir) -> None:
    cls_model = build_tiny_bert(tmp_path / "cls", minilm_dir, pooling="cls")
    with pytest.raises(ModelNotSupportedError, match="pooling is 'cls'"):
        LateChunker(cls_model, **SMALL_ENGINE)
    with LateChunker(cls_model, allow_non_mean_pooling=True, **SMALL_ENGINE) as c:
        [d] = c.chunk([TEXT], FixedTokens(6))
        assert c.opt_ins == ("pooling=cls",)
    assert d.opt_ins == ("pooling=cls",)
    ref = reference_chunk_vectors(cls_model, d.token_ids, [ch.token_range for ch in d.chunks])
    np.testing.assert_allclose(d.vectors, ref, atol=1e-4)


def test_causal_model_is_refused_unless_opted_in(tmp_path: Path, minilm_dir) -> None:
    causal = build_tiny_bert(tmp_path / "causal", minilm_dir, is_decoder=True)
    card = read_model_card(causal)
    assert card.causal
    with pytest.raises(ModelNotSupportedError, match="causal"):
        LateChunker(causal, **SMALL_ENGINE)
    assert check_late_chunking_allowed(card, allow_causal=True, allow_non_mean_pooling=False) == ("causal",)


def test_shipped_model_card(minilm_dir) -> None:
    card = read_model_card(minilm_dir)
    assert (card.causal, card.pooling, card.max_seq_length) == (False, "mean", 256)
    assert card.head.describe() == "l2"
    assert len(card.fingerprint) == 64
