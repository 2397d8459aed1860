"""Several granularities of one table definition in Dagster (issue 29, item 2, the Dagster half).

``late_chunk_assets(strategies={...})`` is a multi-asset of one asset per granularity table,
materialized by one step (one encode per document); each table has its own blocking checks and
index asset, the sensor compares the store with every table, run config picks each
granularity's strategy and the component takes ``strategies:``. A real Dagster run on the
module's real engine (``session_engine_resource``), real LanceDB in ``tmp_path``; the expected
parents are computed here from the documents' paragraphs, not by the code under test.
"""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from latechunk_dagster import FixedTokens, GivenChunks, LateChunker, Paragraphs, Sentences, late_chunk_assets, sink
from latechunk_dagster.core.chunking import CharSpans
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.integration.run_config import ChunkingConfig, StrategyConfig
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.sources.files import DocumentStore
from tests.conftest import session_engine_resource
from tests.doc_examples import example

#: Two paragraphs each; the given chunks are the sentences (located in the text by the sources).
DOCS = {
    "north": {
        "a": (
            "Acme Corp. builds pumps in Rotterdam. Its maintenance team repairs them within a day.\n\n"
            "The company was founded in 1931. It employs four hundred people today."
        ),
        "b": "Owls hunt at night. Their feathers make their flight almost silent.\n\nMice rarely hear them coming.",
    },
    "south": {
        "c": (
            "Green tea is steamed or pan-fired soon after picking. That stops oxidation.\n\n"
            "Black tea is rolled and left to oxidise. Its leaves turn dark."
        ),
    },
}
SENTENCES = {
    "a": [
        "Acme Corp. builds pumps in Rotterdam.",
        "Its maintenance team repairs them within a day.",
        "The company was founded in 1931.",
        "It employs four hundred people today.",
    ],
    "b": ["Owls hunt at night.", "Their feathers make their flight almost silent.", "Mice rarely hear them coming."],
    "c": [
        "Green tea is steamed or pan-fired soon after picking.",
        "That stops oxidation.",
        "Black tea is rolled and left to oxidise.",
        "Its leaves turn dark.",
    ],
}
#: finest first: fixed 8-token windows, the documents' own sentences, paragraphs
GRANULARITIES = {
    "window": FixedTokens(chunk_size=8),
    "sentence": GivenChunks(),
    "paragraph": Paragraphs(max_tokens=20),  # one chunk per paragraph here: 15 to 20 tokens each
}
TABLES = {"window": "chunks_window", "sentence": "chunks_sentence", "paragraph": "chunks_paragraph"}


#: Resources that start nothing (the engine loads on first use): enough to build and check definitions.
_UNSTARTED = {
    "engine": VLLMEngineResource(model="unused"),
    "lancedb": LanceDBResource(uri="unused"),
    "store": DocumentStoreResource(path="unused"),
}


def write_store(path: Path, shards: list[str] | None = None) -> Path:
    """A JSONL store (a ``shard`` column) whose ``sentences`` column holds each document's own chunks."""
    rows = [
        {"id": doc_id, "shard": shard, "text": text, "sentences": SENTENCES[doc_id]}
        for shard, docs in DOCS.items()
        for doc_id, text in docs.items()
        if shards is None or shard in shards
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def paragraph_of(text: str, char: int) -> int:
    """Which paragraph (split at blank lines) holds character ``char``: the hand rule."""
    return text[:char].count("\n\n")


def test_the_hand_checked_sentences_are_in_the_documents() -> None:
    texts = {d: t for docs in DOCS.values() for d, t in docs.items()}
    for doc_id, sentences in SENTENCES.items():
        assert all(s in texts[doc_id] for s in sentences)
        assert [paragraph_of(texts[doc_id], texts[doc_id].index(s)) for s in sentences] == (
            [0, 0, 1] if doc_id == "b" else [0, 0, 1, 1]
        )


# -- the factory, run config and component: no engine -------------------------------------------


def test_one_asset_per_granularity_table_with_its_checks_and_index() -> None:
    table = late_chunk_assets(key_prefix="kb", strategies=GRANULARITIES)
    keys = [dg.AssetKey(["kb", f"chunk_vectors_{g}"]) for g in GRANULARITIES]
    assert table.chunk_keys == keys
    assert set(table.chunk_asset.keys) == set(keys)  # one multi-asset: one step, one encode
    assert not table.chunk_asset.can_subset  # a parent link needs the next granularity's chunks
    assert table.wiring.chunk_tables == {g: TABLES[g] for g in GRANULARITIES}
    assert table.wiring.table_names == [*TABLES.values(), "rejected_documents"]
    assert table.index_asset is not None
    assert set(table.index_asset.keys) == {dg.AssetKey(["kb", f"chunk_vectors_{g}_index"]) for g in GRANULARITIES}
    by_asset: dict[dg.AssetKey, set[str]] = {}
    for checks in table.asset_checks:
        for check in checks.check_keys:
            by_asset.setdefault(check.asset_key, set()).add(check.name)
    index_keys = {dg.AssetKey(["kb", f"chunk_vectors_{g}_index"]) for g in GRANULARITIES}
    assert set(by_asset) == set(keys) | index_keys
    assert all({"documents_accounted", "row_count_matches", "parity_sample"} <= by_asset[k] for k in keys)
    assert all(by_asset[k] == {"index_coverage"} for k in index_keys)  # a warning on each index asset
    versions = table.chunk_asset.code_versions_by_key
    # a fine granularity's code version names its parent's strategy (its links depend on it)
    assert "parent.given_chunks()" in versions[keys[0]] and "parent." not in versions[keys[2]]
    specs = {s.key: s for s in table.chunk_asset.specs}
    assert specs[keys[1]].metadata["table_name"] == "chunks_sentence"
    assert specs[keys[1]].metadata["granularity"] == "sentence"
    # the job and the sensor select every granularity
    job = table.jobs[0]
    assert job.name == "kb_chunk_vectors_job"
    assert set(table.sensors[0].asset_selection.resolve(table.assets)) == set(keys)
    # the guide's run config reaches the step's config; a misspelt field is refused by Dagster
    job = table.to_definitions(resources=_UNSTARTED).resolve_job_def("kb_chunk_vectors_job")
    op = "kb__chunk_vectors_chunks"
    assert dg.validate_run_config(job, {"ops": {op: {"config": {"strategies": {"window": {"chunk_size": 16}}}}}})
    with pytest.raises(dg.DagsterInvalidConfigError, match="chunk_sise"):
        dg.validate_run_config(job, {"ops": {op: {"config": {"strategies": {"window": {"chunk_sise": 16}}}}}})
    # one strategy: the asset, table and names of before
    single = late_chunk_assets(key_prefix="kb")
    assert single.chunk_keys == [dg.AssetKey(["kb", "chunk_vectors"])] and single.wiring.table_names == [
        "chunks",
        "rejected_documents",
    ]


def test_the_factory_refuses_what_it_cannot_build() -> None:
    with pytest.raises(ValueError, match="not both"):
        late_chunk_assets(strategy=Sentences(max_tokens=128), strategies=GRANULARITIES)
    with pytest.raises(ValueError, match="granularity name 'bad-name'"):
        late_chunk_assets(strategies={"bad-name": Sentences(max_tokens=128)})
    with pytest.raises(ValueError, match="no granularities"):
        late_chunk_assets(strategies={})
    with pytest.raises(TypeError, match="granularity 'x'"):
        late_chunk_assets(strategies={"x": "sentences"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="granularity 'spans': char_spans"):
        late_chunk_assets(strategies={"fine": Sentences(max_tokens=128), "spans": CharSpans(ranges=((0, 3),))})
    with pytest.raises(ValueError, match=r"DocumentStoreResource\(chunks_column"):
        late_chunk_assets(chunks_column="sentences")
    with pytest.raises(ValueError, match="pass chunks_column= with documents="):
        late_chunk_assets(documents="raw", strategies=GRANULARITIES)
    # queries=: one retrieval_eval over every granularity table (side by side, small-to-big)
    evaluated = late_chunk_assets(strategies=GRANULARITIES, queries="q.jsonl", table_name="kb")
    [eval_asset] = evaluated.extra_assets
    assert set(eval_asset.asset_deps[eval_asset.key]) == set(evaluated.chunk_keys)


def test_run_config_chooses_each_granularitys_strategy() -> None:
    defaults = {"fine": Sentences(max_tokens=64), "coarse": Paragraphs(max_tokens=512)}
    assert ChunkingConfig().build_granularities(defaults) == defaults
    got = ChunkingConfig(strategies={"fine": StrategyConfig(max_tokens=32)}).build_granularities(defaults)
    assert got == {"fine": Sentences(max_tokens=32), "coarse": Paragraphs(max_tokens=512)}
    assert list(got) == ["fine", "coarse"]  # the definition's order, finest first
    got = ChunkingConfig(strategies={"coarse": StrategyConfig(strategy="given_chunks")}).build_granularities(defaults)
    assert got["coarse"] == GivenChunks()
    with pytest.raises(ValueError, match=r"granularities \['medium'\] this table does not have; it has"):
        ChunkingConfig(strategies={"medium": StrategyConfig()}).build_granularities(defaults)
    with pytest.raises(ValueError, match="choose a strategy per granularity under strategies"):
        ChunkingConfig(max_tokens=32).build_granularities(defaults)
    with pytest.raises(
        ValueError, match="granularity 'fine': run config sets chunk_size=8, which strategy 'sentences'"
    ):
        ChunkingConfig(strategies={"fine": StrategyConfig(chunk_size=8)}).build_granularities(defaults)
    with pytest.raises(ValueError, match="granularity 'coarse': char_spans needs per-document spans"):
        ChunkingConfig(strategies={"coarse": StrategyConfig(strategy="char_spans")}).build_granularities(defaults)
    with pytest.raises(ValueError, match="which strategy 'given_chunks' does not take"):
        ChunkingConfig(
            strategies={"coarse": StrategyConfig(strategy="given_chunks", max_tokens=3)}
        ).build_granularities(defaults)
    # a table of one strategy keeps the top-level fields, and refuses strategies
    assert ChunkingConfig(max_tokens=32).build_granularities({"": Sentences(max_tokens=128)}) == {
        "": Sentences(max_tokens=32)
    }
    with pytest.raises(ValueError, match="this table has one strategy"):
        ChunkingConfig(strategies={"fine": StrategyConfig()}).build_granularities({"": Sentences(max_tokens=128)})


def test_the_component_takes_strategies_from_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm_dir: Path
) -> None:
    """The guide's ``defs.yaml`` with ``strategies:`` loads: one asset, check set and index per granularity."""
    import yaml
    from dagster.components.testing import create_defs_folder_sandbox

    from latechunk_dagster.integration.component import LateChunkComponent

    text = example("defs.yaml granularities")
    assert text.index("sentence:") < text.index("paragraph:")
    write_store(tmp_path / "data" / "docs.jsonl")
    monkeypatch.chdir(tmp_path)  # the example's relative paths: data/docs.jsonl, data/lancedb
    monkeypatch.setenv("LATECHUNK_MODEL", str(minilm_dir))  # the engine starts on first use, not here
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=LateChunkComponent, defs_yaml_contents=yaml.safe_load(text)
        )
        # the example's text as a user writes it: the order of strategies is the file's (a
        # yaml.safe_dump of a dict, as the sandbox writes, would sort the keys)
        (defs_path / "defs.yaml").write_text(text)
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            graph = defs.resolve_asset_graph()
            keys = {dg.AssetKey(["kb", f"chunk_vectors_{g}"]) for g in ("sentence", "paragraph")}
            assert keys <= set(graph.get_all_asset_keys())
            assert {dg.AssetKey(["kb", f"chunk_vectors_{g}_index"]) for g in ("sentence", "paragraph")} <= set(
                graph.get_all_asset_keys()
            )
            checks = {(k.asset_key, k.name) for k in graph.asset_check_keys}
            assert {(k, "documents_accounted") for k in keys} <= checks
            code = defs.resolve_assets_def(dg.AssetKey(["kb", "chunk_vectors_sentence"])).code_versions_by_key
            assert list(component.strategies) == ["sentence", "paragraph"]  # the file's order: finest first
            sentence = code[dg.AssetKey(["kb", "chunk_vectors_sentence"])]
            assert "given_chunks()+parent.paragraphs(language='en', max_tokens=512" in sentence
            store = defs.resources["store"]
            assert store.get_store().chunks_column == "sentences"
    with pytest.raises(ValueError, match="not both"):
        LateChunkComponent(strategy={"name": "sentences"}, strategies={"a": {"name": "sentences"}}).strategy_arguments()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategies.big: unknown chunking strategy 'nope'"):
        LateChunkComponent(strategies={"big": {"name": "nope", "params": {}}}).strategy_arguments()  # type: ignore[dict-item]


# -- a real materialization: the guide's example on the module's engine ---------------------------


def _rows(db: Any, name: str) -> list[dict[str, Any]]:
    columns = ["chunk_id", "doc_id", "partition", "chunk_index", "char_start", "char_end", "text"]
    table = db.open_table(name).to_arrow()
    return sorted(table.select([*columns, "granularity", "parent_chunk_id"]).to_pylist(), key=lambda r: r["chunk_id"])


def _checks_by_asset(result: Any) -> dict[dg.AssetKey, dict[str, bool]]:
    out: dict[dg.AssetKey, dict[str, bool]] = {}
    for e in result.get_asset_check_evaluations():
        out.setdefault(e.asset_key, {})[e.check_name] = e.passed
    return out


def test_three_granularities_materialize_with_their_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunker: LateChunker
) -> None:
    """The guide's example: one run writes three tables with parent links, every check of every
    table passes; a missing row fails its table's checks only; a removed shard leaves every table."""
    project = tmp_path / "project"
    write_store(project / "data" / "docs.jsonl")
    monkeypatch.chdir(project)
    scope: dict[str, Any] = {}
    exec(example("dagster-granularities.py"), scope)
    kb, example_defs = scope["kb"], scope["defs"]
    assert kb.wiring.strategies == GRANULARITIES
    checks_job = dg.define_asset_job("kb_checks", selection=dg.AssetSelection.checks(*kb.asset_checks))
    resources = {**example_defs.resources, "engine": session_engine_resource(chunker)}
    defs = dg.Definitions(
        assets=kb.assets,
        asset_checks=kb.asset_checks,
        jobs=[*kb.jobs, checks_job],
        sensors=kb.sensors,
        resources=resources,
    )
    keys = dict(zip(GRANULARITIES, kb.chunk_keys, strict=True))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path("data/docs.jsonl"), kb.partitions_def)
        tags = {"dagster/asset_partition_range_start": "north", "dagster/asset_partition_range_end": "south"}
        result = defs.resolve_job_def("kb_chunk_vectors_job").execute_in_process(
            instance=instance, tags=tags, raise_on_error=False
        )
        assert result.success
        checks = _checks_by_asset(result)
        assert set(checks) == set(keys.values())
        for g, key in keys.items():
            assert all(checks[key].values()), (g, checks[key])
            assert {"spans_tile", "documents_accounted", "row_count_matches", "parity_sample"} <= set(checks[key])
            assert ("parents_exist" in checks[key]) == (g != "paragraph")  # the coarsest has no parents
        # one materialization per granularity asset and partition, each naming its own table
        for g, key in keys.items():
            for p in ("north", "south"):
                [event] = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=key, asset_partitions=[p]), limit=5
                ).records
                meta = event.asset_materialization.metadata
                assert meta["table"].value == TABLES[g]
                assert meta["documents_in"].value == len(DOCS[p])

        db = sink.connect("data/lancedb")
        rows = {g: _rows(db, TABLES[g]) for g in GRANULARITIES}
        texts = {d: t for docs in DOCS.values() for d, t in docs.items()}
        for g, got in rows.items():
            assert {r["doc_id"] for r in got} == set(texts), g
            assert {r["granularity"] for r in got} == {g}
        # the given chunks are the documents' own sentences
        for doc_id, sentences in SENTENCES.items():
            mine = sorted((r for r in rows["sentence"] if r["doc_id"] == doc_id), key=lambda r: r["chunk_index"])
            assert [texts[doc_id][r["char_start"] : r["char_end"]].strip() for r in mine] == sentences
        # parents: a sentence's parent is the paragraph holding it (the hand rule), a window's
        # parent is a sentence of its document that it overlaps; the paragraphs have none
        by_id = {r["chunk_id"]: r for g in rows for r in rows[g]}
        for r in rows["sentence"]:
            parent = by_id[r["parent_chunk_id"]]
            assert parent["granularity"] == "paragraph" and parent["doc_id"] == r["doc_id"]
            assert parent["chunk_index"] == paragraph_of(texts[r["doc_id"]], r["char_start"] + 1)
            assert parent["char_start"] <= r["char_start"] and r["char_end"] <= parent["char_end"]
        for r in rows["window"]:
            parent = by_id[r["parent_chunk_id"]]
            assert parent["granularity"] == "sentence" and parent["doc_id"] == r["doc_id"]
            assert parent["char_start"] < r["char_end"] and r["char_start"] < parent["char_end"]
        assert all(r["parent_chunk_id"] is None for r in rows["paragraph"])

        # a missing row: the window table's checks fail, the other tables' pass
        victim = next(r for r in rows["window"] if r["partition"] == "north" and r["chunk_index"] == 1)
        db.open_table(TABLES["window"]).delete(f"chunk_id = '{victim['chunk_id']}'")
        result = defs.resolve_job_def("kb_checks").execute_in_process(instance=instance, raise_on_error=False)
        checks = _checks_by_asset(result)
        assert checks[keys["window"]]["row_count_matches"] is False
        assert checks[keys["window"]]["spans_tile"] is False
        assert all(checks[keys["sentence"]].values()) and all(checks[keys["paragraph"]].values())

        # a broken parent link: the sentence table's parents_exist fails, its other checks pass
        child = next(r for r in rows["sentence"] if r["partition"] == "south")
        db.open_table(TABLES["sentence"]).update(
            where=f"chunk_id = '{child['chunk_id']}'", values={"parent_chunk_id": "0" * 32}
        )
        result = defs.resolve_job_def("kb_checks").execute_in_process(instance=instance, raise_on_error=False)
        checks = _checks_by_asset(result)
        assert checks[keys["sentence"]].pop("parents_exist") is False
        assert all(checks[keys["sentence"]].values()) and all(checks[keys["paragraph"]].values())
        assert checks[keys["window"]]["parents_exist"] is True  # its parents are still there

        # a shard gone from the store: the sensor drops its rows from every granularity table
        write_store(project / "data" / "docs.jsonl", shards=["north"])
        sensor = defs.resolve_sensor_def("kb_chunk_vectors_store_sensor")
        store_and_db = {k: resources[k] for k in ("store", "lancedb")}
        with dg.build_sensor_context(instance=instance, resources=store_and_db) as context:
            tick = sensor(context)
        assert [r.partition_keys for r in tick.dynamic_partitions_requests if "delete" in type(r).__name__.lower()] == [
            ["south"]
        ]
        for g in GRANULARITIES:
            assert {r["partition"] for r in _rows(db, TABLES[g])} == {"north"}, g


def test_upstream_documents_with_their_own_chunks_in_two_granularities(tmp_path: Path, chunker: LateChunker) -> None:
    """Documents from an upstream asset whose ``sentences`` column holds their own chunks
    (``chunks_column=``): both granularity tables written by one step, every check passes."""
    regions = dg.StaticPartitionsDefinition(list(DOCS))

    @dg.asset(partitions_def=regions)
    def raw_documents(context: dg.AssetExecutionContext) -> pa.Table:
        docs = DOCS[context.partition_key]
        return pa.table({"key": list(docs), "body": list(docs.values()), "sentences": [SENTENCES[d] for d in docs]})

    table = late_chunk_assets(
        documents=raw_documents,
        partitions_def=regions,
        id_column="key",
        text_column="body",
        chunks_column="sentences",
        table_name="up",
        strategies={"sentence": GivenChunks(), "paragraph": Paragraphs(max_tokens=20)},
    )
    resources = {
        "engine": session_engine_resource(chunker),
        "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io")),
    }
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        for region in DOCS:
            result = dg.materialize(
                [raw_documents, table.chunk_asset, *table.asset_checks],
                partition_key=region,
                instance=instance,
                resources=resources,
            )
            assert result.success
            checks = _checks_by_asset(result)
            assert set(checks) == set(table.chunk_keys)
            assert all(all(c.values()) for c in checks.values()), checks
            assert "parents_exist" in checks[table.chunk_keys[0]]
    db = sink.connect(str(tmp_path / "db"))
    sentences = db.open_table("up_sentence").to_arrow()
    assert sentences.num_rows == sum(len(s) for s in SENTENCES.values())
    assert db.open_table("up_paragraph").to_arrow().num_rows == 6  # two paragraphs a document
