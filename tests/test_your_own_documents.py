"""Issue 40 (1, 4, 7): trying your own documents after ``make demo``.

* Pointing a sync at another store deletes nothing unless told: a sync from a shell, a store
  sensor tick, and the demo's sync refuse to remove more than ``LATECHUNK_MAX_DELETE`` (default
  50%) of the known partitions at once, naming them and their rows; the embedded default keeps
  a ``LATECHUNK_DOCUMENT_STORE``'s tables apart from the demo's.
* Your own Dagster table runs from a shell: ``latechunk sync-partitions -f definitions.py``, then
  Dagster's own command, as docs/dagster.md's block shows (run here as written).
* The demo on your own store says what it skips instead of searching it with stdlib queries.

Through the surfaces a user meets: the ``latechunk`` command, the README's ``definitions.py``
loaded as a file, the store sensor evaluated by Dagster's ``build_sensor_context``, ``python -m
latechunk_dagster.app.demo`` (what ``make demo`` runs) and the demo's own sync step. The rows
compared come from a real materialization (the shared engine) of a store written here.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from latechunk_dagster import LateChunker, TooManyRemovalsError, load_definitions, sink, sync_definitions
from latechunk_dagster.app.demo import next_commands
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from tests.conftest import session_engine_resource
from tests.doc_examples import ROOT, example

#: four shards of one document each: the partitions the guard protects
SHARDS = {
    "a": "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day.",
    "b": "Owls hunt at night. Their feathers make their flight almost silent.",
    "c": "Green tea is steamed or pan-fired soon after picking to stop oxidation.",
    "d": "The river floods every spring. Farmers plant after the water recedes.",
}
VENV_BIN = Path(sys.executable).parent


def environ(**env: str) -> dict[str, str]:
    """The test's environment for a command: this checkout's code, the venv's commands first."""
    out = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **env}
    out["PATH"] = f"{VENV_BIN}{os.pathsep}{out.get('PATH', '')}"
    for name in ("LATECHUNK_MAX_DELETE", "LATECHUNK_DOCUMENT_STORE", "LATECHUNK_QUERIES"):
        if name not in env:
            out.pop(name, None)
    return out


def latechunk(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "latechunk_dagster.app.cli", *args],
        cwd=cwd,
        env=environ(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows_by_partition(db: Path, table: str = "chunks_minilm") -> dict[str, int]:
    out: dict[str, int] = {}
    for p in sink.connect(str(db)).open_table(table).to_arrow().column("partition").to_pylist():
        out[p] = out.get(p, 0) + 1
    return out


def instance_at(home: Path) -> dg.DagsterInstance:
    """The Dagster instance a process with ``DAGSTER_HOME=home`` uses (what the commands open)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()
    from dagster._core.instance.ref import InstanceRef

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


def write_shards(root: Path, shards: dict[str, str]) -> Path:
    for shard, text in shards.items():
        (root / shard).mkdir(parents=True, exist_ok=True)
        (root / shard / "doc.txt").write_text(text)
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory, chunker: LateChunker) -> Iterator[dict[str, Any]]:
    """The README's ``definitions.py`` in a folder of its own, its four shards synced (by the public
    ``sync_definitions``) and materialized in one real run. Yields the folder, its DAGSTER_HOME,
    the instance and the rows per partition."""
    root = tmp_path_factory.mktemp("project")
    (root / "definitions.py").write_text(example("definitions.py"))
    write_shards(root / "data" / "documents", SHARDS)
    instance = instance_at(root / "dagster_home")
    cwd = Path.cwd()
    os.chdir(root)  # the README's file names data/... relative to the project
    try:
        [synced] = sync_definitions(load_definitions(python_file="definitions.py"), instance)
        assert synced.added == ["a", "b", "c", "d"] and synced.removed == []
        minilm = runpy.run_path(str(root / "definitions.py"))["minilm"]
        defs = minilm.to_definitions(
            resources={
                "engine": session_engine_resource(chunker),
                "lancedb": LanceDBResource(uri=str(root / "data" / "lancedb")),
                "store": DocumentStoreResource(path=str(root / "data" / "documents")),
            },
            executor=dg.in_process_executor,
        )
        result = defs.resolve_job_def("minilm_chunk_vectors_job").execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "d"},
        )
        assert result.success
    finally:
        os.chdir(cwd)
    rows = rows_by_partition(root / "data" / "lancedb")
    assert sorted(rows) == ["a", "b", "c", "d"]
    yield {"root": root, "home": root / "dagster_home", "instance": instance, "rows": rows, "defs": defs}


@contextmanager
def another_folder(root: Path) -> Iterator[Path]:
    """``data/documents`` replaced by another folder (one shard, ``e``), as a user pointing the
    definitions at the wrong place; the original is put back after."""
    docs = root / "data" / "documents"
    docs.rename(root / "data" / "documents.kept")
    try:
        write_shards(docs, {"e": "A different folder: notes about bicycles."})
        yield docs
    finally:
        shutil.rmtree(docs)
        (root / "data" / "documents.kept").rename(docs)


def partitions(instance: dg.DagsterInstance) -> list[str]:
    return sorted(instance.get_dynamic_partitions("minilm_document_shards"))


# -- 1. nothing deleted unless told ---------------------------------------------------------------


def test_sync_of_your_definitions_refuses_to_remove_every_partition(project) -> None:
    root, home = project["root"], project["home"]
    with another_folder(root):
        out = latechunk(["sync-partitions", "-f", "definitions.py"], root, DAGSTER_HOME=str(home))
    assert out.returncode == 2, out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("latechunk sync-partitions: error:")]
    assert "refusing to remove 4 of 4 known partitions at once (100% > the limit of 50%)" in line
    assert "'a', 'b', 'c', 'd'" in line
    assert f"holding {sum(project['rows'].values())} rows ({sum(project['rows'].values())} chunks_minilm)" in line
    assert "latechunk sync-partitions -f definitions.py --max-delete 100%" in line and "Traceback" not in out.stderr
    assert partitions(project["instance"]) == ["a", "b", "c", "d"]  # nothing added ('e') or removed
    assert rows_by_partition(root / "data" / "lancedb") == project["rows"]


def test_store_sensor_tick_refuses_and_changes_nothing(project) -> None:
    root, instance = project["root"], project["instance"]
    sensor = project["defs"].resolve_sensor_def("minilm_chunk_vectors_store_sensor")
    with another_folder(root) as docs:
        resources = {
            "store": DocumentStoreResource(path=str(docs)),
            "lancedb": LanceDBResource(uri=str(root / "data/lancedb")),
        }
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            with pytest.raises(TooManyRemovalsError, match=r"refusing to remove 4 of 4 known partitions") as err:
                sensor(ctx)
    assert err.value.removed == ["a", "b", "c", "d"] and err.value.rows == {
        "chunks_minilm": sum(project["rows"].values()),
        "rejected_documents": 0,
    }
    assert "latechunk sync-partitions -f YOUR_DEFINITIONS.py --max-delete 100%" in str(err.value)
    assert partitions(instance) == ["a", "b", "c", "d"]
    assert rows_by_partition(root / "data" / "lancedb") == project["rows"]


def test_a_shard_under_the_limit_goes_and_more_only_when_told(project, tmp_path: Path) -> None:
    """A copy of the project (its tables and its Dagster instance): one shard of four leaves (25%):
    removed with its rows; then every other shard: refused until ``--max-delete 100%``."""
    root = tmp_path / "copy"
    shutil.copytree(project["root"], root)
    home = root / "dagster_home"
    db = root / "data" / "lancedb"
    shutil.rmtree(root / "data" / "documents" / "d")
    bad = latechunk(["sync-partitions", "-f", "definitions.py", "--max-delete", "lots"], root, DAGSTER_HOME=str(home))
    assert bad.returncode == 2 and "max_delete must be a share of the partitions" in bad.stderr
    out = latechunk(["sync-partitions", "-f", "definitions.py"], root, DAGSTER_HOME=str(home))
    assert out.returncode == 0, out.stderr
    assert "chunks_minilm (partitions minilm_document_shards): added none; removed ['d']" in out.stdout
    assert rows_by_partition(db) == {k: v for k, v in project["rows"].items() if k != "d"}
    with another_folder(root):
        refused = latechunk(["sync-partitions", "-f", "definitions.py"], root, DAGSTER_HOME=str(home))
        assert refused.returncode == 2 and "refusing to remove 3 of 3 known partitions" in refused.stderr
        env_bad = latechunk(
            ["sync-partitions", "-f", "definitions.py"], root, DAGSTER_HOME=str(home), LATECHUNK_MAX_DELETE="2"
        )
        assert env_bad.returncode == 2 and "LATECHUNK_MAX_DELETE must be a share" in env_bad.stderr
        told = latechunk(
            ["sync-partitions", "-f", "definitions.py", "--max-delete", "100%"], root, DAGSTER_HOME=str(home)
        )
        assert told.returncode == 0, told.stderr
        assert "added ['e']; removed ['a', 'b', 'c'] (and their rows)" in told.stdout
    assert rows_by_partition(db) == {}
    with instance_at(home) as instance:
        assert partitions(instance) == ["e"]


# -- 1 and 7. the demo on your own folder ------------------------------------------------------------


def demo_state(project: dict[str, Any], home: Path) -> dict[str, int]:
    """``$LATECHUNK_HOME`` after a demo: its tables (real rows, copied from the project's table) and
    the embedded default's partitions. Returns the rows per partition of each table."""
    rows = sink.connect(str(project["root"] / "data" / "lancedb")).open_table("chunks_minilm").to_arrow()
    db = sink.connect(str(home / "lancedb"))
    for name in ("chunks_sentences32", "chunks_sentences128"):
        db.create_table(name, data=rows)
    with instance_at(home / "dagster") as instance:
        instance.add_dynamic_partitions("document_shards", sorted(SHARDS))
    return rows_by_partition(home / "lancedb", "chunks_sentences32")


def notes(tmp_path: Path) -> Path:
    """A folder of four Markdown files (one shard, ``_root``), as in the issue."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i, text in enumerate(
        [
            "# Bicycles\n\nA derailleur moves the chain between sprockets.",
            "# Bread\n\nSourdough rises with wild yeast and lactic bacteria.",
            "# Tides\n\nThe moon's gravity raises the sea twice a day.",
            "# Bees\n\nA colony keeps its hive at 35 degrees in winter.",
        ]
    ):
        (folder / f"note{i}.md").write_text(text)
    return folder


def test_the_demos_sync_on_your_own_folder_deletes_no_demo_row(project, tmp_path: Path) -> None:
    home = tmp_path / "home"
    before = demo_state(project, home)
    folder = notes(tmp_path)
    script = (
        "import dagster as dg\n"
        "from latechunk_dagster.app import demo, settings\n"
        "settings.ensure_dagster_home()\n"
        "store, keys = demo.sync_store(dg.DagsterInstance.get())\n"
        "print('keys', keys)\n"
    )
    env = environ(LATECHUNK_HOME=str(home), LATECHUNK_DOCUMENT_STORE=str(folder))
    env.pop("DAGSTER_HOME", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    [line] = [x for x in out.stdout.splitlines() if x.startswith("store ")]
    own = re.search(r"its tables in (\S+) \(the demo's are kept apart\)", line)
    assert line.startswith(f"store {folder} (document tree): 1 shards (+1 -0)") and own, line
    assert Path(own[1]).parent.parent == home / "stores" and Path(own[1]).parent.name.startswith("notes-")
    assert "keys ['_root']" in out.stdout
    assert rows_by_partition(home / "lancedb", "chunks_sentences32") == before
    with instance_at(home / "dagster") as instance:
        assert sorted(instance.get_dynamic_partitions("document_shards")) == sorted(SHARDS)
    # the same, but at the demo's DAGSTER_HOME (a user who exported it): `make demo` refuses, changes nothing
    env["DAGSTER_HOME"] = str(home / "dagster")
    demo = subprocess.run(
        [sys.executable, "-m", "latechunk_dagster.app.demo"], env=env, capture_output=True, text=True, timeout=600
    )
    assert demo.returncode == 2, demo.stderr
    assert (
        "make demo: refusing to remove 4 of 4 known partitions" in demo.stderr and "'a', 'b', 'c', 'd'" in demo.stderr
    )
    with instance_at(home / "dagster") as instance:
        assert sorted(instance.get_dynamic_partitions("document_shards")) == sorted(SHARDS)  # no '_root'
    assert rows_by_partition(home / "lancedb", "chunks_sentences32") == before


def test_the_demo_on_your_own_folder_says_what_it_skips(project, tmp_path: Path) -> None:
    """`make demo` with LATECHUNK_DOCUMENT_STORE: no stdlib query is searched on the user's notes, no
    generated-set table is printed, and each skip has a line saying why and what to set; the demo's
    rows are untouched."""
    home = tmp_path / "home"
    before = demo_state(project, home)
    folder = notes(tmp_path)
    env = environ(LATECHUNK_HOME=str(home), LATECHUNK_DOCUMENT_STORE=str(folder))
    env.pop("DAGSTER_HOME", None)
    out = subprocess.run(
        [sys.executable, "-m", "latechunk_dagster.app.demo"], env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "materialized 1 partitions in one run: 4 documents" in out.stdout
    assert "searches: skipped: no labeled queries for this store; set LATECHUNK_QUERIES=" in out.stdout
    assert "generated context-dependent set: skipped (it scores the model on generated documents" in out.stdout
    assert "retrieval scores: skipped: no labeled queries (see the searches above)" in out.stdout
    assert out.stdout.count("set LATECHUNK_QUERIES=") == 1  # issue 51: the long reason once, not twice
    assert "parse command-line options" not in out.stdout and "| late" not in out.stdout
    # issue 51: a line per phase (with its wall time), nothing "failed", and the next commands at the end
    assert "encoding 1 shards in one run (engine start, then every shard): done in" in out.stdout
    assert "building the indexes (vector and full-text): done in" in out.stdout
    assert "failed" not in (out.stdout + out.stderr).lower()
    assert out.stdout.rstrip().splitlines()[-4:] == next_commands(str(folder)).splitlines()
    assert rows_by_partition(home / "lancedb", "chunks_sentences32") == before


# -- 4. your own Dagster table from a shell ------------------------------------------------------------


def test_first_run_of_your_own_table_from_a_shell_as_the_guide_shows(tmp_path: Path) -> None:
    """docs/dagster.md's block, run as written from an empty folder (bash, the venv's commands on
    PATH): the partition is materialized and searched. Its definitions.py is the README's."""
    block = example("first-run.sh")
    written = re.search(r"cat > definitions.py <<'EOF'\n(.*?)^EOF$", block, re.S | re.M)
    assert written and written[1] == example("definitions.py")
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=tmp_path,
        env=environ(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "chunks_minilm (partitions minilm_document_shards): added ['pumps']; removed none" in out.stdout
    assert "RUN_SUCCESS" in out.stderr + out.stdout
    hits = [x for x in out.stdout.splitlines() if "\tpumps/acme.txt\t" in x]
    assert len(hits) == 2 and all("maintenance team" in hit for hit in hits)  # vector, then hybrid (the index)
    rows = sink.connect(str(tmp_path / "my-table" / "data" / "lancedb")).open_table("chunks_minilm").to_arrow()
    assert set(rows.column("partition").to_pylist()) == {"pumps"}


def test_the_demo_searches_your_store_with_your_queries_only(tmp_path: Path) -> None:
    """The demo's searches: the stdlib queries on the demo store; on your store the first three of
    LATECHUNK_QUERIES, in file order, or none (the demo then prints why: the test above)."""
    folder = notes(tmp_path)
    queries = tmp_path / "queries.jsonl"
    lines = [("how do bees keep warm?", "note3"), ("what moves a bicycle chain?", "note0")]
    lines += [("why do tides rise?", "note2"), ("what makes sourdough rise?", "note1")]
    queries.write_text("".join(f'{{"query": "{q}", "doc_id": "{d}"}}\n' for q, d in lines))
    script = "from latechunk_dagster.app import demo\nprint(demo.demo_queries())\n"

    def demo_queries(**env: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", script],
            env=environ(LATECHUNK_HOME=str(tmp_path / "home"), **env),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert demo_queries(LATECHUNK_DOCUMENT_STORE=str(folder), LATECHUNK_QUERIES=str(queries)) == str(
        [q for q, _ in lines[:3]]
    )
    assert demo_queries(LATECHUNK_DOCUMENT_STORE=str(folder)) == "[]"
    from latechunk_dagster.app.demo import QUERIES

    assert demo_queries() == str(QUERIES)


def test_sync_partitions_takes_a_dg_projects_definitions_function(tmp_path: Path) -> None:
    """A `dg` project's definitions.py holds a ``@dg.definitions`` function, not a ``Definitions``:
    ``-f`` and ``-m`` load it as Dagster does, and a module holding neither is named."""
    readme = example("definitions.py")
    lazy = readme.replace(
        "defs = dg.Definitions.merge(",
        "@dg.definitions\ndef defs() -> dg.Definitions:\n    return dg.Definitions.merge(",
    )
    assert lazy != readme
    (tmp_path / "project_defs.py").write_text(lazy)
    (tmp_path / "empty_defs.py").write_text("X = 1\n")
    write_shards(tmp_path / "data" / "documents", {"a": SHARDS["a"]})
    home = tmp_path / "dagster_home"
    instance_at(home).dispose()
    out = latechunk(["sync-partitions", "-m", "project_defs"], tmp_path, DAGSTER_HOME=str(home))
    assert out.returncode == 0, out.stderr
    assert "chunks_minilm (partitions minilm_document_shards): added ['a']; removed none" in out.stdout
    empty = latechunk(["sync-partitions", "-f", "empty_defs.py"], tmp_path, DAGSTER_HOME=str(home))
    assert empty.returncode == 2 and "cannot load the definitions of empty_defs.py: No Definitions" in empty.stderr
    unset = latechunk(["sync-partitions", "-f", "project_defs.py"], tmp_path, DAGSTER_HOME="")
    assert unset.returncode == 2 and "set DAGSTER_HOME" in unset.stderr


def test_the_demo_names_a_missing_store_or_a_bad_query_file_in_one_line(tmp_path: Path) -> None:
    """Before anything runs or is synced: one line naming the path, exit 2, no traceback."""
    bad = tmp_path / "queries.jsonl"
    bad.write_text("not json\n")
    for env, message in (
        ({"LATECHUNK_DOCUMENT_STORE": str(tmp_path / "nope")}, f"make demo: document store not found: {tmp_path}/nope"),
        (
            {"LATECHUNK_DOCUMENT_STORE": str(notes(tmp_path)), "LATECHUNK_QUERIES": str(bad)},
            f"make demo: {bad}: line 1: invalid JSON",
        ),
    ):
        run_env = environ(LATECHUNK_HOME=str(tmp_path / "home"), **env)
        run_env.pop("DAGSTER_HOME", None)
        out = subprocess.run(
            [sys.executable, "-m", "latechunk_dagster.app.demo"],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith(message), out.stderr
