"""The retrieval evaluation for real: the real vLLM engine, real LanceDB in a temp dir, real Dagster runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, late_chunk_assets, sink
from latechunk_dagster.app.demo_queries import context_set, run_demo_evaluation
from latechunk_dagster.evaluation import (
    LabeledQuery,
    Passage,
    QueryFileError,
    evaluate_rows,
    naive_vectors,
    read_chunk_rows,
    write_queries,
)
from latechunk_dagster.integration.evaluation import CHECK_NAME
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.sources.files import DocumentStore
from tests.conftest import SHARED_ENGINE, session_engine_resource
from tests.reference import reference_chunk_vectors, reference_token_ids


@pytest.fixture(scope="module")
def env(tmp_path_factory, chunker: LateChunker) -> Iterator[dict[str, Any]]:
    SHARED_ENGINE["chunker"] = chunker
    root = tmp_path_factory.mktemp("evaluation")
    docs, queries = context_set(per_kind=4)
    store = root / "store"
    store.mkdir()
    for shard, part in (("ctx-a", docs[::2]), ("ctx-b", docs[1::2])):
        (store / f"{shard}.jsonl").write_text(
            "".join(json.dumps({"id": d.doc_id, "text": d.text}) + "\n" for d in part)
        )
    qpath = write_queries(root / "queries.jsonl", queries)
    db = root / "lancedb"
    # the evaluation through the factory, as a user adds it: one argument
    table = late_chunk_assets(index=False, parity_check=False, job_name="chunk", queries=qpath)
    [eval_asset] = table.extra_assets
    assert eval_asset.key == dg.AssetKey("retrieval_eval")
    defs = dg.Definitions(
        assets=table.assets,
        asset_checks=table.asset_checks,
        jobs=[*table.jobs, dg.define_asset_job("eval", selection=dg.AssetSelection.assets(eval_asset))],
        resources={
            "engine": session_engine_resource(SHARED_ENGINE["chunker"]),
            "lancedb": LanceDBResource(uri=str(db)),
            "store": DocumentStoreResource(path=str(store)),
        },
    )
    (root / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "dagster_home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), table.partitions_def)
        chunked = defs.resolve_job_def("chunk").execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": "ctx-a", "dagster/asset_partition_range_end": "ctx-b"},
            run_config={"ops": {"chunk_vectors": {"config": {"strategy": "sentences", "max_tokens": 24}}}},
        )
        assert chunked.success
        yield {"root": root, "db": db, "defs": defs, "instance": instance, "queries": queries, "docs": docs}


def run_eval(env: dict[str, Any], **config: Any) -> dg.ExecuteInProcessResult:
    return (
        env["defs"]
        .resolve_job_def("eval")
        .execute_in_process(
            instance=env["instance"], run_config={"ops": {"retrieval_eval": {"config": config}}}, raise_on_error=False
        )
    )


def eval_metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    [mat] = result.get_asset_materialization_events()
    return {k: v.value for k, v in mat.event_specific_data.materialization.metadata.items()}  # type: ignore[union-attr]


def table_state(db: Path) -> tuple[list[str], int, int]:
    conn = sink.connect(str(db))
    table = conn.open_table("chunks")
    return sorted(conn.list_tables().tables), table.version, table.count_rows()


def test_asset_shows_table_numbers_plot_and_check(env) -> None:
    before = table_state(env["db"])
    result = run_eval(env)
    assert result.success
    md = eval_metadata(result)
    lines = md["table"].splitlines()
    assert lines[0] == "| | nDCG@10 | R@1 | R@5 | R@10 | MRR@10 |"
    late_row = [float(x) for x in lines[2].strip("|").split("|")[1:]]
    naive_row = [float(x) for x in lines[3].strip("|").split("|")[1:]]
    assert lines[2].startswith("| late |") and lines[3].startswith("| naive |")
    assert late_row[0] == pytest.approx(md["late_ndcg_at_10"], abs=0.05)
    assert naive_row[4] == pytest.approx(md["naive_mrr_at_10"], abs=0.05)
    for key in ("late", "naive", "delta"):
        assert isinstance(md[f"{key}_recall_at_5"], float)
    assert md["delta_ndcg_at_10_ci_low"] <= md["delta_ndcg_at_10"] <= md["delta_ndcg_at_10_ci_high"]
    # the generated queries name an entity the relevant sentence only refers back to: late chunking wins
    assert md["late_ndcg_at_10"] > md["naive_ndcg_at_10"] + 10 and md["delta_ndcg_at_10_ci_low"] > 0
    assert md["queries"] == len(env["queries"]) and md["queries_skipped"] == 0
    png = Path(md["plot_path"])
    assert png.parent == env["db"].parent / "evaluation" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert md["plot"].startswith("![late vs naive](data:image/png;base64,iVBOR")
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == CHECK_NAME and check.passed
    assert table_state(env["db"]) == before  # the evaluation writes nothing to the chunk table


def test_check_fails_when_late_is_not_far_enough_above_naive(env) -> None:
    result = run_eval(env, margin=-100.0)  # late must beat naive by 100 points: impossible
    assert result.success  # a failed WARN check does not fail the run
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "the table's vectors retrieve worse than chunking alone" in check.description
    assert check.description.startswith("late (the table's default) nDCG@10 ")
    assert eval_metadata(result)["margin"] == -100.0


def test_where_filter_evaluates_one_partition(env) -> None:
    md = eval_metadata(run_eval(env, where="partition = 'ctx-a'", k=5))
    in_a = {d.doc_id for d in env["docs"][::2]}
    assert md["queries"] == sum(q.passages[0].doc_id in in_a for q in env["queries"])
    assert md["queries_skipped"] == len(env["queries"]) - md["queries"]
    assert md["table"].splitlines()[0] == "| | nDCG@5 | R@1 | R@5 | MRR@5 |"


def test_sweep_uses_temporary_tables_and_plots_score_vs_size(env) -> None:
    before = table_state(env["db"])
    result = run_eval(env, sweep_strategies=["fixed_tokens"], sweep_sizes=[16, 256])
    assert result.success
    md = eval_metadata(result)
    sweep = md["table"].split("**Sweep** (temporary tables)")[1].strip().splitlines()
    assert sweep[0].startswith("| strategy | size | late nDCG@10 | naive nDCG@10 |")
    assert [row.split("|")[1:3] for row in sweep[2:]] == [[" fixed_tokens ", " 16 "], [" fixed_tokens ", " 256 "]]
    # at 256 tokens each generated document is one chunk: late and naive coincide
    assert sweep[3].split("|")[3] == sweep[3].split("|")[4]
    assert Path(md["plot_path"]).read_bytes()[:4] == b"\x89PNG"
    assert table_state(env["db"]) == before  # no sweep table left behind, production rows untouched


def test_naive_vectors_match_transformers_reference(chunker: LateChunker, minilm_dir: Path) -> None:
    texts = ["Its largest customer is a dairy cooperative.", "The vessel sails between Riga and Hull."]
    got = naive_vectors(chunker, texts)
    for text, vec in zip(texts, got):
        ids = reference_token_ids(minilm_dir, text)
        [want] = reference_chunk_vectors(minilm_dir, ids, [(0, len(ids))])
        np.testing.assert_allclose(vec, want, atol=1e-5)


def test_rows_of_another_model_and_passages_past_the_end_are_refused(env, chunker: LateChunker) -> None:
    rows = read_chunk_rows(sink.connect(str(env["db"])).open_table("chunks"))
    other = rows.set_column(
        rows.schema.get_field_index("model_sha256"), "model_sha256", pa.array(["f" * 64] * rows.num_rows)
    )
    with pytest.raises(ValueError, match="vectors of model ffffffffffff"):
        evaluate_rows(chunker, other, env["queries"])
    doc = env["docs"][0]
    bad = [LabeledQuery("q", (Passage(doc.doc_id, (len(doc.text) + 5, len(doc.text) + 9), line=3),))]
    with pytest.raises(QueryFileError, match="line 3: passage .* starts after the document's last chunk"):
        evaluate_rows(chunker, rows, bad)
    with pytest.raises(ValueError, match="none of the 1 queries"):
        evaluate_rows(chunker, rows, [LabeledQuery("q", (Passage("nope"),))])


def test_demo_evaluation_prints_the_generated_set_table(chunker: LateChunker, tmp_path: Path) -> None:
    text = run_demo_evaluation(chunker, write_to=tmp_path)
    assert "generated context-dependent set (40 documents" in text
    assert "| late sentences32 |" in text and "| naive sentences32 |" in text and "120 queries" in text
    assert "| small-to-big sentences32 -> sentences128 |" in text and "\nbest late chunking on nDCG@10: " in text
    assert "| small-to-big blend a=0.5 sentences32 -> sentences128 |" in text
    assert "\nbest configuration on nDCG@10: " in text and "select it with: blend=" in text
    assert (tmp_path / "context.jsonl").read_text().count("\n") == 120


def test_bad_sweep_settings_fail_the_run_with_a_clear_error(env) -> None:
    for config, message in (
        ({"sweep_strategies": ["fixed_tokens"]}, "needs both sweep_strategies and sweep_sizes"),
        ({"sweep_strategies": ["bogus"], "sweep_sizes": [8]}, "unknown chunking strategy 'bogus'"),
    ):
        result = run_eval(env, **config)
        assert not result.success
        [failure] = [e for e in result.all_events if e.is_step_failure]
        assert message in str(failure.step_failure_data.error)
