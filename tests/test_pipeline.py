"""Real Dagster materializations: real vLLM engine, real LanceDB in a temp dir, temp DAGSTER_HOME."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import LateChunker, late_chunk_assets, sink
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.integration.sensors import read_cursor, sync_partitions
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import DocumentStore
from tests.conftest import SHARED_ENGINE, session_engine_resource

DOCS = {
    "alpha/acme.txt": "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day.",
    "alpha/berlin.md": "# Berlin\n\nBerlin is the capital of Germany.\n\nIt has 3.8 million inhabitants.",
    "alpha/empty.txt": "   \n",
    "beta/long.txt": " ".join(
        f"Paragraph {i} explains how the heat exchanger of unit {i} is cleaned." for i in range(40)
    ),
    "beta/owls.txt": "Owls hunt at night. Their feathers make their flight almost silent.",
    "gamma/tea.txt": "Green tea is steamed or pan-fired soon after picking to stop oxidation.",
}


def write_store(root: Path, docs: dict[str, str]) -> Path:
    for rel, text in docs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


#: The table under test, built with the factory's defaults (as the embedded app does).
TABLE = late_chunk_assets(index=False, job_name="chunk")
chunk_vectors, documents = TABLE.chunk_asset, TABLE.documents_asset
document_shards = TABLE.partitions_def
CHECKS_OP = "chunk_vectors_table_checks"


def sync(instance: dg.DagsterInstance, store: Path, db: Path | None = None) -> tuple[list[str], list[str]]:
    lancedb = LanceDBResource(uri=str(db)) if db is not None else None
    return sync_partitions(instance, DocumentStore.from_path(store), document_shards, lancedb, TABLE.wiring.table_names)


def make_defs(store: Path, db: Path, **engine_fields: Any) -> dg.Definitions:
    return dg.Definitions(
        assets=TABLE.assets,
        asset_checks=TABLE.asset_checks,
        jobs=[
            *TABLE.jobs,
            dg.define_asset_job("checks_only", selection=dg.AssetSelection.checks(TABLE.asset_checks[0])),
        ],
        sensors=TABLE.sensors,
        resources={
            "engine": session_engine_resource(SHARED_ENGINE["chunker"], **engine_fields),
            "lancedb": LanceDBResource(uri=str(db)),
            "store": DocumentStoreResource(path=str(store)),
        },
    )


def run_partitions(defs: dg.Definitions, instance: dg.DagsterInstance, first: str, last: str, **kw: Any):
    return defs.resolve_job_def("chunk").execute_in_process(
        instance=instance,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
        raise_on_error=False,
        **kw,
    )


@contextlib.contextmanager
def materialized(
    tmp_path: Path, store: Path, first: str, last: str
) -> Iterator[tuple[dg.Definitions, dg.DagsterInstance, Path]]:
    """A fresh instance and table over ``store``: its partitions synced and ``first``..``last``
    materialized once (asserted successful). Yields ``(defs, instance, table directory)``."""
    db = tmp_path / "lancedb"
    defs = make_defs(store, db)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync(instance, store)
        assert run_partitions(defs, instance, first, last).success
        yield defs, instance, db


def table_rows(db: Path) -> pa.Table:
    return sink.connect(str(db)).open_table("chunks").to_arrow().sort_by("chunk_id")


@pytest.fixture(scope="module")
def env(tmp_path_factory, chunker: LateChunker) -> Iterator[dict[str, Any]]:
    SHARED_ENGINE["chunker"] = chunker
    root = tmp_path_factory.mktemp("pipeline")
    store, db = write_store(root / "store", DOCS), root / "lancedb"
    (root / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "dagster_home")) as instance:
        sync(instance, store)
        defs = make_defs(store, db)
        result = run_partitions(defs, instance, "alpha", "gamma")
        yield {"root": root, "store": store, "db": db, "instance": instance, "defs": defs, "first": result}


def test_multi_partition_backfill_runs_once_and_writes_every_partition(env) -> None:
    result = env["first"]
    assert result.success
    mats = result.get_asset_materialization_events()
    by_part = {m.partition: m.event_specific_data.materialization.metadata for m in mats}
    assert sorted(by_part) == ["alpha", "beta", "gamma"]  # three partitions, one run
    assert by_part["alpha"]["documents_in"].value == 3 and by_part["alpha"]["documents_rejected"].value == 1
    assert by_part["beta"]["encoder_windows"].value > 2  # the long document was windowed, not rejected
    assert by_part["beta"]["documents_over_model_length"].value == 1
    rows = table_rows(env["db"])
    assert rows.num_rows == sum(m["partition_rows"].value for m in by_part.values())
    assert set(rows.column("doc_id").to_pylist()) == set(DOCS) - {"alpha/empty.txt"}
    lineage = rows.slice(0, 1).to_pylist()[0]
    assert lineage["run_id"] == result.run_id and lineage["engine_path"] == "spans"
    assert lineage["strategy"] == "sentences(language='en', max_tokens=128, min_tokens=8, segmenter='sentencex')"
    assert len(lineage["model_sha256"]) == 64 and lineage["vllm_version"].startswith("0.3")
    rejected = sink.connect(str(env["db"])).open_table("rejected_documents").to_arrow().to_pylist()
    assert [(r["doc_id"], r["partition"], r["reason"]) for r in rejected] == [
        ("alpha/empty.txt", "alpha", "empty_text")
    ]
    checks = result.get_asset_check_evaluations()
    assert {c.check_name for c in checks} == {
        "vectors_valid",
        "spans_tile",
        "unique_chunk_ids",
        "documents_accounted",
        "row_count_matches",
        "parity_sample",
    }
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]


def test_stored_ranges_and_vectors_are_the_engines(env, chunker: LateChunker) -> None:
    rows = [r for r in table_rows(env["db"]).to_pylist() if r["doc_id"] == "alpha/acme.txt"]
    rows.sort(key=lambda r: r["chunk_index"])
    text = DOCS["alpha/acme.txt"]
    assert [r["text"] for r in rows] == [
        "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day."
    ]
    assert (rows[0]["char_start"], rows[0]["char_end"]) == (0, len(text))
    from latechunk_dagster import Sentences

    [doc] = chunker.chunk([text], Sentences(max_tokens=128))
    np.testing.assert_allclose(np.array([r["vector"] for r in rows]), doc.vectors, atol=1e-6)


def test_host_workers_of_the_engine_resource_reach_the_partition(env, tmp_path, chunker: LateChunker) -> None:
    """``host_workers=1`` on the engine resource: the run's host work goes to a worker process
    (its pool is the chunker's), and the rows are those of the in-process run."""
    from latechunk_dagster.pipeline import hostpool

    hostpool.shutdown_host_pools()
    db = tmp_path / "lancedb"
    defs = make_defs(env["store"], db, host_workers=1)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync(instance, env["store"])
        assert run_partitions(defs, instance, "alpha", "gamma").success
    assert 1 in hostpool._POOLS.get(chunker, {})  # the run used a pool of one worker
    hostpool.shutdown_host_pools()
    got, want = table_rows(db), table_rows(env["db"])
    assert got.column("chunk_id").to_pylist() == want.column("chunk_id").to_pylist()
    for name in ("token_start", "token_end", "char_start", "char_end", "text"):
        assert got.column(name).to_pylist() == want.column(name).to_pylist()
    np.testing.assert_allclose(
        np.array(got.column("vector").to_pylist()), np.array(want.column("vector").to_pylist()), atol=1e-6
    )
    with pytest.raises(Exception, match="greater than or equal to 0"):
        session_engine_resource(chunker, host_workers=-1)


def test_rematerialization_is_idempotent_and_one_commit(env) -> None:
    table = sink.connect(str(env["db"])).open_table("chunks")
    before, version = table_rows(env["db"]), table.version
    result = run_partitions(env["defs"], env["instance"], "beta", "beta")
    assert result.success
    [mat] = result.get_asset_materialization_events()
    md = mat.event_specific_data.materialization.metadata
    assert (md["documents_skipped"].value, md["documents_reencoded"].value, md["tokens_encoded"].value) == (2, 0, 0)
    assert table_rows(env["db"]).equals(before)  # nothing changed: nothing rewritten, no commit
    assert sink.connect(str(env["db"])).open_table("chunks").version == version
    config = {"ops": {"chunk_vectors": {"config": {"force": True, "batch_tokens": 64}}}}
    result = run_partitions(env["defs"], env["instance"], "beta", "beta", run_config=config)
    assert result.success
    after = table_rows(env["db"])
    assert after.column("chunk_id").to_pylist() == before.column("chunk_id").to_pylist()
    np.testing.assert_allclose(
        np.array(after.column("vector").to_pylist()), np.array(before.column("vector").to_pylist()), atol=1e-6
    )
    assert after.column("text").to_pylist() == before.column("text").to_pylist()
    assert sink.connect(str(env["db"])).open_table("chunks").version == version + 1  # force: one commit


def test_removed_document_loses_its_rows(env, tmp_path) -> None:
    store = write_store(tmp_path / "store", DOCS)
    db = tmp_path / "lancedb"
    shutil.copytree(env["db"], db)
    (store / "beta" / "owls.txt").unlink()
    defs = make_defs(store, db)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:  # its own run history
        sync(instance, store)
        result = run_partitions(defs, instance, "beta", "beta")
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    ids = set(table_rows(db).column("doc_id").to_pylist())
    assert "beta/owls.txt" not in ids and "beta/long.txt" in ids and "alpha/acme.txt" in ids


def test_sensor_adds_new_shard_and_requests_changed_ones(env, tmp_path) -> None:
    store = write_store(tmp_path / "store", DOCS)
    defs = make_defs(store, tmp_path / "db")
    sensor = defs.resolve_sensor_def("chunk_vectors_store_sensor")
    resources = {"store": DocumentStoreResource(path=str(store)), "lancedb": LanceDBResource(uri=str(tmp_path / "db"))}
    with dg.build_sensor_context(instance=env["instance"], resources=resources) as ctx:
        first = sensor(ctx)
    assert first.dynamic_partitions_requests == []  # all shards already partitions
    # no cursor yet: every shard is new to the sensor, one range run covers them (one engine load)
    [run] = first.run_requests
    assert run.tags["dagster/asset_partition_range_start"] == "alpha"
    assert run.tags["dagster/asset_partition_range_end"] == "gamma"
    write_store(store, {"delta/new.txt": "A brand new shard about lighthouses.", "gamma/tea.txt": "Changed tea text."})
    with dg.build_sensor_context(instance=env["instance"], cursor=first.cursor, resources=resources) as ctx:
        second = sensor(ctx)
    [add] = second.dynamic_partitions_requests
    assert list(add.partition_keys) == ["delta"]
    [run] = second.run_requests  # gamma (changed) and delta (new) are neighbours in partition order
    assert (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]) == (
        "gamma",
        "delta",
    )
    # the changed shard's new data version is reported for the `documents` source asset
    [obs] = second.asset_events
    assert (obs.asset_key, obs.partition) == (documents.key, "gamma")
    assert obs.tags["dagster/data_version"] == DocumentStore.from_path(store).shard_fingerprint("gamma")


def test_search_finds_the_chunk_of_a_known_document(env, chunker: LateChunker) -> None:
    hits = search("silent flight of owls at night", chunker=chunker, uri=str(env["db"]), k=3)
    assert hits[0].doc_id == "beta/owls.txt"
    assert hits[0].text == DOCS["beta/owls.txt"] and hits[0].char_range == (0, len(DOCS["beta/owls.txt"]))
    assert hits[0].distance < hits[1].distance


def _run_checks(env, db: Path, partitions: list[str]) -> dict[str, dg.AssetCheckEvaluation]:
    defs = make_defs(env["store"], db)
    result = defs.resolve_job_def("checks_only").execute_in_process(
        instance=env["instance"],
        run_config={"ops": {CHECKS_OP: {"config": {"partitions": partitions}}}},
        raise_on_error=False,
    )
    return {c.check_name: c for c in result.get_asset_check_evaluations()}


def _plant(env, tmp_path: Path, fault) -> Path:
    db = tmp_path / "lancedb"
    shutil.copytree(env["db"], db)
    fault(sink.connect(str(db)))
    return db


def test_checks_pass_on_clean_copy(env, tmp_path) -> None:
    got = _run_checks(env, _plant(env, tmp_path, lambda db: None), ["alpha", "beta"])
    assert all(c.passed for c in got.values()), {k: c.metadata for k, c in got.items() if not c.passed}


def test_check_fails_on_non_finite_vector(env, tmp_path) -> None:
    # LanceDB itself refuses NaN vectors on write (on_bad_vectors="error"), so plant an infinity
    def fault(db) -> None:
        t = db.open_table("chunks")
        rows = t.to_arrow().to_pylist()
        for r in rows:
            if r["doc_id"] == "beta/owls.txt" and r["chunk_index"] == 0:
                r["vector"][5] = float("inf")
        schema = t.schema
        db.drop_table("chunks")
        db.create_table("chunks", pa.Table.from_pylist(rows, schema=schema))

    got = _run_checks(env, _plant(env, tmp_path, fault), ["beta"])
    assert not got["vectors_valid"].passed and got["spans_tile"].passed


def test_check_fails_on_wrong_dimension(env, tmp_path) -> None:
    def fault(db) -> None:
        rows = db.open_table("chunks").to_arrow()
        flat = pa.compute.list_slice(rows.column("vector"), 0, 8).combine_chunks()
        cut = pa.FixedSizeListArray.from_arrays(flat.flatten(), 8)
        rows = rows.set_column(rows.schema.get_field_index("vector"), "vector", cut)
        db.drop_table("chunks")
        db.create_table("chunks", rows)

    got = _run_checks(env, _plant(env, tmp_path, fault), ["alpha"])
    assert not got["vectors_valid"].passed
    assert "dimension 8 != expected 384" in str(got["vectors_valid"].metadata)


def test_check_fails_on_gap_in_spans(env, tmp_path) -> None:
    def fault(db) -> None:
        db.open_table("chunks").update(
            where="doc_id = 'beta/long.txt' AND chunk_index = 2", values={"token_start": 999}
        )

    got = _run_checks(env, _plant(env, tmp_path, fault), ["beta"])
    assert not got["spans_tile"].passed and "beta/long.txt" in str(got["spans_tile"].metadata)


def test_check_fails_on_duplicate_chunk_id(env, tmp_path) -> None:
    def fault(db) -> None:
        t = db.open_table("chunks")
        t.add(t.search().where("doc_id = 'gamma/tea.txt'").limit(1).to_arrow())

    got = _run_checks(env, _plant(env, tmp_path, fault), ["gamma"])
    assert not got["unique_chunk_ids"].passed and not got["row_count_matches"].passed


def test_check_fails_when_a_document_is_neither_chunked_nor_rejected(env, tmp_path) -> None:
    def fault(db) -> None:
        db.open_table("chunks").delete("doc_id = 'alpha/acme.txt'")

    got = _run_checks(env, _plant(env, tmp_path, fault), ["alpha"])
    assert not got["documents_accounted"].passed and "alpha/acme.txt" in str(got["documents_accounted"].metadata)


def test_strategy_comes_from_run_config_and_lands_in_lineage(env, tmp_path) -> None:
    store = write_store(tmp_path / "store", {"docs/guide.md": "# Install\n\nRun make.\n\n## On Linux\n\nUse apt.\n"})
    db = tmp_path / "lancedb"
    defs = make_defs(store, db)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync(instance, store)
        config = {"ops": {"chunk_vectors": {"config": {"strategy": "markdown_sections", "max_tokens": 64}}}}
        result = run_partitions(defs, instance, "docs", "docs", run_config=config)
    assert result.success
    rows = sorted(table_rows(db).to_pylist(), key=lambda r: r["chunk_index"])
    assert [r["headings"] for r in rows] == [["Install"], ["Install", "On Linux"]]
    assert [r["text"] for r in rows] == ["# Install\n\nRun make.", "## On Linux\n\nUse apt."]
    assert rows[0]["strategy"] == "markdown_sections(language='en', max_tokens=64, min_tokens=8, segmenter='sentencex')"
    assert '"name": "markdown_sections"' in rows[0]["strategy_params"]


def test_removed_shard_loses_its_partition_and_rows(env, tmp_path) -> None:
    store = write_store(tmp_path / "store", DOCS)
    db = tmp_path / "lancedb"
    shutil.copytree(env["db"], db)
    shutil.rmtree(store / "gamma")
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(document_shards.name, ["alpha", "beta", "gamma"])
        added, removed = sync(instance, store, db)
        assert (added, removed) == ([], ["gamma"])
        assert instance.get_dynamic_partitions(document_shards.name) == ["alpha", "beta"]
    parts = set(table_rows(db).column("partition").to_pylist())
    assert parts == {"alpha", "beta"}


def test_bad_rows_are_rejected_alone_and_a_systemic_failure_keeps_its_partition(env, tmp_path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "good.jsonl").write_text('{"id": "g1", "text": "A fine document about owls."}\n{"id": "g2", "text": 12}\n')
    (store / "bad.jsonl").write_text('{"id": "b1", "text": 12}\n{"id": "b2", "text": null}\n')
    (store / "zzz.jsonl").write_text('{"id": "z1", "text": "Another fine one about tea."}\n')
    db = tmp_path / "lancedb"
    defs = make_defs(store, db)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync(instance, store)
        keys = instance.get_dynamic_partitions(document_shards.name)
        assert keys == ["bad", "good", "zzz"]
        result = run_partitions(defs, instance, "bad", "zzz")
        # the asset step succeeds; the blocking check fails for the partition whose rows all failed
        assert instance.get_materialized_partitions(chunk_vectors.key) == {"bad", "good", "zzz"}
    assert set(table_rows(db).column("doc_id").to_pylist()) == {"g1", "z1"}
    rejected = sink.connect(str(db)).open_table("rejected_documents").to_arrow().sort_by("partition").to_pylist()
    assert [(r["doc_id"], r["partition"], r["reason"]) for r in rejected] == [
        ("*", "bad", "systemic_failure"),
        ("g2", "good", "bad_text"),
    ]
    assert "partition 'bad' failed: 2 of 2 documents rejected for the same reason 'bad_text'" in rejected[0]["detail"]
    assert "good.jsonl: row 2: 'text' must be a string, got int (id 'g2')" in rejected[1]["detail"]
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    accounted = checks["documents_accounted"]
    assert not accounted.passed
    details = accounted.metadata["details"].value
    assert details["good"]["missing"] == [] and details["good"]["not_in_store"] == []  # g2 is accounted
    assert details["bad"]["not_in_store"] == ["*"]


def test_a_shard_gone_from_the_store_keeps_its_rows_and_a_bug_fails_the_run(
    env, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad data and a bug are told apart. A partition whose shard left the store (not yet synced
    away) is bad data: its old rows stay, an ``unreadable_shard`` row says why, and the blocking
    ``documents_accounted`` check fails for it. A programming error (a fault injected here: the
    partition pipeline raising a plain ``TypeError``) fails the run and records nothing."""
    import latechunk_dagster.pipeline.shard as shard_run

    store = write_store(tmp_path / "store", {"keep/a.txt": DOCS["alpha/acme.txt"], "gone/b.txt": DOCS["beta/owls.txt"]})
    with materialized(tmp_path, store, "gone", "keep") as (defs, instance, db):
        before = table_rows(db)
        shutil.rmtree(store / "gone")
        result = run_partitions(defs, instance, "gone", "keep")
        assert table_rows(db).equals(before)  # "keep" unchanged is skipped, "gone" keeps its rows
        [row] = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
        assert (row["doc_id"], row["partition"], row["reason"]) == ("*", "gone", "unreadable_shard")
        assert row["detail"] == f"unknown shard 'gone' in document store {DocumentStore.from_path(store).uri}"
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert not checks["documents_accounted"].passed

        def bug(*args: Any, **kwargs: Any) -> None:
            raise TypeError("a bug, not bad data")

        monkeypatch.setattr(shard_run, "materialize_partition", bug)  # the one shard run both orchestrators call
        failed = run_partitions(defs, instance, "keep", "keep")
        assert not failed.success
        [failure] = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
        assert "TypeError: a bug, not bad data" in str(failure.event_specific_data.error)
    assert sink.connect(str(db)).open_table("rejected_documents").count_rows() == 1
    assert table_rows(db).equals(before)


def test_a_jsonl_file_cut_off_mid_write_keeps_its_partition(env, tmp_path) -> None:
    """A shard file truncated in the middle of a row (a writer killed, a partial copy): the rows
    after the cut would read as deleted documents, so the partition keeps all its old rows and the
    blocking ``documents_accounted`` check fails, naming the truncation."""
    store = tmp_path / "store"
    store.mkdir()
    rows = [{"id": f"d{i}", "text": f"Document {i} is about the harbour crane number {i}."} for i in range(4)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (store / "cranes.jsonl").write_text(text)
    with materialized(tmp_path, store, "cranes", "cranes") as (defs, instance, db):
        before = table_rows(db)
        assert set(before.column("doc_id").to_pylist()) == {"d0", "d1", "d2", "d3"}
        (store / "cranes.jsonl").write_text(text[: len(json.dumps(rows[0])) + 1 + 20])  # d0 whole, d1 cut
        result = run_partitions(defs, instance, "cranes", "cranes")
    assert table_rows(db).equals(before)
    [row] = sink.connect(str(db)).open_table("rejected_documents").to_arrow().to_pylist()
    assert (row["doc_id"], row["reason"]) == ("*", "systemic_failure")
    assert "truncated_file" in row["detail"] and "the last line is cut off" in row["detail"]
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert not checks["documents_accounted"].passed


def test_range_run_requests_group_contiguous_changes() -> None:
    from latechunk_dagster.integration.sensors import range_run_requests

    order = ["a", "b", "c", "d", "e"]
    reqs = range_run_requests(order, ["a", "b", "d"], dict.fromkeys(order, "v"))
    assert [
        (
            r.partition_key,
            r.tags.get("dagster/asset_partition_range_start"),
            r.tags.get("dagster/asset_partition_range_end"),
        )
        for r in reqs
    ] == [(None, "a", "b"), ("d", None, None)]
    again = range_run_requests(order, ["a", "b", "d"], dict.fromkeys(order, "v"))
    assert [r.run_key for r in reqs] == [r.run_key for r in again]  # the same change is requested once


def test_bad_run_config_fails_before_the_engine_loads(env, tmp_path, minilm_dir) -> None:
    """The real engine resource: starting it here would raise (the module's engine is live),
    so a failure about the strategy proves the model was never loaded."""
    store = write_store(tmp_path / "store", {"docs/a.txt": "Some text."})
    defs = dg.Definitions(
        assets=[chunk_vectors],
        jobs=[dg.define_asset_job("chunk", selection=[chunk_vectors], partitions_def=document_shards)],
        resources={
            "engine": VLLMEngineResource(model=str(minilm_dir)),
            "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
            "store": DocumentStoreResource(path=str(store)),
        },
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync(instance, store)
        config = {"ops": {"chunk_vectors": {"config": {"strategy": "bogus"}}}}
        result = run_partitions(defs, instance, "docs", "docs", run_config=config)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error.cause or failure.event_specific_data.error)
    assert "unknown chunking strategy 'bogus'" in message and "close it first" not in message


def test_code_version_names_the_model_and_default_strategy(tmp_path, minilm_dir) -> None:
    from latechunk_dagster import FixedTokens, Sentences
    from latechunk_dagster.app.definitions import defs
    from latechunk_dagster.app.demo_queries import demo_granularities
    from tests.tiny_models import build_tiny_bert

    def version(**kwargs: Any) -> str:
        table = late_chunk_assets(**kwargs)
        return table.chunk_asset.code_versions_by_key[table.chunk_asset.key]

    shipped = version(model=str(minilm_dir))
    assert (
        "sentences(language='en', max_tokens=128, min_tokens=8, segmenter='sentencex')" in shipped
        and "model." in shipped
    )
    # the embedded default: the shipped model in the demo's granularities, each asset versioned by its own
    demo = late_chunk_assets(model=str(minilm_dir), strategies=demo_granularities())
    for key in demo.chunk_keys:
        app = defs.resolve_assets_def(key)
        assert app.code_versions_by_key[key] == demo.chunk_asset.code_versions_by_key[key]
    assert "max_tokens=32," in demo.chunk_asset.code_versions_by_key[demo.chunk_keys[0]]
    tiny = build_tiny_bert(tmp_path / "tiny", minilm_dir)
    assert version(model=str(tiny)) != shipped
    assert version(model=str(minilm_dir), strategy=FixedTokens(chunk_size=64)) != shipped
    assert version(model=str(minilm_dir), strategy=Sentences(max_tokens=64)) != shipped


def test_sensor_and_observation_survive_a_bad_row(tmp_path) -> None:
    """Issue 11: one bad row in a single-file store must not fail the sensor tick (or the observation)."""
    path = tmp_path / "one.jsonl"
    path.write_text(
        '{"id": "x", "text": "Owls hunt at night.", "shard": "x"}\n'
        '{"id": "y", "text": null, "shard": "y"}\n'
        '{"id": "z", "text": "Green tea is steamed.", "shard": "z"}\n'
    )
    defs = make_defs(path, tmp_path / "db")
    sensor = defs.resolve_sensor_def("chunk_vectors_store_sensor")
    resources = {"store": DocumentStoreResource(path=str(path)), "lancedb": LanceDBResource(uri=str(tmp_path / "db"))}
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            tick = sensor(ctx)
        [add] = tick.dynamic_partitions_requests
        assert list(add.partition_keys) == ["x", "y", "z"]
        assert not any(v.startswith("unreadable:") for v in read_cursor(tick.cursor)[1].values())
    # the `documents` observation computes exactly these (shard_fingerprint per known shard)
    assert set(DocumentStore.from_path(path).fingerprints()) == {"x", "y", "z"}
