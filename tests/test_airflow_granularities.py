"""Real Airflow DAG runs of a table definition of several granularities (issue 29, item 2).

The guide's DAG file (docs/airflow.md, ``latechunk_granularities_dag.py``) runs as written with
``dag.test()``; the operators encode with the test session's vLLM engine (``use_chunker``), and
Airflow, XCom and LanceDB are real. The parent links are checked against the rule worked out here
from the rows' token ranges, the counts against Dagster's granularity assets over the same store,
given chunks against per-document ``CharSpans`` calls.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latechunk_dagster import CharSpans, FixedTokens, LateChunker, Sentences, sink
from tests import airflow_env  # sets AIRFLOW_HOME: none of the imports above imports airflow
from tests.conftest import SHARED_ENGINE, session_engine_resource
from tests.doc_examples import example
from tests.test_airflow import SAME, load_dag_file, run, set_lancedb_connection, states, xcoms
from tests.test_pipeline import DOCS, write_store

GRANULARITIES = ["small", "large"]
CHECKS = ["vectors_valid", "spans_tile", "unique_chunk_ids", "documents_accounted", "row_count_matches"]


def rows_of(db: Path, name: str) -> list[dict[str, Any]]:
    return sorted(sink.connect(str(db)).open_table(name).to_arrow().to_pylist(), key=lambda r: r["chunk_id"])


def overlap(a: dict[str, Any], b: dict[str, Any]) -> int:
    return max(0, min(a["token_end"], b["token_end"]) - max(a["token_start"], b["token_start"]))


def expected_parent(child: dict[str, Any], coarse: list[dict[str, Any]]) -> str:
    """The contract's rule, by hand: the next granularity's chunk of the same document holding most
    of the child's tokens, the earlier one on a tie."""
    mine = sorted((c for c in coarse if c["doc_id"] == child["doc_id"]), key=lambda c: c["chunk_index"])
    return max(mine, key=lambda c: (overlap(child, c), -c["chunk_index"]))["chunk_id"]


@pytest.fixture(scope="module")
def granular(tmp_path_factory, chunker: LateChunker, minilm_dir: Path) -> Iterator[dict[str, Any]]:
    """The guide's DAG file run once in a project directory of its own (the store is the Airflow
    tests' three shards: an empty document, a long one, short ones)."""
    airflow_env.init_db()
    project = tmp_path_factory.mktemp("granularities")
    write_store(project / "data" / "documents", DOCS)
    db = project / "data" / "lancedb"
    set_lancedb_connection(db)
    dag_file = airflow_env.DAGS / "latechunk_granularities_dag.py"
    dag_file.write_text(example("latechunk_granularities_dag.py"))
    cwd = Path.cwd()
    os.chdir(project)  # the example's STORE is relative, as the README's
    try:
        module = load_dag_file(dag_file, "granularities_dag_under_test")
        first = run(module.dag, chunker)
        yield {"project": project, "db": db, "dag": module.dag, "first": first}
    finally:
        os.chdir(cwd)
        dag_file.unlink()
        sys.modules.pop("granularities_dag_under_test", None)
        os.environ.pop("AIRFLOW_CONN_LANCEDB_DEFAULT", None)


def test_two_granularities_write_both_tables_with_parent_links(granular) -> None:
    from latechunk_dagster.pipeline.shard import GRANULARITY_KEYS, SUMMARY_KEYS

    dr = granular["first"]
    assert str(dr.state) == "success", states(dr)
    assert set(states(dr).values()) == {"success"}
    db = granular["db"]
    assert set(sink.connect(str(db)).list_tables().tables) == {"chunks_small", "chunks_large", "rejected_documents"}
    rows = {g: rows_of(db, f"chunks_{g}") for g in GRANULARITIES}
    texts = {d: t for d, t in DOCS.items() if t.strip()}
    for g, got in rows.items():
        assert {r["doc_id"] for r in got} == set(texts), g  # the empty document is rejected once, for both
        assert {r["granularity"] for r in got} == {g}
    assert len(rows["small"]) > len(rows["large"]) > len(texts)  # several chunks per document somewhere
    # parents: each small chunk's parent is the large chunk of its document holding most of its tokens
    for r in rows["small"]:
        assert r["parent_chunk_id"] == expected_parent(r, rows["large"]), r["chunk_id"]
    assert {r["parent_chunk_id"] for r in rows["large"]} == {None}  # the coarsest has no parents
    straddling = [
        r for r in rows["small"] if sum(overlap(r, c) > 0 for c in rows["large"] if c["doc_id"] == r["doc_id"]) > 1
    ]
    assert straddling, "no small chunk straddles two large ones: the parent rule is not exercised"
    # XCom: the summary's keys, each granularity's own table and counts
    results = {v["partition"]: v for v in xcoms(dr, "late_chunk").values()}
    assert sorted(results) == ["alpha", "beta", "gamma"]
    for p, summary in results.items():
        assert tuple(summary) == SUMMARY_KEYS
        assert list(summary["granularities"]) == GRANULARITIES
        for g, mine in summary["granularities"].items():
            assert tuple(mine) == GRANULARITY_KEYS
            assert mine["table"] == f"chunks_{g}" and mine["table_uri"] == f"{db}/chunks_{g}"
            assert mine["partition_rows"] == mine["chunks_written"] == sum(r["partition"] == p for r in rows[g])
        assert summary["partition_rows"] == sum(m["partition_rows"] for m in summary["granularities"].values())
    assert results["alpha"]["documents_rejected"] == 1 and results["alpha"]["rejected_reasons"] == {"empty_text": 1}
    # the checks of each table, parents_exist on the fine one; the indexes of each table
    [checks] = xcoms(dr, "checks").values()
    assert list(checks) == GRANULARITIES
    assert list(checks["small"]) == [*CHECKS, "parents_exist"] and list(checks["large"]) == CHECKS
    assert all(c["passed"] for g in GRANULARITIES for c in checks[g].values()), checks
    linked = checks["small"]["parents_exist"]["details"]  # by partition
    assert sum(d["rows"] for d in linked.values()) == len(rows["small"])
    [index] = xcoms(dr, "index").values()
    assert {g: index[g]["rows"] for g in GRANULARITIES} == {g: len(rows[g]) for g in GRANULARITIES}


def test_summary_keys_and_counts_equal_the_dagster_granularity_assets(
    granular, tmp_path: Path, chunker: LateChunker
) -> None:
    """One set of names (pipeline/shard.py): each granularity asset's partition metadata holds the
    summary's shared keys and that granularity's ``GRANULARITY_KEYS`` with the Airflow task's values
    (the tables' places and versions aside), and both orchestrators write the same rows and links."""
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.pipeline.shard import GRANULARITY_KEYS, SUMMARY_KEYS
    from latechunk_dagster.sources.files import DocumentStore

    SHARED_ENGINE["chunker"] = chunker
    store = granular["project"] / "data" / "documents"
    tables = late_chunk_assets(
        strategies={"small": FixedTokens(chunk_size=32), "large": Sentences(max_tokens=128)},
        index=False,
        parity_check=False,
        job_name="chunk",
    )
    dagster_db = tmp_path / "dagster_lancedb"
    defs = tables.to_definitions(
        resources={
            "engine": session_engine_resource(chunker),
            "lancedb": LanceDBResource(uri=str(dagster_db)),
            "store": DocumentStoreResource(path=str(store)),
        }
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), tables.partitions_def)
        result = defs.resolve_job_def("chunk").execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": "alpha", "dagster/asset_partition_range_end": "gamma"},
        )
        assert result.success
        keys = dict(zip(GRANULARITIES, tables.chunk_keys, strict=True))
        airflow = {v["partition"]: v for v in xcoms(granular["first"], "late_chunk").values()}
        shared = [k for k in SUMMARY_KEYS if k != "granularities"]
        per_run = {"table_uri", "version", "run_id", "tag", "seconds", "engine_seconds", "tokens_per_second"}
        for g, key in keys.items():
            for p, summary in airflow.items():
                [record] = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=key, asset_partitions=[p]), limit=5
                ).records
                meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
                assert set(shared) | set(GRANULARITY_KEYS) <= set(meta), (g, p)
                mine = {**{k: summary[k] for k in shared}, **summary["granularities"][g]}
                for k in set(mine) - per_run:
                    got = json.loads(meta[k]) if isinstance(meta[k], str) and isinstance(mine[k], dict) else meta[k]
                    assert got == mine[k], (g, p, k)
    for g in GRANULARITIES:
        ours, theirs = rows_of(granular["db"], f"chunks_{g}"), rows_of(dagster_db, f"chunks_{g}")
        columns = [*SAME, "granularity", "parent_chunk_id"]
        assert [{c: r[c] for c in columns} for r in ours] == [{c: r[c] for c in columns} for r in theirs], g
        np.testing.assert_array_equal(np.array([r["vector"] for r in ours]), np.array([r["vector"] for r in theirs]))


def test_a_broken_parent_link_fails_the_checks_naming_the_granularity(
    granular, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small chunk whose parent is not in the large table: a rerun encodes nothing, keeps the row,
    and the checks task fails naming the granularity, its table and ``parents_exist``."""
    from airflow.sdk.exceptions import AirflowFailException

    from latechunk_dagster.airflow.operators import LateChunkChecksOperator

    db = granular["db"]
    small = sink.connect(str(db)).open_table("chunks_small")
    victim = rows_of(db, "chunks_small")[0]["chunk_id"]
    small.update(where=f"chunk_id = '{victim}'", values={"parent_chunk_id": "no-such-chunk"})
    monkeypatch.chdir(granular["project"])  # the DAG's store path is relative
    dr = run(granular["dag"], chunker)
    got = states(dr)
    assert str(dr.state) == "failed" and got[("checks", -1)] == "failed", got
    assert {s for (task, _), s in got.items() if task == "late_chunk"} == {"success"}
    results = list(xcoms(dr, "late_chunk").values())
    assert {r["tokens_encoded"] for r in results} == {0}  # nothing re-encoded: the bad link stays
    op = LateChunkChecksOperator(task_id="checks", store_path="data/documents", table_name="chunks", results=results)
    with pytest.raises(AirflowFailException) as failed:
        op.execute({})
    message = str(failed.value)
    assert message.startswith("table checks failed in granularity 'small' (table 'chunks_small'): ['parents_exist']")
    assert victim in message and "'missing_parent': 1" in message
    assert "'large'" not in message  # the coarse table passes


GIVEN_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from latechunk_dagster.airflow.operators import LateChunkChecksOperator, LateChunkShardOperator, ListShardsOperator

with DAG(dag_id="latechunk_given_chunks", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    shards = ListShardsOperator(task_id="list_shards", store_path=STORE)
    chunk = LateChunkShardOperator.partial(
        task_id="late_chunk",
        store_path=STORE,
        model=MODEL,
        strategies={"own": {"name": "given_chunks"}, "large": {"name": "sentences", "max_tokens": "64"}},
        settings={"chunks_column": "chunks"},
    ).expand(shard=shards.output)
    checks = LateChunkChecksOperator(task_id="checks", store_path=STORE, results=chunk.output, chunks_column="chunks")
    chunk >> checks
"""

#: Documents with their own chunks (character ranges or texts), cut where meant by hand.
GIVEN = {
    "pumps": (
        "Acme builds pumps. Its team repairs them in a day. Parts ship from Rotterdam.",
        [(0, 18), (19, 50), (51, 77)],
    ),
    "owls": ("Owls hunt at night. Their flight is almost silent.", [(0, 19), (20, 50)]),
    "tea": ("Green tea is steamed soon after picking. Black tea is oxidised.", [(0, 40), (41, 63)]),
}


def test_a_store_of_given_chunks_through_a_dag(tmp_path: Path, chunker: LateChunker, minilm_dir: Path) -> None:
    """``given_chunks`` with ``settings={"chunks_column": ...}`` in a DAG: the documents' own chunks
    (ranges and texts alike) get the vectors of per-document ``CharSpans`` calls (1e-6), each linked to
    a coarser granularity; a misfit document is rejected alone, naming its first bad chunk; the
    checks pass. ``strategy`` beside ``strategies`` is refused when the DAG is parsed."""
    from latechunk_dagster.airflow.operators import LateChunkShardOperator

    airflow_env.init_db()
    for text, ranges in GIVEN.values():
        assert all(text[a:b].strip() == text[a:b] != "" for a, b in ranges)
    lines = [
        {"id": d, "text": t, "chunks": [list(r) for r in rs] if i % 2 == 0 else [t[a:b] for a, b in rs]}
        for i, (d, (t, rs)) in enumerate(GIVEN.items())
    ]
    lines.append({"id": "bad", "text": "Cats sleep. Dogs bark.", "chunks": [[0, 11], [5, 22]]})  # chunk 1 overlaps
    store = tmp_path / "store"
    store.mkdir()
    (store / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    db = tmp_path / "lancedb"
    set_lancedb_connection(db)
    dag_file = airflow_env.DAGS / "latechunk_given_chunks.py"
    dag_file.write_text(f"STORE = {str(store)!r}\nMODEL = {str(minilm_dir)!r}\n" + GIVEN_DAG)
    try:
        module = load_dag_file(dag_file, "given_chunks_dag_under_test")
        dr = run(module.dag, chunker)
        assert str(dr.state) == "success", states(dr)
    finally:
        dag_file.unlink()
        sys.modules.pop("given_chunks_dag_under_test", None)
        os.environ.pop("AIRFLOW_CONN_LANCEDB_DEFAULT", None)
    [summary] = xcoms(dr, "late_chunk").values()
    assert summary["rejected_reasons"] == {"bad_spans": 1} and list(summary["granularities"]) == ["own", "large"]
    [rejected] = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
    assert (
        rejected["doc_id"] == "bad"
        and rejected["detail"] == "granularity 'own': chunk 1 (5, 22) overlaps chunk 0 (0, 11)"
    )
    own, large = rows_of(db, "chunks_own"), rows_of(db, "chunks_large")
    for doc_id, (text, ranges) in GIVEN.items():
        [want] = chunker.chunk([text], CharSpans(ranges=tuple(ranges)))
        mine = sorted((r for r in own if r["doc_id"] == doc_id), key=lambda r: r["chunk_index"])
        assert [(r["char_start"], r["char_end"]) for r in mine] == ranges
        np.testing.assert_allclose(np.array([r["vector"] for r in mine]), want.vectors, atol=1e-6, rtol=0)
        assert all(r["parent_chunk_id"] == expected_parent(r, large) for r in mine)
    [checks] = xcoms(dr, "checks").values()
    assert list(checks["own"]) == [*CHECKS, "parents_exist"]
    assert all(c["passed"] for g in ("own", "large") for c in checks[g].values()), checks

    # the one-strategy form names it too; without a chunks column it fails before any engine starts
    from latechunk_dagster import GivenChunks
    from latechunk_dagster.airflow.tasks import resolve_strategies

    assert resolve_strategies("given_chunks") == GivenChunks()
    lacking = LateChunkShardOperator(task_id="t", store_path=str(store), shard="docs", strategy="given_chunks")
    with pytest.raises(ValueError, match=r"the strategy is given_chunks.*set chunks_column"):
        lacking.execute({})  # before the connection, the store or the engine is touched
    both = {"task_id": "bad", "store_path": "s", "strategy": "sentences", "strategies": {"a": {"name": "paragraphs"}}}
    with pytest.raises(ValueError, match=r"'bad': give either strategy .* or strategies .*, not both"):
        LateChunkShardOperator(shard="a", **both)
    with pytest.raises(ValueError, match=r"'bad': give either strategy .* or strategies .*, not both"):
        LateChunkShardOperator.partial(**both)
