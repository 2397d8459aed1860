"""A change of strategy under generations, in real Dagster runs on the real engine and LanceDB, while
a loop of searches runs (issue 36): the new generation is built beside the served one, the promote
asset waits for every partition and its checks, promotion and rollback are one commit each, and no
search is refused or sees rows of two generations."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from latechunk_dagster import LateChunker, late_chunk_assets, sink
from latechunk_dagster.app.cli import main as cli_main
from latechunk_dagster.core.chunker import query_chunker
from latechunk_dagster.core.chunking import FixedTokens
from latechunk_dagster.integration.resources import LanceDBResource
from latechunk_dagster.sink import generations as gens
from latechunk_dagster.sink.search import search
from tests.conftest import session_engine_resource

DOCS = {
    "a": {
        "a1": "Tidal marshes trap sediment as the water slows among the reeds. Over decades the marsh "
        "surface rises with the sea, and the roots hold the mud in place against storms.",
        "a2": "A sourdough starter is a culture of wild yeast and lactic bacteria. Fed flour and water "
        "each day, it leavens bread slowly and gives the crumb its sour taste.",
    },
    "b": {
        "b1": "Glaciers carve valleys into a U shape as they grind the bedrock beneath their weight. "
        "When the ice retreats it leaves moraines of boulders and gravel behind.",
        "b2": "Pipe organs sound when pressurized air flows through ranks of pipes. Each stop selects "
        "a rank, and the organist combines stops to color the sound of the music.",
    },
}
QUERIES = ["how do marshes keep up with sea level", "what makes bread sour", "how glaciers shape valleys"]


def _chunks(db: Any, name: str) -> set[tuple[str, int, str]]:
    """Each chunk of table ``name`` as (doc_id, chunk_index, text): what a hit of it shows."""
    t = db.open_table(name).to_arrow().select(["doc_id", "chunk_index", "text"])
    return set(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def _definitions(
    strategy: FixedTokens, raw: dg.AssetsDefinition, parts: dg.PartitionsDefinition, index: bool = False
) -> Any:
    return late_chunk_assets(
        documents=raw, partitions_def=parts, table_name="kb", strategy=strategy, generations=True, index=index
    )


def _logged(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> str:
    """Every log line of the run ``result``, one per line."""
    return "\n".join(e.user_message for e in instance.all_logs(result.run_id))


def test_a_strategy_change_is_built_beside_promoted_and_rolled_back_while_searches_run(
    tmp_path: Path, chunker: LateChunker, minilm_dir: Path
) -> None:
    parts = dg.StaticPartitionsDefinition(list(DOCS))

    @dg.asset(partitions_def=parts)
    def raw_documents(context) -> pa.Table:  # noqa: ANN001 - Dagster reads the annotation
        docs = DOCS[context.partition_key]
        return pa.table({"id": list(docs), "text": list(docs.values())})

    uri = str(tmp_path / "db")
    resources = {
        "engine": session_engine_resource(chunker),
        "lancedb": LanceDBResource(uri=uri),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io")),
    }
    old, new = (
        _definitions(FixedTokens(chunk_size=12), raw_documents, parts),
        _definitions(FixedTokens(chunk_size=20), raw_documents, parts),
    )
    [promote_old] = old.extra_assets
    [promote_new] = new.extra_assets
    assert promote_new.key == dg.AssetKey("chunk_vectors_promote")
    db = sink.connect(uri)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:

        def run(defs: Any, partition: str | None, *assets: dg.AssetsDefinition) -> dg.ExecuteInProcessResult:
            selection = [raw_documents, defs.chunk_asset, *defs.asset_checks] if partition else []
            return dg.materialize(
                [*selection, *assets],
                partition_key=partition,
                instance=instance,
                resources=resources,
                raise_on_error=False,
            )

        for p in DOCS:  # generation 1: a new definition's first generation is served at once
            assert run(old, p).success
        assert gens.current_table(db, "kb") == "kb"
        result = run(old, None, promote_old)
        assert result.success  # nothing newer: the promote asset leaves generation 1 current
        [mat] = result.asset_materializations_for_node(promote_old.op.name)
        assert mat.metadata["promoted"].value is False and mat.metadata["generation"].value == 1
        first = _chunks(db, "kb")

        # a loop of searches, in a thread of its own, on the light engine, for the whole migration
        seen: list[set[tuple[str, int, str | None]]] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def searches() -> None:
            try:
                with query_chunker(minilm_dir) as qc:
                    loop_searches(qc)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        def loop_searches(qc: LateChunker) -> None:
            while not stop.is_set():
                for q in QUERIES:
                    try:
                        hits = search(q, chunker=qc, uri=uri, table_name="kb", k=4, exact=True)
                    except BaseException as exc:  # noqa: BLE001 - every refusal is counted
                        errors.append(exc)
                        continue
                    seen.append({(h.doc_id, h.chunk_index, h.text) for h in hits})
                time.sleep(0.05)

        def hybrid_search() -> set[tuple[str, int, str]]:
            with query_chunker(minilm_dir) as qc:
                hits = search(QUERIES[2], chunker=qc, uri=uri, table_name="kb", k=3, mode="hybrid")
            return {(h.doc_id, h.chunk_index, h.text) for h in hits}

        loop = threading.Thread(target=searches)
        loop.start()
        try:
            while not seen and not errors and loop.is_alive():
                time.sleep(0.1)
            # generation 2 (chunks of 20 tokens), partition a: built beside, not served, and the run says so
            built_a = run(new, "a")
            assert built_a.success
            assert "'kb': writing generation 2 ('kb__g2'), which readers are NOT served (generation 1 is)" in _logged(
                instance, built_a
            )
            # the index asset indexes the served generation (1) and the one being built, naming each table
            index_asset = _definitions(FixedTokens(chunk_size=20), raw_documents, parts, index=True).index_asset
            indexed = run(new, None, index_asset)
            assert indexed.success
            [mat] = indexed.asset_materializations_for_node(index_asset.op.name)
            assert mat.metadata["table"].value == "kb" and mat.metadata["built_table"].value == "kb__g2"
            assert mat.metadata["rows"].value == str(db.open_table("kb").count_rows())  # the served one's report
            assert "indexes of 'kb' (served" in _logged(instance, indexed)
            assert "indexes of 'kb__g2' (being built" in _logged(instance, indexed)
            state = gens.read_state(db, "kb")
            assert state is not None and state.newest.number == 2 and state.current.number == 1  # type: ignore[union-attr]
            assert gens.current_table(db, "kb") == "kb" and _chunks(db, "kb") == first
            # its commit is tagged with the run: checking the tag out reads what the run wrote
            [record] = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=new.wiring.chunk_key, asset_partitions=["a"]), limit=1
            ).records
            part = record.asset_materialization.metadata
            assert part["generation"].value == 2 and part["table"].value == "kb__g2"
            entry = part["granularities"].value[""]
            tagged = db.open_table("kb__g2")
            assert tagged.tags.list()[entry["tag"]]["version"] == entry["version"] == part["version"].value
            tagged.checkout(entry["tag"])
            assert tagged.count_rows() == part["partition_rows"].value
            # the gate: partition b has not been written into generation 2
            blocked = run(new, None, promote_new)
            assert not blocked.success
            assert gens.current_table(db, "kb") == "kb"
            assert run(new, "b").success
            log_version = db.open_table(gens.log_table_name("kb")).version
            result = run(new, None, promote_new)
            assert result.success
            [mat] = result.asset_materializations_for_node(promote_new.op.name)
            assert mat.metadata["promoted"].value is True and mat.metadata["generation"].value == 2
            assert db.open_table(gens.log_table_name("kb")).version == log_version + 1  # one commit
            assert gens.current_table(db, "kb") == "kb__g2"
            second = _chunks(db, "kb__g2")
            hybrid = hybrid_search()  # answers the moment generation 2 is served (issue 51)
            assert hybrid and hybrid <= second
            n_before = len(seen)
            while len(seen) < n_before + 3 and loop.is_alive():
                time.sleep(0.1)
            # rollback from the command line: one commit, no encoding
            assert cli_main(["rollback", "--uri", uri, "--table", "kb"]) == 0
            assert db.open_table(gens.log_table_name("kb")).version == log_version + 2
            assert gens.current_table(db, "kb") == "kb"
            hybrid = hybrid_search()
            assert hybrid and hybrid <= first
            assert cli_main(["promote", "--uri", uri, "--table", "kb"]) == 0
            assert gens.current_table(db, "kb") == "kb__g2"
            n_before = len(seen)
            while len(seen) < n_before + 3 and loop.is_alive():
                time.sleep(0.1)
        finally:
            stop.set()
            loop.join()
    assert errors == []
    assert first.isdisjoint(second)  # 12- and 20-token chunks differ in every first chunk's range
    mixed = [hits for hits in seen if not (hits <= first or hits <= second)]
    assert mixed == [] and len(seen) >= 6
    assert any(hits <= first for hits in seen) and any(hits <= second for hits in seen)
