"""Translator specs reach Dagster whole, and declarative automation requests the right partitions.

Every attribute a ``LateChunkTranslator`` subclass sets is read back from the ``Definitions``
(what the UI and the automation daemon see). The automation test uses Dagster's own evaluation
API (``dg.evaluate_automation_conditions``, what the automation sensor runs on each tick) over
real observation and materialization runs: the real engine, real LanceDB, a temporary instance.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import dagster as dg

from latechunk_dagster import LateChunker, LateChunkTableProps, LateChunkTranslator, late_chunk_assets
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from tests.conftest import session_engine_resource


def _set(asset: str) -> dict[str, Any]:
    """Every spec attribute a translator may set, with values naming the asset."""
    return {
        "automation_condition": dg.AutomationCondition.on_cron("0 3 * * *"),
        "owners": [f"team:{asset}", "someone@example.com"],
        "tags": {"tier": asset},
        "metadata": {"dashboard": f"https://example.com/{asset}"},
        "kinds": {"lancedb", asset},
        "freshness_policy": dg.FreshnessPolicy.time_window(fail_window=datetime.timedelta(hours=6)),
        "description": f"the {asset} asset",
        "group_name": f"group_{asset}",
    }


class EveryAttribute(LateChunkTranslator):
    def get_chunk_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        return super().get_chunk_spec(props).replace_attributes(**_set("chunks"), code_version="v7")

    def get_documents_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        return super().get_documents_spec(props).replace_attributes(**_set("documents"))

    def get_index_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        return super().get_index_spec(props).replace_attributes(**_set("index"))


def _resources(minilm_dir: Path, tmp_path: Path, store: Path | None = None) -> dict[str, Any]:
    from latechunk_dagster.integration.resources import VLLMEngineResource

    return {
        "engine": VLLMEngineResource(model=str(minilm_dir)),  # not started: nothing here runs
        "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
        "store": DocumentStoreResource(path=str(store or tmp_path / "store")),
    }


def test_every_attribute_a_translator_sets_is_on_the_built_assets(tmp_path: Path, minilm_dir: Path) -> None:
    table = late_chunk_assets(key_prefix="t", translator=EveryAttribute())
    defs = table.to_definitions(resources=_resources(minilm_dir, tmp_path))
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    built = {"chunks": table.chunk_asset, "documents": table.documents_asset, "index": table.index_asset}
    for name, asset in built.items():
        spec, want = specs[asset.key], _set(name)
        assert spec.automation_condition == want["automation_condition"], name
        assert list(spec.owners) == want["owners"], name
        assert spec.tags["tier"] == name and spec.kinds == want["kinds"], name
        assert {k: getattr(v, "value", v) for k, v in spec.metadata.items()}.items() >= want["metadata"].items()
        assert spec.freshness_policy == want["freshness_policy"], name
        assert (spec.description, spec.group_name) == (want["description"], want["group_name"]), name
    assert specs[table.chunk_asset.key].code_version == "v7"
    # the wiring the factory adds stays: partitions, the chunk asset's dependency, the index's
    assert specs[table.chunk_asset.key].partitions_def == table.partitions_def
    assert specs[table.documents_asset.key].partitions_def == table.partitions_def
    assert {d.asset_key for d in specs[table.chunk_asset.key].deps} == {table.documents_asset.key}
    assert {d.asset_key for d in specs[table.index_asset.key].deps} == {table.chunk_asset.key}
    assert table.chunk_asset.backfill_policy == dg.BackfillPolicy.single_run()


def test_the_factory_automation_condition_is_on_the_chunk_asset(tmp_path: Path, minilm_dir: Path) -> None:
    table = late_chunk_assets(automation_condition=dg.AutomationCondition.eager())
    defs = table.to_definitions(resources=_resources(minilm_dir, tmp_path))
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    assert specs[table.chunk_asset.key].automation_condition == dg.AutomationCondition.eager()
    assert specs[table.documents_asset.key].automation_condition is None
    # default: no automation (runs come from the store sensor, a job or the UI)
    assert late_chunk_assets().chunk_asset.specs_by_key[dg.AssetKey("chunk_vectors")].automation_condition is None


def _write(store: Path, docs: dict[str, str]) -> None:
    for rel, text in docs.items():
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_text(text)


def test_eager_automation_requests_new_and_changed_shards(tmp_path: Path, chunker: LateChunker) -> None:
    store = tmp_path / "store"
    _write(store, {"a/owls.txt": "Owls hunt at night.", "b/tea.txt": "Green tea is steamed after picking."})
    table = late_chunk_assets(index=False, automation_condition=dg.AutomationCondition.eager())
    resources = _resources(chunker.card.path, tmp_path, store) | {"engine": session_engine_resource(chunker)}
    observe = dg.define_asset_job("observe_documents", selection=[table.documents_asset.key])
    defs = dg.Definitions.merge(table.to_definitions(resources=resources), dg.Definitions(jobs=[observe]))
    key, shards = table.chunk_asset.key, table.partitions_def.name

    def observed(instance: dg.DagsterInstance) -> None:  # what the store sensor reports, as a real run
        assert defs.resolve_job_def("observe_documents").execute_in_process(instance=instance).success

    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        tick = dg.evaluate_automation_conditions(defs, instance)  # the automation sensor's first tick
        assert tick.total_requested == 0
        instance.add_dynamic_partitions(shards, ["a", "b"])
        observed(instance)
        tick = dg.evaluate_automation_conditions(defs, instance, cursor=tick.cursor)
        assert tick.get_requested_partitions(key) == {"a", "b"}  # new shards, never materialized

        run = defs.resolve_job_def(table.jobs[0].name).execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "b"},
        )
        assert run.success
        tick = dg.evaluate_automation_conditions(defs, instance, cursor=tick.cursor)
        assert tick.get_requested_partitions(key) == set()  # up to date

        _write(store, {"b/tea.txt": "Black tea is fully oxidised.", "c/pumps.txt": "Acme builds pumps."})
        instance.add_dynamic_partitions(shards, ["c"])
        observed(instance)  # b's data version changed; a's did not
        tick = dg.evaluate_automation_conditions(defs, instance, cursor=tick.cursor)
        assert tick.get_requested_partitions(key) == {"b", "c"}
