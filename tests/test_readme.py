"""The README's "Use it in your own Dagster project" examples, run as written.

The Python block is written to ``definitions.py`` in a temporary project directory (its
relative paths ``data/...`` resolve there), imported, and its job materializes a small store
for real. The YAML block is loaded as a component in a ``dg`` sandbox.
"""

import importlib.util
import re
import sys
from pathlib import Path

import dagster as dg
import pytest

from latechunk_dagster import sink
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.sources.files import DocumentStore

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_block(name: str) -> str:
    """The fenced block right after ``<!-- readme-example: name -->``."""
    match = re.search(rf"<!-- readme-example: {re.escape(name)} -->\n```\w+\n(.*?)```", README.read_text(), re.S)
    assert match, f"README has no example {name!r}"
    return match.group(1)


def write_store(project: Path) -> None:
    docs = project / "data" / "documents"
    (docs / "pumps").mkdir(parents=True)
    (docs / "pumps" / "acme.txt").write_text("Acme Corp. builds pumps. Its maintenance team repairs them in a day.")
    (docs / "owls").mkdir()
    (docs / "owls" / "owl.md").write_text("# Owls\n\nOwls hunt at night. Their flight is almost silent.")


def test_definitions_example_materializes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "definitions.py").write_text(readme_block("definitions.py"))
    write_store(project)
    monkeypatch.chdir(project)
    spec = importlib.util.spec_from_file_location("readme_definitions", project / "definitions.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_definitions"] = module
    try:
        spec.loader.exec_module(module)
        defs: dg.Definitions = module.defs
        table = module.minilm
        dg.Definitions.validate_loadable(defs)
        (tmp_path / "home").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
            sync_partitions(instance, DocumentStore.from_path(project / "data" / "documents"), table.partitions_def)
            keys = instance.get_dynamic_partitions(table.partitions_def.name)
            assert keys == ["owls", "pumps"]
            result = defs.resolve_job_def(table.jobs[0].name).execute_in_process(
                instance=instance,
                tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
                raise_on_error=False,
            )
            assert result.success
            assert all(c.passed for c in result.get_asset_check_evaluations())
    finally:
        sys.modules.pop("readme_definitions", None)
    rows = sink.connect(str(project / "data" / "lancedb")).open_table("chunks_minilm").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == {"pumps/acme.txt", "owls/owl.md"}


def test_component_yaml_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm_dir: Path) -> None:
    import yaml
    from dagster.components.testing import create_defs_folder_sandbox

    from latechunk_dagster.integration.component import LateChunkComponent

    monkeypatch.setenv("LATECHUNK_MODEL", str(minilm_dir))
    contents = yaml.safe_load(readme_block("defs.yaml"))
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(component_cls=LateChunkComponent, defs_yaml_contents=contents)
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, LateChunkComponent)
            assert component.engine == {"model": str(minilm_dir), "gpu_memory_utilization": 0.1}
            key = dg.AssetKey(["minilm", "chunk_vectors"])
            assert defs.resolve_assets_def(key).key == key
            assert {s.name for s in defs.sensors} == {"minilm_chunk_vectors_store_sensor"}
