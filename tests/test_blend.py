"""Blended chunk vectors (issue 48): ``unit(a * late_unit + (1 - a) * naive_unit)``.

The right answers come from outside the code under test: late and naive vectors each computed from
transformers float64 states (tests/reference.py), pooled and mixed here in float64.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker, Sentences
from latechunk_dagster.core.blending import check_blend
from latechunk_dagster.pipeline.config import vector_config
from tests.reference import reference_chunk_vectors, reference_token_ids

TEXTS = [
    "Ada Lovelace wrote the first program. She worked with Charles Babbage on his engine. "
    "It was never built in her lifetime. Her notes describe loops and variables.",
    "The river floods every spring. Farmers plant after the water recedes. "
    "The silt it leaves makes the soil rich. Nobody remembers a dry year.",
]


@pytest.fixture()
def blended(chunker: LateChunker) -> Iterator[LateChunker]:
    """The module's engine with ``blend`` set by each test; late chunking again afterwards."""
    host = chunker.host
    yield chunker
    chunker.host = host


def reference_blend(model: Path, text: str, chunks: list, weight: float) -> np.ndarray:
    """Float64 blend of the reference late vectors and the reference chunk-alone vectors."""
    ids = reference_token_ids(model, text)
    late = reference_chunk_vectors(model, ids, [c.token_range for c in chunks])
    naive = np.concatenate([reference_chunk_vectors(model, a, [(0, len(a))]) for a in _alone(model, chunks)])
    mixed = weight * late / np.linalg.norm(late, axis=1, keepdims=True)
    mixed += (1 - weight) * naive / np.linalg.norm(naive, axis=1, keepdims=True)
    return mixed / np.linalg.norm(mixed, axis=1, keepdims=True)


def _alone(model: Path, chunks: list) -> list[list[int]]:
    return [reference_token_ids(model, c.text) for c in chunks]


def test_weight_one_is_late_chunking_bit_for_bit(blended: LateChunker) -> None:
    late = blended.chunk_granularities(TEXTS, {"small": FixedTokens(8), "big": Sentences(max_tokens=32)})
    blended.blend = 1.0
    again = blended.chunk_granularities(TEXTS, {"small": FixedTokens(8), "big": Sentences(max_tokens=32)})
    for a, b in zip(late, again):
        for g in a:
            assert np.array_equal(a[g].vectors, b[g].vectors)
    assert blended.settings.blend == 1.0


@pytest.mark.parametrize("weight", [0.5, 0.25])
def test_blend_matches_float64_reference(blended: LateChunker, minilm_dir: Path, weight: float) -> None:
    blended.blend = weight
    results = blended.chunk_granularities(TEXTS, {"small": FixedTokens(12), "big": Sentences(max_tokens=32)})
    for text, per in zip(TEXTS, results):
        for doc in per.values():
            want = reference_blend(minilm_dir, text, doc.chunks, weight)
            assert doc.vectors.dtype == np.float32
            np.testing.assert_allclose(doc.vectors, want, atol=2e-6)
            assert doc.path == "spans"


def test_weight_zero_is_each_chunk_alone(blended: LateChunker, minilm_dir: Path) -> None:
    blended.blend = 0.0
    [doc] = blended.chunk(TEXTS[:1], Sentences(max_tokens=24))
    alone = [reference_chunk_vectors(minilm_dir, ids, [(0, len(ids))]) for ids in _alone(minilm_dir, doc.chunks)]
    alone = np.concatenate(alone)
    np.testing.assert_allclose(doc.vectors, alone, atol=2e-6)
    late = blended.host
    blended.host = replace(late, blend=1.0)
    [plain] = blended.chunk(TEXTS[:1], Sentences(max_tokens=24))
    assert np.abs(plain.vectors - doc.vectors).max() > 0.05  # the two passes differ: the mix is visible


def test_token_state_path_and_long_documents_agree(blended: LateChunker) -> None:
    """The reference path (every state to the host) gives the span path's blend; a document longer than
    the model (windowed late pass) blends like any other."""
    blended.blend = 0.75
    long = " ".join(TEXTS * 12)  # ~700 tokens: three windows
    spans = blended.chunk([long, TEXTS[0]], FixedTokens(64))
    states = blended.chunk([long, TEXTS[0]], FixedTokens(64), engine_path="token_states")
    assert spans[0].windows > 1 and spans[0].path == "spans" and states[0].path == "token_states"
    for a, b in zip(spans, states):
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(a.vectors, axis=1), 1.0, atol=1e-6)


def test_transformers_engine_blends_the_same(blended: LateChunker, minilm_dir: Path) -> None:
    blended.blend = 0.5
    want = blended.chunk(TEXTS, FixedTokens(16))
    with LateChunker(minilm_dir, engine="transformers", blend=0.5) as light:
        got = light.chunk(TEXTS, FixedTokens(16))
    for a, b in zip(want, got):
        np.testing.assert_allclose(a.vectors, b.vectors, atol=2e-6)


def test_blend_is_part_of_vector_config(blended: LateChunker) -> None:
    late = vector_config(blended.settings, FixedTokens(16))
    blended.blend = 1.0
    assert vector_config(blended.settings, FixedTokens(16)) == late
    blended.blend = 0.5
    assert vector_config(blended.settings, FixedTokens(16)) != late


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), True, "0.5", None])
def test_bad_weights_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="blend must be"):
        check_blend(bad)


def test_orchestrators_pass_the_setting_on() -> None:
    from latechunk_dagster.airflow.engine import task_settings
    from latechunk_dagster.integration.resources import VLLMEngineResource

    spec, _ = task_settings({"blend": 0.5})
    assert spec.options.kwargs()["blend"] == 0.5
    assert VLLMEngineResource(model="m", blend=0.25).chunker_kwargs()["blend"] == 0.25
    assert "blend" not in VLLMEngineResource(model="m").chunker_kwargs()  # LateChunker's default: late
    with pytest.raises(ValueError, match="blend"):
        VLLMEngineResource(model="m", blend=1.5)


def test_a_partition_written_with_a_blend_holds_the_blended_vectors(blended: LateChunker, tmp_path: Path) -> None:
    """The pipeline writes what ``chunk_granularities`` returns at the weight, records the weight, and a
    change of weight re-encodes every document (vector_config)."""
    import json

    from latechunk_dagster import sink
    from latechunk_dagster.pipeline.partition import materialize_partition
    from latechunk_dagster.sink.schema import granularity_table
    from latechunk_dagster.sources.files import Document

    strategies = {"small": FixedTokens(12), "big": Sentences(max_tokens=32)}
    docs = [Document.from_text(f"d{i}", t) for i, t in enumerate(TEXTS)]
    db = sink.connect(str(tmp_path))
    tables = {g: db.create_table(granularity_table("chunks", g), schema=sink.chunk_schema(384)) for g in strategies}
    rejected = db.create_table(sink.REJECTED_TABLE, schema=sink.REJECTED_SCHEMA)

    def write() -> None:
        materialize_partition(
            blended, docs, "p", strategies, chunk_table=tables, rejected_table=rejected, run_id="r", host_workers=0
        )

    write()
    late_configs = set(tables["small"].to_arrow().column("vector_config").to_pylist())
    blended.blend = 0.5
    write()
    rows = tables["small"].to_arrow().sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")])
    want = blended.chunk_granularities(TEXTS, strategies, doc_ids=["d0", "d1"])
    np.testing.assert_array_equal(
        np.asarray(rows.column("vector").to_pylist(), dtype=np.float32),
        np.concatenate([w["small"].vectors for w in want]),
    )
    assert {json.loads(p)["blend"] for p in rows.column("strategy_params").to_pylist()} == {0.5}
    assert not set(rows.column("vector_config").to_pylist()) & late_configs


def test_a_dagster_run_with_a_blend_passes_its_checks(blended: LateChunker, tmp_path: Path) -> None:
    """The table's checks pass on blended rows (the parity sample re-chunks at the engine's weight), and
    the rows record it."""
    import json

    import dagster as dg

    from tests.conftest import SHARED_ENGINE
    from tests.test_pipeline import DOCS, make_defs, run_partitions, sync, table_rows, write_store

    blended.blend = 0.5
    SHARED_ENGINE["chunker"] = blended
    store, db = write_store(tmp_path / "store", DOCS), tmp_path / "lancedb"
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync(instance, store)
        result = run_partitions(make_defs(store, db), instance, "alpha", "gamma")
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert "parity_sample" in {c.check_name for c in checks}
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]
    params = {json.loads(p).get("blend") for p in table_rows(db).column("strategy_params").to_pylist()}
    assert params == {0.5}
