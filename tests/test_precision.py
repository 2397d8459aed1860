"""Span means are accumulated wide, so bf16 states lose no bits to the sum (contract section 3)."""

from __future__ import annotations

import numpy as np
import torch

from latechunk_dagster import FixedTokens, LateChunker
from latechunk_dagster.core.chunking.base import Span
from latechunk_dagster.core.head import Head, apply_head_after_projection
from latechunk_dagster.core.pooling import mean_pool_spans, span_means, span_sums
from latechunk_dagster.core.windows import WindowPlan
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


def test_means_and_head_of_a_long_document_with_large_and_mixed_norms_match_float64() -> None:
    # 8,192 tokens of mixed norms (0.01x, 1x, 100x) plus, on every token, a large common component
    # (norm ~ 2e5), positive on the first half and negative on the second, so the means of the
    # spans across the middle and of the whole document are small beside their tokens and beside
    # the running sum (catastrophic cancellation for a float32 accumulator). Reference: numpy in float64 over
    # the same float32 states, normalized by hand.
    rng = np.random.default_rng(7)
    n, dim = 8192, 384
    scale = rng.choice([0.01, 1.0, 100.0], size=(n, 1))
    common = rng.standard_normal(dim) * 1e4 * np.where(np.arange(n) < n // 2, 1.0, -1.0)[:, None]
    states = (rng.standard_normal((n, dim)) * scale + 1.0 + common).astype(np.float32)
    cuts = sorted({0, 1, 2, 17, 128, 129, 1000, 4000, 4097, 8000, 8191, n})
    spans = [Span(a, b) for a, b in zip(cuts, cuts[1:])]
    wide = states.astype(np.float64)
    ref = np.stack([wide[s.start : s.end].mean(axis=0) for s in spans] + [wide.mean(axis=0)])
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    means = np.concatenate([span_means([states], WindowPlan([], None), spans), span_sums(states, [Span(0, n)]) / n])
    got = apply_head_after_projection(means, Head())
    assert got.dtype == np.float32
    assert np.abs(got - ref).max() < 1e-6
    # a float32 running sum of the same states is off by far more: the accumulator matters here
    f32 = np.cumsum(states, axis=0, dtype=np.float32)[-1] / n
    assert np.abs(f32 / np.linalg.norm(f32) - ref[-1]).max() > 1e-6
