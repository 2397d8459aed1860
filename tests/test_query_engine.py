"""Issue 30: the light transformers engine for queries, and the engine choice in the lineage.

One real table of standard-library docstrings written by the pipeline on the vLLM engine (the
module's ``chunker``). Queries embedded by the transformers engine must find the same top hits at
the same distances (1e-6) as the vLLM engine's; ``latechunk search`` must use it (it runs while
this process holds a live in-process vLLM engine, beside which no second vLLM engine can start); a
table written by another model or head is refused naming the difference; a partition re-encoded by
another engine is re-encoded once and its rows name the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import transformers

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.app import cli
from latechunk_dagster.app.demo_corpus import build_demo_store
from latechunk_dagster.clients import LangChainEmbeddings, LlamaIndexEmbedding
from latechunk_dagster.core.engines.vllm_local import _IN_PROCESS_ENGINES
from latechunk_dagster.evaluation import LabeledQuery, Passage, evaluate_table
from latechunk_dagster.pipeline import materialize_partition, vector_config
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import DocumentStore

MODULES = ["bz2", "csv", "getopt", "gzip", "zlib"]
QUERIES = ["compress data with zlib", "parse command-line options", "read and write CSV files"]
STRATEGY = Sentences(max_tokens=128)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, chunker: LateChunker) -> str:
    """``chunks``: the demo docstrings of :data:`MODULES`, written by the pipeline on the vLLM engine."""
    root = tmp_path_factory.mktemp("query-engine")
    store = DocumentStore.from_path(build_demo_store(root / "documents", modules=MODULES))
    settings = LanceDBSettings(uri=str(root / "lancedb"))
    chunks = settings.chunk_table(sink.CHUNK_TABLE, chunker.embedding_dim)
    rejected = settings.rejected_table(sink.REJECTED_TABLE)
    for shard in store.shards():
        materialize_partition(
            chunker, store.iter_shard(shard), shard, STRATEGY, chunk_table=chunks, rejected_table=rejected, run_id="r1"
        )
    return settings.uri


@pytest.fixture(scope="module")
def light(minilm_dir: Path) -> Any:
    with LateChunker(minilm_dir, engine="transformers") as c:
        yield c


def copy_with(db: str, dest: Path, **columns: str) -> str:
    """The chunk table of ``db`` copied into a database at ``dest`` with lineage ``columns`` replaced."""
    rows = sink.connect(db).open_table(sink.CHUNK_TABLE).to_arrow()
    for name, value in columns.items():
        i = rows.schema.get_field_index(name)
        rows = rows.set_column(i, rows.schema.field(i), pa.array([value] * rows.num_rows, pa.string()))
    sink.connect(str(dest)).create_table(sink.CHUNK_TABLE, rows)
    return str(dest)


def test_the_light_engine_finds_the_vllm_engines_hits(db: str, chunker: LateChunker, light: LateChunker) -> None:
    assert light.settings.engine == "transformers" and light.engine is not None
    assert light.engine.describe().startswith(f"transformers {transformers.__version__} (torch ")
    assert chunker.settings.engine == "vllm"
    for q in QUERIES:
        want = search(q, chunker=chunker, uri=db, k=5, exact=True)
        got = search(q, chunker=light, uri=db, k=5, exact=True)
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want]
        assert np.abs(np.array([h.distance for h in got]) - [h.distance for h in want]).max() <= 1e-6
    # the query vectors themselves, and search(model=...), which loads the light engine for the call
    assert np.abs(light.embed_queries(QUERIES) - chunker.embed_queries(QUERIES)).max() <= 1e-6
    [best] = search(QUERIES[0], model=light.card.path, uri=db, k=1, exact=True)
    assert best.chunk_id == search(QUERIES[0], chunker=chunker, uri=db, k=1, exact=True)[0].chunk_id


def test_cli_search_embeds_queries_on_the_light_engine(
    db: str, chunker: LateChunker, capsys: pytest.CaptureFixture[str]
) -> None:
    """``latechunk search`` beside this process's live in-process vLLM engine: a second vLLM engine
    cannot start here (``RuntimeError``), so a CLI that started one would fail; it prints what
    ``search`` returns on the vLLM engine, and names the engine it used."""
    assert _IN_PROCESS_ENGINES, "the module's vLLM engine is live in this process"
    q = QUERIES[0]
    assert cli.main(["search", q, "--uri", db, "-k", "3", "--exact"]) == 0
    out, err = capsys.readouterr()
    assert f"queries embedded by transformers {transformers.__version__}" in err
    want = search(q, chunker=chunker, uri=db, k=3, exact=True)
    lines = out.strip().splitlines()
    assert lines[0] == "cosine_distance\tdoc_id\tchar_range\ttext"
    assert [line.split("\t")[1:3] for line in lines[1:]] == [[h.doc_id, str(h.char_range)] for h in want]
    assert [float(line.split("\t")[0]) for line in lines[1:]] == pytest.approx([h.distance for h in want], abs=5e-5)
    # --engine vllm is the documents' engine: it cannot start beside the live one in this process
    with pytest.raises(RuntimeError, match="another LateChunker runs its engine in this process"):
        cli.main(["search", q, "--uri", db, "--engine", "vllm"])


def test_the_query_process_makes_the_in_process_vector_and_says_its_errors(
    minilm_dir: Path, light: LateChunker, tmp_path: Path
) -> None:
    """``latechunk search`` embeds its query in a child process while it opens the table
    (``app/query_process.py``): the vector is the in-process light chunker's to the bit (one torch
    thread on both sides), with its lineage; a child's one-line error is the same line; a child still
    running when the command fails first is ended."""
    import torch

    from latechunk_dagster.app.query_process import QueryProcess

    q = QUERIES[1]
    child = QueryProcess(q, str(minilm_dir), {"dimensions": None})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        [want] = light.embed_queries([q])
    finally:
        torch.set_num_threads(threads)
    got = child.result()
    child.close()
    assert got.vector.dtype == np.float32 and got.vector.shape == (light.embedding_dim,)
    assert np.array_equal(got.vector, want)
    assert np.array_equal(got.embed_queries([q]), want[None, :])
    assert (got.card.fingerprint, got.card.name) == (light.card.fingerprint, light.card.name)
    assert (got.head.describe(), got.embedding_dim) == (light.head.describe(), light.embedding_dim)
    assert got.engine == light.engine.describe()
    with pytest.raises(ValueError, match="this embedding is of the query"):
        got.embed_queries(["another query"])
    bad = QueryProcess(q, str(tmp_path), {})
    with pytest.raises(ValueError, match="is not a model directory"):
        bad.result()
    bad.close()
    running = QueryProcess(q, str(minilm_dir), {})
    running.close()
    assert running.proc.returncode is not None


def test_a_table_the_query_model_cannot_reproduce_is_refused_naming_the_difference(
    db: str, light: LateChunker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other_model = copy_with(db, tmp_path / "other-model", model_sha256="ab" * 32, model_name="e5-small")
    fingerprint = light.card.fingerprint[:12]
    named = rf"holds? vectors of model abababababab \(e5-small\), the query model is {fingerprint} \("
    with pytest.raises(ValueError, match=named):
        search(QUERIES[0], chunker=light, uri=other_model)
    with pytest.raises(ValueError, match=named):
        LangChainEmbeddings(light.card.path, table=sink.connect(other_model).open_table(sink.CHUNK_TABLE))
    with pytest.raises(ValueError, match=named):
        LlamaIndexEmbedding(light, table=sink.connect(other_model).open_table(sink.CHUNK_TABLE))
    query = LabeledQuery("compress data with zlib", (Passage("zlib", None, 1),))
    with pytest.raises(ValueError, match=named):
        evaluate_table(light, sink.connect(other_model).open_table(sink.CHUNK_TABLE), [query])
    assert cli.main(["search", QUERIES[0], "--uri", other_model]) == 2
    err = capsys.readouterr().err
    assert f"holds vectors of model abababababab (e5-small), the query model is {fingerprint}" in err
    # the same model with another head (a Matryoshka cut that kept the width: written by hand here)
    other_head = copy_with(db, tmp_path / "other-head", head="cut(384)+l2")
    other_head_named = rf"{fingerprint} \(.*\) with the head cut\(384\)\+l2, the query model's head is l2:"
    with pytest.raises(ValueError, match=other_head_named):
        search(QUERIES[0], chunker=light, uri=other_head)
    # a table of the query model is accepted by the embedders, which then embed as search does
    table = sink.connect(db).open_table(sink.CHUNK_TABLE)
    with LangChainEmbeddings(light.card.path, table=table) as lc:
        assert lc.chunker is not light and lc.chunker.settings.engine == "transformers"
        assert np.abs(np.asarray(lc.embed_query(QUERIES[1])) - light.embed_queries([QUERIES[1]])[0]).max() == 0.0
    assert lc.chunker.engine is None, "the embedder closed the chunker it loaded"
    handed = LlamaIndexEmbedding(light, table=table)
    handed.close()
    assert light.engine is not None, "a chunker handed to an embedder stays open"


def test_a_change_of_engine_re_encodes_once_and_the_rows_name_the_engine(
    db: str, chunker: LateChunker, light: LateChunker, tmp_path: Path
) -> None:
    docs = DocumentStore.from_path(Path(db).parent / "documents").read_shard("f-g")
    assert {d.doc_id for d in docs} == {"getopt", "gzip"}
    settings = LanceDBSettings(uri=str(tmp_path / "lancedb"))
    table = settings.chunk_table("chunks", chunker.embedding_dim)
    rejected = settings.rejected_table("rejected")

    def run(c: LateChunker, run_id: str) -> Any:
        return materialize_partition(
            c, docs, "f-g", STRATEGY, chunk_table=table, rejected_table=rejected, run_id=run_id
        )

    def rows() -> pa.Table:
        return table.to_arrow().sort_by("chunk_id")

    assert run(chunker, "vllm").documents_new == len(docs)
    by_vllm = rows()
    assert set(by_vllm.column("vllm_version").to_pylist()) == {chunker.vllm_version}  # as before issue 30
    # another engine: every document re-encoded, as for another dtype; the rows say which engine
    assert vector_config(light.settings, STRATEGY) != vector_config(chunker.settings, STRATEGY)
    report = run(light, "light")
    assert (report.documents_reencoded, report.documents_skipped) == (len(docs), 0)
    by_light = rows()
    assert set(by_light.column("vllm_version").to_pylist()) == {f"transformers {transformers.__version__}"}
    assert set(by_light.column("run_id").to_pylist()) == {"light"}
    assert by_light.column("chunk_id").equals(by_vllm.column("chunk_id"))
    assert by_light.column("char_start").equals(by_vllm.column("char_start"))
    diff = np.abs(np.asarray(by_light.column("vector").to_pylist()) - np.asarray(by_vllm.column("vector").to_pylist()))
    assert diff.max() <= 1e-6
    # the same engine again: nothing to do; back to vLLM: re-encoded once more
    assert run(light, "light-again").documents_skipped == len(docs)
    assert run(chunker, "vllm-again").documents_reencoded == len(docs)
    assert pc.all(pc.equal(rows().column("vllm_version"), chunker.vllm_version)).as_py()


def test_engine_names_and_vllm_settings_of_the_light_engine_are_refused_by_name(minilm_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"engine must be one of \['vllm', 'transformers'\] or an Engine, got 'tf'"):
        LateChunker(minilm_dir, engine="tf")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"takes no vLLM arguments: dtype='bfloat16', gpu_memory_utilization=0.1"):
        LateChunker(minilm_dir, engine="transformers", dtype="bfloat16", gpu_memory_utilization=0.1)
    with pytest.raises(ValueError, match=r"takes no vLLM arguments: enforce_eager=True"):
        LateChunker(minilm_dir, engine="transformers", enforce_eager=True)


def test_the_component_yaml_chooses_the_transformers_engine(minilm_dir: Path, tmp_path: Path) -> None:
    """``engine: {kind: transformers, ...}`` in a component's YAML: a real Dagster run writes the
    partition on the light engine, and the rows and the materialization name it; an unknown kind is
    refused naming the known ones."""
    import dagster as dg
    from dagster.components.testing import create_defs_folder_sandbox

    from latechunk_dagster.integration.component import LateChunkComponent, engine_resource
    from latechunk_dagster.integration.resources import TransformersEngineResource
    from latechunk_dagster.integration.sensors import sync_partitions

    store, db = tmp_path / "store", tmp_path / "lancedb"
    (store / "north").mkdir(parents=True)
    (store / "north" / "pumps.txt").write_text("The pump in Lyon was repaired in spring. Its seals are new.")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=LateChunkComponent,
            defs_yaml_contents={
                "type": "latechunk_dagster.integration.component.LateChunkComponent",
                "attributes": {
                    "key_prefix": "light",
                    "table_name": "chunks_light",
                    "strategy": {"name": "fixed_tokens", "params": {"chunk_size": 8}},
                    "engine": {"kind": "transformers", "model": str(minilm_dir)},
                    "lancedb": {"uri": str(db)},
                    "store": {"path": str(store)},
                    "index": False,
                    "sensor": False,
                },
            },
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_component, defs):
            assert isinstance(defs.resources["engine"], TransformersEngineResource)
            assets_def = defs.resolve_assets_def(dg.AssetKey(["light", "chunk_vectors"]))
            (tmp_path / "home").mkdir()
            with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
                sync_partitions(instance, DocumentStore.from_path(store), assets_def.partitions_def)
                result = defs.resolve_job_def("light_chunk_vectors_job").execute_in_process(
                    instance=instance, partition_key="north"
                )
    assert result.success
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "chunk_vectors"]
    metadata = event.materialization.metadata
    assert metadata["engine"].value == "transformers"
    assert metadata["vllm_version"].value == f"transformers {transformers.__version__}"
    rows = sink.connect(str(db)).open_table("chunks_light").to_arrow()
    assert rows.num_rows >= 2 and set(rows.column("vllm_version").to_pylist()) == {
        f"transformers {transformers.__version__}"
    }
    with pytest.raises(ValueError, match=r"engine kind 'vlm' is not one of \['transformers', 'vllm'\]"):
        engine_resource({"kind": "vlm", "model": str(minilm_dir)})


def test_what_the_transformers_engine_cannot_serve_is_refused_by_name(minilm_dir: Path, tmp_path: Path) -> None:
    """A non-linear Dense (before the engine starts), a Dense module without weights, a model
    transformers cannot load, and an encoder input longer than the engine takes: one sentence each."""
    import json
    import shutil

    from latechunk_dagster import HeadNotSupportedError, ModelNotSupportedError
    from latechunk_dagster.core.engines.transformers_engine import TransformersEngine
    from tests.tiny_models import build_tiny_bert

    tanh = build_tiny_bert(tmp_path / "tanh", minilm_dir, dense=[(64, 32, "torch.nn.modules.activation.Tanh")])
    with pytest.raises(HeadNotSupportedError, match=r"dense\(64->32,Tanh\)\+l2 is non-linear"):
        LateChunker(tanh, engine="transformers")
    dense = build_tiny_bert(tmp_path / "dense", minilm_dir, dense=[(64, 32, "torch.nn.modules.linear.Identity")])
    (dense / "2_Dense" / "model.safetensors").unlink()
    with pytest.raises(ModelNotSupportedError, match=r"2_Dense: Dense module without weights"):
        LateChunker(dense, engine="transformers")
    unknown = Path(shutil.copytree(tmp_path / "tanh", tmp_path / "unknown"))
    shutil.rmtree(unknown / "2_Dense")
    modules = [m for m in json.loads((unknown / "modules.json").read_text()) if "Dense" not in m["type"]]
    (unknown / "modules.json").write_text(json.dumps(modules))
    config = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps(dict(config, model_type="imaginary-encoder")))
    with pytest.raises(ModelNotSupportedError, match=rf"unknown: transformers {transformers.__version__} could not"):
        LateChunker(unknown, engine="transformers")
    engine = TransformersEngine(minilm_dir, max_model_len=8)
    assert [s.shape for s in engine.token_states([[101, 102], [101, 7592, 102]])] == [(2, 384), (3, 384)]
    with pytest.raises(ValueError, match=r"encoder input 1 has 9 tokens; the engine takes 1 to 8"):
        engine.token_states([[101, 102], [101] * 9])
