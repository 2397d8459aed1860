"""The asset factory in a user's project: two tables side by side, documents from an upstream asset,
the component from YAML, and every docstring example run as written.

Real engines (one per run: each run starts and closes its own in-process vLLM engine), real
LanceDB in temp directories, real Dagster runs on a temporary instance.
"""

import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import FixedTokens, LateChunkTranslator, late_chunk_assets, sink
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.integration.server_resource import VLLMServerEngineResource
from latechunk_dagster.sources.files import DocumentStore
from tests.conftest import TEST_ENGINE_ARGS
from tests.reference import reference_chunk_vectors, reference_token_ids
from tests.tiny_models import build_tiny_bert

DOCS = {
    "north/a.txt": "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day.",
    "north/b.txt": "Owls hunt at night. Their feathers make their flight almost silent.",
    "south/c.txt": "Green tea is steamed or pan-fired soon after picking to stop oxidation.",
}


def engine(model: Path) -> VLLMEngineResource:
    return VLLMEngineResource(model=str(model), **TEST_ENGINE_ARGS)


def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir(exist_ok=True)
    return tmp_path / "home"


def write_store(root: Path) -> Path:
    for rel, text in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def materialize(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, keys: list[str]) -> Any:
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    return defs.resolve_job_def(job).execute_in_process(instance=instance, tags=tags, raise_on_error=False)


def test_two_tables_of_two_models_side_by_side(tmp_path: Path, minilm_dir: Path) -> None:
    """The shipped model (384 dims) and a tiny model (64 dims), one store, one LanceDB, two tables."""
    tiny = build_tiny_bert(tmp_path / "tiny", minilm_dir)
    store, db = write_store(tmp_path / "store"), tmp_path / "lancedb"
    shards = dg.DynamicPartitionsDefinition(name="shards")
    minilm = late_chunk_assets(
        key_prefix="minilm", partitions_def=shards, table_name="chunks_minilm", model=str(minilm_dir)
    )
    small = late_chunk_assets(
        key_prefix="tiny",
        partitions_def=shards,
        table_name="chunks_tiny",
        rejected_table_name="rejected_tiny",
        engine_resource_key="tiny_engine",
        strategy=FixedTokens(chunk_size=8),
        model=str(tiny),
        sensor=False,
    )
    defs = dg.Definitions.merge(
        minilm.to_definitions(),
        small.to_definitions(),
        dg.Definitions(
            resources={
                "engine": engine(minilm_dir),
                "tiny_engine": engine(tiny),
                "lancedb": LanceDBResource(uri=str(db)),
                "store": DocumentStoreResource(path=str(store)),
            }
        ),
    )
    assert minilm.chunk_asset.key == dg.AssetKey(["minilm", "chunk_vectors"])
    assert small.chunk_asset.key == dg.AssetKey(["tiny", "chunk_vectors"])
    assert minilm.documents_asset.key != small.documents_asset.key
    assert {s.name for s in defs.sensors} == {"minilm_chunk_vectors_store_sensor"}
    with dg.instance_for_test(temp_dir=str(home(tmp_path))) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), shards)
        # two runs: one in-process vLLM engine per process, each run starts and closes its own
        for table in (minilm, small):
            result = materialize(defs, table.jobs[0].name, instance, ["north", "south"])
            assert result.success
            checks = result.get_asset_check_evaluations()
            assert len(checks) == 6 and all(c.passed for c in checks), [c.metadata for c in checks if not c.passed]
    conn = sink.connect(str(db))
    assert set(conn.list_tables().tables) == {"chunks_minilm", "rejected_documents", "chunks_tiny", "rejected_tiny"}
    big, little = conn.open_table("chunks_minilm").to_arrow(), conn.open_table("chunks_tiny").to_arrow()
    assert big.schema.field("vector").type.list_size == 384 and little.schema.field("vector").type.list_size == 64
    assert set(big.column("doc_id").to_pylist()) == set(little.column("doc_id").to_pylist()) == set(DOCS)
    # the tiny table holds FixedTokens(8) chunks: the owl document's vectors equal an independent reference
    owl = little.filter(pa.compute.equal(little.column("doc_id"), "north/b.txt")).sort_by("chunk_index")
    spans = list(zip(owl.column("token_start").to_pylist(), owl.column("token_end").to_pylist()))
    assert all(e - s == 8 for s, e in spans[:-1])
    want = reference_chunk_vectors(tiny, reference_token_ids(tiny, DOCS["north/b.txt"]), spans)
    np.testing.assert_allclose(np.array(owl.column("vector").to_pylist()), want, atol=1e-4)


def test_documents_from_an_upstream_asset_with_static_partitions(tmp_path: Path, minilm_dir: Path) -> None:
    regions = dg.StaticPartitionsDefinition(["eu", "us"])
    texts = {"eu": {"e1": DOCS["north/a.txt"], "e2": DOCS["north/b.txt"]}, "us": {"u1": DOCS["south/c.txt"]}}

    @dg.asset(partitions_def=regions)
    def raw_documents(context: dg.AssetExecutionContext) -> pa.Table:
        docs = texts[context.partition_key]
        return pa.table({"doc_key": list(docs), "body": list(docs.values())})

    table = late_chunk_assets(
        documents=raw_documents, partitions_def=regions, id_column="doc_key", text_column="body", sensor=False
    )
    assert table.documents_asset is None and table.sensors == []
    defs = dg.Definitions(
        assets=[raw_documents, *table.assets],
        asset_checks=table.asset_checks,
        resources={
            "engine": engine(minilm_dir),
            "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
            "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io")),
        },
    )
    with dg.instance_for_test(temp_dir=str(home(tmp_path))) as instance:
        for region in ("eu", "us"):
            result = dg.materialize(
                [raw_documents, table.chunk_asset, *table.asset_checks],
                partition_key=region,
                instance=instance,
                resources=defs.resources,
            )
            assert result.success
            checks = result.get_asset_check_evaluations()
            assert {c.check_name for c in checks} == {
                "vectors_valid",
                "spans_tile",
                "unique_chunk_ids",
                "documents_accounted",
                "row_count_matches",
            }
            assert all(c.passed for c in checks), [c.metadata for c in checks if not c.passed]
    rows = sink.connect(str(tmp_path / "db")).open_table("chunks").to_arrow()
    assert sorted(set(zip(rows.column("partition").to_pylist(), rows.column("doc_id").to_pylist()))) == [
        ("eu", "e1"),
        ("eu", "e2"),
        ("us", "u1"),
    ]


def test_component_loads_from_yaml_and_materializes(tmp_path: Path, minilm_dir: Path) -> None:
    from dagster.components.testing import create_defs_folder_sandbox

    from latechunk_dagster.integration.component import LateChunkComponent

    store, db = write_store(tmp_path / "store"), tmp_path / "lancedb"
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=LateChunkComponent,
            defs_yaml_contents={
                "type": "latechunk_dagster.integration.component.LateChunkComponent",
                "attributes": {
                    "key_prefix": "docs",
                    "table_name": "chunks_yaml",
                    "strategy": {"name": "fixed_tokens", "params": {"chunk_size": 16}},
                    "engine": {"model": str(minilm_dir), **TEST_ENGINE_ARGS},
                    "lancedb": {"uri": str(db)},
                    "store": {"path": str(store)},
                },
            },
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            assert isinstance(component, LateChunkComponent)
            chunk_key = dg.AssetKey(["docs", "chunk_vectors"])
            assets_def = defs.resolve_assets_def(chunk_key)
            assert "fixed_tokens(chunk_size=16)" in assets_def.code_versions_by_key[chunk_key]
            with dg.instance_for_test(temp_dir=str(home(tmp_path))) as instance:
                sync_partitions(
                    instance,
                    DocumentStore.from_path(store),
                    assets_def.partitions_def,  # type: ignore[arg-type]
                )
                result = materialize(defs, "docs_chunk_vectors_job", instance, ["north", "south"])
                assert result.success
                assert all(c.passed for c in result.get_asset_check_evaluations())
    rows = sink.connect(str(db)).open_table("chunks_yaml").to_arrow()
    assert set(rows.column("doc_id").to_pylist()) == set(DOCS)
    assert set(rows.column("strategy").to_pylist()) == {"fixed_tokens(chunk_size=16)"}


def _docstring_examples(obj: object) -> list[str]:
    """The ``Example::`` blocks of a docstring, dedented."""
    doc = inspect.getdoc(obj) or ""
    blocks = re.findall(r"Example.*?::\n\n((?:(?: {4}.*)?\n)+)", doc + "\n", flags=re.S)
    return [textwrap.dedent(b) for b in blocks]


def test_fixed_value_fields_are_validated_by_dagster() -> None:
    with pytest.raises(Exception, match="token_states"):
        VLLMEngineResource(model="m", engine_path="nope")  # type: ignore[arg-type]
    with pytest.raises(Exception, match="bfloat16"):
        VLLMEngineResource(model="m", dtype="bf16")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "obj",
    [
        VLLMEngineResource,
        VLLMServerEngineResource,
        LanceDBResource,
        DocumentStoreResource,
        LateChunkTranslator,
        late_chunk_assets,
    ],
    ids=lambda o: o.__name__,
)
def test_docstring_examples_run_as_written(obj: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    [example] = _docstring_examples(obj)
    namespace: dict[str, Any] = {}
    exec(compile(example, f"<{obj.__name__} example>", "exec"), namespace)  # type: ignore[attr-defined]
    defs = namespace.get("defs")
    if isinstance(defs, dg.Definitions):
        dg.Definitions.validate_loadable(defs)


def test_run_config_refuses_fields_the_strategy_ignores() -> None:
    """From a user trial: `chunk_size` with the sentences strategy (or `language` with fixed_tokens) was
    silently ignored and every document re-encoded anyway; now the run fails before the engine loads."""
    from latechunk_dagster import Sentences
    from latechunk_dagster.integration.assets import ChunkingConfig

    default = Sentences(max_tokens=128)
    with pytest.raises(ValueError, match=r"chunk_size=64, which strategy 'sentences' does not take"):
        ChunkingConfig(chunk_size=64).build(default)
    with pytest.raises(ValueError, match=r"max_tokens=-3, language='xx', which strategy 'fixed_tokens'"):
        ChunkingConfig(strategy="fixed_tokens", language="xx", max_tokens=-3).build(default)
    with pytest.raises(ValueError, match=r"batch_tokens must be an integer >= 0"):
        ChunkingConfig(batch_tokens=-1).shard_settings(None)
    with pytest.raises(ValueError, match=r"max_rejected_share must be a number in \(0, 1\], got 1.5"):
        ChunkingConfig(max_rejected_share=1.5).shard_settings(None)
    assert ChunkingConfig(systemic_min_documents=3).shard_settings(2).systemic_min_documents == 3
    # one rule with Airflow's resolve_strategy: fixed_tokens has no default chunk size (issue 28, 1)
    with pytest.raises(ValueError, match=r"chunk_size"):
        ChunkingConfig(strategy="fixed_tokens").build(default)
    assert ChunkingConfig(strategy="fixed_tokens").build(FixedTokens(chunk_size=48)) == FixedTokens(chunk_size=48)
    assert ChunkingConfig(strategy="fixed_tokens", chunk_size=32).build(default) == FixedTokens(chunk_size=32)
    assert ChunkingConfig(max_tokens=64).build(default) == Sentences(max_tokens=64)


def test_an_unwritable_lancedb_uri_names_the_resource(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")
    lancedb = LanceDBResource(uri=str(tmp_path / "afile" / "lancedb"))
    with pytest.raises(ValueError, match=r"LanceDBResource\(uri='.*afile/lancedb'\) cannot open or create table"):
        lancedb.rejected_table("rejected_documents")


def test_an_engine_resource_whose_model_cannot_load_fails_in_one_line_naming_the_file(
    tmp_path: Path, minilm_dir: Path
) -> None:
    """Issue 39 D9, the resources' start: a Git LFS pointer in place of the weights (the vLLM and the
    transformers resource), a config.json that is not JSON: the error names the directory and the
    file, in one line, before any engine starts."""
    from latechunk_dagster.integration.resources import TransformersEngineResource
    from tests.test_cli import LFS_POINTER, broken_model

    lfs = broken_model(minilm_dir, tmp_path / "lfs", "model.safetensors", LFS_POINTER)
    bad = broken_model(minilm_dir, tmp_path / "bad", "config.json", b"{'model_type': 'bert'}")
    for resource, message in (
        (engine(lfs), f"{lfs}: model.safetensors is a Git LFS pointer (133 bytes), not the file"),
        (TransformersEngineResource(model=str(lfs)), f"{lfs}: model.safetensors is a Git LFS pointer"),
        (engine(bad), f"{bad}: config.json is not JSON (Expecting property name enclosed in double quotes"),
    ):
        with dg.build_resources({"engine": resource}) as built:
            with pytest.raises(Exception) as caught:
                built.engine.get_chunker()
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
        assert type(caught.value).__name__ == "ModelNotSupportedError"
