"""Span means are accumulated wide, so bf16 states lose no bits to the sum (contract section 3)."""

from __future__ import annotations

import numpy as np
import torch

from latechunk_dagster import FixedTokens, LateChunker
from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.pooling import mean_pool_spans
from tests.reference import reference_chunk_vectors


def test_mean_of_bf16_states_is_exact_where_a_bf16_sum_is_not() -> None:
    gen = torch.Generator().manual_seed(0)
    # a long chunk of bf16 states with a large common component, as real hidden states have
    states_bf16 = (torch.randn(512, 384, generator=gen) + 8.0).to(torch.bfloat16)
    exact = states_bf16.double().mean(dim=0).numpy()
    ours = mean_pool_spans(states_bf16.float().numpy(), [Span(0, 512)])[0]
    naive = (states_bf16.sum(dim=0, dtype=torch.bfloat16) / 512).double().numpy()
    assert np.abs(ours - exact).max() < 1e-5
    assert np.abs(naive - exact).max() > 1e-2  # what a bf16 accumulator would have cost


def test_bf16_engine_stays_close_to_the_float64_reference(minilm_dir) -> None:
    text = " ".join(f"Sentence {i} says that the pump of plant {i % 5} was repaired by its team." for i in range(14))
    with LateChunker(minilm_dir, dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.05) as c:
        [doc] = c.chunk([text], FixedTokens(200))
    spans = [ch.token_range for ch in doc.chunks]
    assert spans[0] == (0, 200)  # one long chunk
    ref = reference_chunk_vectors(minilm_dir, doc.token_ids, spans)
    cos = (doc.vectors.astype(np.float64) * ref).sum(axis=1)
    print("bf16 engine: max abs dev", np.abs(doc.vectors - ref).max(), "min cos", cos.min())
    assert cos.min() > 0.999
    assert np.abs(doc.vectors - ref).max() < 1e-2
