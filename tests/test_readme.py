"""The README and the guides in ``docs/``: the Dagster examples run as written, and what they say.

The README's ``definitions.py`` is written to a temporary project directory (its relative paths
``data/...`` resolve there), imported, and its job materializes a small store for real. The
``defs.yaml`` of docs/dagster.md is loaded as a component in a ``dg`` sandbox, and the real ``dg``
command lists the component. The rest checks the files a user reads: example names unique and
each marker with its block, links that stay in the repository and resolve, every guide linked
from the README, the README short, the errors and defaults stated as the code has them.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from latechunk_dagster import sink
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.sources.files import DocumentStore
from tests.doc_examples import MARKER, ROOT, documents, example, examples

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def write_store(project: Path) -> None:
    docs = project / "data" / "documents"
    (docs / "pumps").mkdir(parents=True)
    (docs / "pumps" / "acme.txt").write_text("Acme Corp. builds pumps. Its maintenance team repairs them in a day.")
    (docs / "owls").mkdir()
    (docs / "owls" / "owl.md").write_text("# Owls\n\nOwls hunt at night. Their flight is almost silent.")


def test_definitions_example_materializes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "definitions.py").write_text(example("definitions.py"))
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
    contents = yaml.safe_load(example("defs.yaml"))
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(component_cls=LateChunkComponent, defs_yaml_contents=contents)
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, LateChunkComponent)
            assert component.engine == {"model": str(minilm_dir), "gpu_memory_utilization": 0.1}
            key = dg.AssetKey(["minilm", "chunk_vectors"])
            assert defs.resolve_assets_def(key).key == key
            assert {s.name for s in defs.sensors} == {"minilm_chunk_vectors_store_sensor"}


def _text(path: Path) -> str:
    """A README or guide with its line breaks and indentation folded to single spaces."""
    return " ".join(path.read_text(encoding="utf-8").split())


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


def test_pipeline_guide_names_every_document_error_and_the_root_exports_them() -> None:
    import latechunk_dagster
    from latechunk_dagster.core import errors

    text = _text(DOCS / "pipeline.md")
    found = _document_errors()
    assert len(found) >= 10
    assert not [e.__name__ for e in found if f"`{e.__name__}`" not in text]
    # the ones of the core's error module are importable from the package root
    assert not [
        e.__name__ for e in found if e.__module__ == errors.__name__ and not hasattr(latechunk_dagster, e.__name__)
    ]


def _defaults() -> list[tuple[str, str, str]]:
    """(the file that states it, what it says, where the value comes from) for each default stated."""
    import inspect

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.core.chunker import DEFAULT_STRATEGY_TIMEOUT_S
    from latechunk_dagster.core.windows import default_overlap
    from latechunk_dagster.integration.factory import DEFAULT_STRATEGY, ENGINE_POOL
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.pipeline.config import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS
    from latechunk_dagster.pipeline.partition import PROGRESS_INTERVAL
    from latechunk_dagster.pipeline.removals import DEFAULT_MAX_DELETE
    from latechunk_dagster.sink.indexing import ANN_MIN_ROWS, HNSW_M
    from latechunk_dagster.sink.queries import SEARCH_EF, SEARCH_NPROBES, SEARCH_REFINE_FACTOR

    factory = inspect.signature(late_chunk_assets).parameters
    partition = inspect.signature(materialize_partition).parameters
    share = {0.5: "half"}[partition["max_rejected_share"].default]
    fraction = {2: "a half", 4: "a quarter", 8: "an eighth"}[512 // default_overlap(512)]
    return [
        ("pipeline.md", f"({CPU_BATCH_TOKENS:,} on the CPU, {GPU_BATCH_TOKENS:,} on a GPU)", "pipeline.config"),
        ("pipeline.md", f"default overlap is {fraction} of the window", "core.windows.default_overlap"),
        ("pipeline.md", f"({default_overlap(256)} tokens of a 256-token window)", "core.windows.default_overlap"),
        ("pipeline.md", f"`ANN_MIN_ROWS` ({ANN_MIN_ROWS // 1000}k)", "sink.indexing.ANN_MIN_ROWS"),
        (
            "pipeline.md",
            f"(m={HNSW_M}) and searches use ef={SEARCH_EF} with refine_factor={SEARCH_REFINE_FACTOR}, probing "
            f"nprobes={SEARCH_NPROBES}",
            "sink.indexing",
        ),
        ("pipeline.md", f"`strategy_timeout_s` seconds (default {DEFAULT_STRATEGY_TIMEOUT_S:g})", "core.chunker"),
        (
            "querying.md",
            f"(margin in nDCG points, default {factory['eval_margin'].default:g})",
            "late_chunk_assets(eval_margin)",
        ),
        ("dagster.md", f"the pool `{ENGINE_POOL}`", "integration.factory.ENGINE_POOL"),
        (
            "README.md",
            f"{DEFAULT_STRATEGY.params()['max_tokens']}-token late chunks",
            "integration.factory.DEFAULT_STRATEGY",
        ),
        (
            "pipeline.md",
            f"at least {share} of {partition['systemic_min_documents'].default} or more",
            "materialize_partition(max_rejected_share, systemic_min_documents)",
        ),
        ("pipeline.md", f"every {PROGRESS_INTERVAL:g} s", "pipeline.partition.PROGRESS_INTERVAL"),
        *(
            (doc, f"`LATECHUNK_MAX_DELETE` (default `{DEFAULT_MAX_DELETE:.0%}`)", "pipeline.removals")
            for doc in ("pipeline.md", "dagster.md")
        ),
        ("airflow.md", f"`LATECHUNK_MAX_DELETE`, else `{DEFAULT_MAX_DELETE:.0%}`", "pipeline.removals"),
        ("README.md", f"more than {({0.5: 'half'})[DEFAULT_MAX_DELETE]} of the known partitions", "pipeline.removals"),
    ]


def test_guides_state_the_defaults_as_the_code_has_them() -> None:
    missing = [
        (name, phrase, source)
        for name, phrase, source in _defaults()
        if phrase not in _text(README if name == "README.md" else DOCS / name)
    ]
    assert not missing, f"these defaults are not stated as the code has them: {missing}"


# -- the files a user reads ---------------------------------------------------------------------------


def test_example_names_are_unique_and_each_marker_has_its_block() -> None:
    found = examples()  # asserts both, naming the file
    markers = [name for path in documents() for name in MARKER.findall(path.read_text(encoding="utf-8"))]
    assert sorted(markers) == sorted(found)
    # the three short examples stay in the README; the others live in the guides
    assert {name for name, (path, _) in found.items() if path == README} == {
        "definitions.py",
        "airflow-connection",
        "latechunk_dag.py",
        "search.py",
    }
    assert {
        "defs.yaml",
        "airflow-dag-test",
        "search_with_langchain.py",
        "llamaindex.py",
        "hybrid.py",
        "chunker.py",
    } <= set(found)


def test_no_example_file_shadows_a_package_it_or_another_example_imports() -> None:
    """Issue 40.6: the LangChain example was named `langchain.py`; saved under that name beside the
    LlamaIndex example, `import langchain...` found the example, not the package. No example's file
    name is the top-level name of a module any example imports, of an installed module, or of the
    query libraries' own packages (``langchain`` is LangChain's, installed or not)."""
    import importlib.util
    import re as regex

    found = examples()
    imported = {
        m for _, body in found.values() for m in regex.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", body, regex.M)
    }
    names = {name.removesuffix(".py") for name in found if name.endswith(".py")}
    taken = {n for n in names if n in imported | {"langchain", "llama_index"} or importlib.util.find_spec(n)}
    assert taken == set(), taken


def test_a_marker_without_its_block_or_a_name_twice_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper fails loudly, naming the file, rather than handing a test the wrong block."""
    from tests import doc_examples

    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("<!-- example: a.py -->\n```python\nx = 1\n```\n")
    (tmp_path / "docs" / "g.md").write_text("<!-- example: b.py -->\nno block here\n")
    monkeypatch.setattr(doc_examples, "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"docs/g\.md: the example 'b\.py' has no fenced block"):
        doc_examples.examples()
    (tmp_path / "docs" / "g.md").write_text("<!-- example: a.py -->\n```\ny = 2\n```\n")
    with pytest.raises(AssertionError, match=r"'a\.py' is in both README\.md and docs/g\.md"):
        doc_examples.examples()
    (tmp_path / "docs" / "g.md").write_text("<!-- example: c.sh -->\n```bash\necho hi\n```\n")
    assert doc_examples.example("a.py") == "x = 1\n" and doc_examples.example("c.sh") == "echo hi\n"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))  # no headings inside code
    return {_slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}


def test_nothing_a_user_reads_points_outside_the_repository() -> None:
    """Links of the README and the guides resolve to files in the repository (and to headings that
    exist), and no path in them climbs out of it (``../shared/...``, a machine's absolute path)."""
    problems = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                problems.append(f"{where}: link {target} leaves the repository or names nothing")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                problems.append(f"{where}: link {target} names no heading of {resolved.name}")
        for climb in re.findall(r"(?<![\w./])((?:\.\./)+[\w./-]*)", text):
            if not (path.parent / climb).resolve().is_relative_to(ROOT):
                problems.append(f"{where}: {climb} is outside the repository")
        problems += [f"{where}: {p}" for p in re.findall(r"(?<![\w.])/(?:work|root)/[\w./-]+", text)]
        problems += [f"{where}: {p}" for p in re.findall(r"\bshared/ENVIRONMENT\.md|\bSPEC\.md", text)]
    assert problems == []


def test_the_readme_links_every_guide_and_stays_short() -> None:
    text = README.read_text(encoding="utf-8")
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in re.findall(r"\]\((docs/[^)\s]+)\)", text)}
    assert [g.name for g in sorted(DOCS.glob("*.md")) if g.resolve() not in linked] == []
    assert len(text.splitlines()) <= 230, "the README is read in five minutes: about 200 lines"


# -- Dagster's dg command ---------------------------------------------------------------------------------


def test_dg_lists_the_component(tmp_path: Path) -> None:
    """The real ``dg`` CLI (dagster-dg-cli, installed by the Makefile) finds the component through the
    package's ``dagster_dg_cli.registry_modules`` entry point, under the ``type:`` of the guide's
    ``defs.yaml``. Run outside any project: the listing is of the Python environment."""
    import yaml

    dg_cli = Path(sys.executable).parent / "dg"
    assert dg_cli.exists(), f"{dg_cli} is missing: the Makefile installs dagster-dg-cli into the venv"
    out = subprocess.run(
        [str(dg_cli), "list", "components", "--json"],
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    listed = {item["key"]: item["summary"] for item in json.loads(out.stdout)["items"]}
    key = yaml.safe_load(example("defs.yaml"))["type"]
    assert key == "latechunk_dagster.integration.component.LateChunkComponent"
    from latechunk_dagster.integration.component import LateChunkComponent

    assert listed.get(key) == LateChunkComponent.__doc__.splitlines()[0]
