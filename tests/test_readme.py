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


def _readme_text() -> str:
    """The README with its line breaks and indentation folded to single spaces."""
    return " ".join(README.read_text().split())


def _document_errors() -> set[type]:
    """Every ``DocumentError`` subclass defined in the package's core (engines included)."""
    import importlib
    import pkgutil

    import latechunk_dagster.core
    from latechunk_dagster.core.errors import DocumentError

    for mod in pkgutil.walk_packages(latechunk_dagster.core.__path__, "latechunk_dagster.core."):
        importlib.import_module(mod.name)
    found, todo = set(), [DocumentError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("latechunk_dagster.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_readme_names_every_document_error_and_the_root_exports_them() -> None:
    import latechunk_dagster
    from latechunk_dagster.core import errors

    text = _readme_text()
    found = _document_errors()
    assert len(found) >= 10
    assert not [e.__name__ for e in found if f"`{e.__name__}`" not in text]
    # the ones of the core's error module are importable from the package root
    assert not [
        e.__name__ for e in found if e.__module__ == errors.__name__ and not hasattr(latechunk_dagster, e.__name__)
    ]


def _defaults() -> list[tuple[str, str]]:
    """(what the README says, where the value comes from) for each default the README states."""
    import inspect

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.core.chunker import DEFAULT_STRATEGY_TIMEOUT_S
    from latechunk_dagster.core.windows import default_overlap
    from latechunk_dagster.integration.factory import DEFAULT_STRATEGY, ENGINE_POOL
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.pipeline.config import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS
    from latechunk_dagster.pipeline.partition import PROGRESS_INTERVAL
    from latechunk_dagster.sink.indexing import ANN_MIN_ROWS, HNSW_M, SEARCH_EF, SEARCH_REFINE_FACTOR

    factory = inspect.signature(late_chunk_assets).parameters
    partition = inspect.signature(materialize_partition).parameters
    share = {0.5: "half"}[partition["max_rejected_share"].default]
    fraction = {2: "a half", 4: "a quarter", 8: "an eighth"}[512 // default_overlap(512)]
    return [
        (f"({CPU_BATCH_TOKENS:,} on the CPU, {GPU_BATCH_TOKENS:,} on a GPU)", "pipeline.config"),
        (f"default overlap is {fraction} of the window", "core.windows.default_overlap"),
        (f"`ANN_MIN_ROWS` ({ANN_MIN_ROWS // 1000}k)", "sink.indexing.ANN_MIN_ROWS"),
        (f"(m={HNSW_M}) and searches use ef={SEARCH_EF} with refine_factor={SEARCH_REFINE_FACTOR}", "sink.indexing"),
        (f"`strategy_timeout_s` seconds (default {DEFAULT_STRATEGY_TIMEOUT_S:g})", "core.chunker"),
        (f"(margin in nDCG points, default {factory['eval_margin'].default:g})", "late_chunk_assets(eval_margin)"),
        (f"the pool `{ENGINE_POOL}`", "integration.factory.ENGINE_POOL"),
        (f"{DEFAULT_STRATEGY.params()['max_tokens']}-token late chunks", "integration.factory.DEFAULT_STRATEGY"),
        (
            f"at least {share} of {partition['systemic_min_documents'].default} or more",
            "materialize_partition(max_rejected_share, systemic_min_documents)",
        ),
        (f"every {PROGRESS_INTERVAL:g} s", "pipeline.partition.PROGRESS_INTERVAL"),
    ]


def test_readme_defaults_are_the_code_s() -> None:
    text = _readme_text()
    missing = [(phrase, source) for phrase, source in _defaults() if phrase not in text]
    assert not missing, f"the README does not say these defaults as the code has them: {missing}"
