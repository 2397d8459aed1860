"""The table checks over several partitions, read one partition at a time (issue 27, item 17).

Real LanceDB tables in a temp dir, real JSONL stores, a real Dagster run of the table checks and
the Airflow checks function. The chunk rows are built by the package's row builder from chunks
cut by hand (no engine: these checks do not care how a vector was computed): every document of
``TEXTS`` is cut into pieces of ``PIECE`` characters, a piece is ``PIECE // 5`` tokens, and vector
``k`` of a document is the unit vector ``e_k``, so every expected count below follows from ``TEXTS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from latechunk_dagster import late_chunk_assets, sink
from latechunk_dagster.airflow.tasks import check_shards
from latechunk_dagster.core.chunking import FixedTokens
from latechunk_dagster.core.results import Chunk, ChunkedDocument, ChunkerSettings
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.sink import validation
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.rows import chunk_batch, lineage
from latechunk_dagster.sources.files import Document, DocumentStore

DIM = 8
PIECE = 20
#: shard -> doc_id -> text; lengths are multiples of PIECE, so a document of 40 characters has 2 chunks
TEXTS = {
    "a": {"a1": "Owls hunt at night. " * 2, "a2": "Tea is steamed soon. "[:20]},
    "b": {"b1": "Pumps are repaired. " * 3},
    "c": {"c1": "The harbour crane c1" * 2, "c2": "Violins need rosin. " * 1},
}
CHUNKS = {"a": 3, "b": 3, "c": 3}  # sum over documents of len(text) // PIECE
ALL = sorted(TEXTS)


def chunked(doc: Document, vectors: np.ndarray | None = None) -> ChunkedDocument:
    pieces = range(0, len(doc.text), PIECE)
    chunks = [
        Chunk(i, (i * PIECE // 5, (i + 1) * PIECE // 5), (start, start + PIECE), doc.text[start : start + PIECE])
        for i, start in enumerate(pieces)
    ]
    if vectors is None:
        vectors = np.eye(len(chunks), DIM, dtype=np.float32)  # unit vectors e_0, e_1, ...
    return ChunkedDocument(0, doc.doc_id, chunks, vectors, [0] * (len(chunks) * PIECE // 5), "token_states")


def rows_of(shard: str, head: str = "mean+l2", vectors: dict[str, np.ndarray] | None = None) -> pa.Table:
    """The chunk rows of ``shard``'s documents, as the package's row builder makes them."""
    settings = ChunkerSettings("m", "0" * 64, head, (), "float32", "", 512, 64, True, DIM, "test")
    meta = lineage(settings, FixedTokens(64), "run-1", datetime.now(UTC))
    docs = [Document.from_text(doc_id, text) for doc_id, text in TEXTS[shard].items()]
    pairs = [(d, chunked(d, (vectors or {}).get(d.doc_id))) for d in docs]
    return pa.Table.from_batches([chunk_batch(pairs, shard, meta, DIM)])


def build(tmp_path: Path, **rows: pa.Table) -> tuple[Path, Path]:
    """A JSONL store of ``TEXTS`` and a chunk table of its rows (``rows`` replaces a shard's)."""
    store = tmp_path / "store"
    store.mkdir()
    for shard, docs in TEXTS.items():
        lines = [json.dumps({"id": doc_id, "text": text}) + "\n" for doc_id, text in docs.items()]
        (store / f"{shard}.jsonl").write_text("".join(lines))
    db = sink.connect(str(tmp_path / "db"))
    table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(DIM))
    sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    for shard in ALL:
        sink.replace_partition(table, "chunk_id", shard, rows.get(shard, rows_of(shard)))
    return store, tmp_path / "db"


def run_checks(store: Path, db: Path, partitions: list[str] = ALL, dim: int = DIM) -> dict[str, validation.Outcome]:
    """The Airflow checks (``check_shards``), told the row counts of the clean table."""
    results = [{"partition": p, "partition_rows": CHUNKS[p], "embedding_dim": dim} for p in partitions]
    return check_shards(
        LanceDBSettings(uri=str(db)),
        str(store),
        table_name=sink.CHUNK_TABLE,
        rejected_table_name=sink.REJECTED_TABLE,
        results=results,
    )


def failed(outcomes: dict[str, validation.Outcome]) -> set[str]:
    return {name for name, (passed, _) in outcomes.items() if not passed}


def test_a_clean_table_passes_with_counts_of_its_input(tmp_path: Path) -> None:
    outcomes = run_checks(*build(tmp_path))
    assert list(outcomes) == list(validation.CHECKS) and not failed(outcomes), outcomes
    vectors = outcomes["vectors_valid"][1]
    assert (vectors["rows"], vectors["non_finite"], vectors["not_unit_norm"]) == (9, 0, 0)
    assert outcomes["unique_chunk_ids"][1] == {"rows": 9, "duplicates": 0, "examples": []}
    assert outcomes["spans_tile"][1] == {p: {"documents": len(TEXTS[p]), "failing": 0, "examples": []} for p in ALL}
    assert {p: d["documents"] for p, d in outcomes["documents_accounted"][1].items()} == {"a": 2, "b": 1, "c": 2}
    assert outcomes["row_count_matches"][1] == {p: {"rows": 3, "expected": 3} for p in ALL}


def _plant_inf(tmp_path: Path) -> tuple[Path, Path]:
    bad = np.eye(2, DIM, dtype=np.float32)
    bad[1, 3] = np.inf
    return build(tmp_path, c=rows_of("c", vectors={"c1": bad}))


def _plant_norm(tmp_path: Path) -> tuple[Path, Path]:
    return build(tmp_path, c=rows_of("c", vectors={"c2": 2 * np.eye(1, DIM, dtype=np.float32)}))


def _plant_gap(tmp_path: Path) -> tuple[Path, Path]:
    store, db = build(tmp_path)
    sink.connect(str(db)).open_table("chunks").update(
        where="doc_id = 'b1' AND chunk_index = 2", values={"token_start": 9}
    )
    return store, db


def _copy_row(tmp_path: Path, into: list[str]) -> tuple[Path, Path]:
    """Row a1#1 copied, chunk_id and all, into each partition of ``into``."""
    store, db = build(tmp_path)
    table = sink.connect(str(db)).open_table("chunks")
    row = table.search().where("doc_id = 'a1' AND chunk_index = 1").limit(1).to_arrow()
    for p in into:
        table.add(row.set_column(row.schema.get_field_index("partition"), "partition", pa.array([p])))
    return store, db


def _drop_doc(tmp_path: Path) -> tuple[Path, Path]:
    store, db = build(tmp_path)
    sink.connect(str(db)).open_table("chunks").delete("doc_id = 'c2'")
    return store, db


def _drop_shard(tmp_path: Path) -> tuple[Path, Path]:
    store, db = build(tmp_path)
    (store / "c.jsonl").unlink()
    return store, db


A1_1 = sink.chunk_id("a", "a1", 1)
Plant = Callable[[Path], tuple[Path, Path]]
#: fault -> (how it is planted, the partitions it is in, {failing check: what its details hold})
FAULTS: dict[str, tuple[Plant, set[str], dict[str, Any]]] = {
    "infinite value": (
        _plant_inf,
        {"c"},
        {"vectors_valid": {"rows": 9, "non_finite": 1, "examples": [sink.chunk_id("c", "c1", 1)]}},
    ),
    "norm 2 under an l2 head": (
        _plant_norm,
        {"c"},
        {"vectors_valid": {"not_unit_norm": 1, "max_norm_error": 1.0, "examples": [sink.chunk_id("c", "c2", 0)]}},
    ),
    "token gap": (_plant_gap, {"b"}, {"spans_tile": {"b": {"failing": 1}, "a": {"failing": 0}, "c": {"failing": 0}}}),
    "duplicate in its partition": (
        lambda t: _copy_row(t, ["a"]),
        {"a"},
        {
            "unique_chunk_ids": {"rows": 10, "duplicates": 1, "examples": [A1_1]},
            "spans_tile": {"a": {"failing": 1, "examples": ["a1: chunk_index is not 0..n-1"]}},
            "row_count_matches": {"a": {"rows": 4}, "c": {"rows": 3}},
        },
    ),
    "duplicate across partitions": (
        lambda t: _copy_row(t, ["c"]),
        {"c"},
        {
            "unique_chunk_ids": {"rows": 10, "duplicates": 1, "examples": [A1_1]},
            "spans_tile": {"c": {"failing": 1, "examples": ["a1: document no longer in the store"]}},
            "documents_accounted": {"a": {"not_in_store": []}, "c": {"not_in_store": ["a1"]}},
            "row_count_matches": {"a": {"rows": 3}, "c": {"rows": 4}},
        },
    ),
    "duplicate in and across partitions": (
        lambda t: _copy_row(t, ["a", "c", "b"]),
        {"a", "b", "c"},
        {
            "unique_chunk_ids": {"rows": 12, "duplicates": 1, "examples": [A1_1]},
            "spans_tile": {"a": {"failing": 1}, "b": {"failing": 1}, "c": {"failing": 1}},
            "documents_accounted": {"b": {"not_in_store": ["a1"]}, "c": {"not_in_store": ["a1"]}},
            "row_count_matches": {"a": {"rows": 4}, "b": {"rows": 4}, "c": {"rows": 4}},
        },
    ),
    "document without rows": (
        _drop_doc,
        {"c"},
        {"documents_accounted": {"c": {"missing": ["c2"], "chunked": 1}}, "row_count_matches": {"c": {"rows": 2}}},
    ),
    "shard gone from the store": (
        _drop_shard,
        {"c"},
        {
            "spans_tile": {"c": {"failing": 2}, "b": {"failing": 0}},
            "documents_accounted": {"c": {"documents": 0, "not_in_store": ["c1", "c2"]}, "a": {"not_in_store": []}},
        },
    ),
}


def _holds(details: dict[str, Any], want: dict[str, Any]) -> bool:
    return all(_holds(details[k], v) if isinstance(v, dict) else details[k] == v for k, v in want.items())


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_fails_exactly_its_checks_and_names_it(tmp_path: Path, fault: str) -> None:
    """A fault in some of the partitions fails exactly the checks it breaks, with details (counted
    across all partitions) that name it; the other partitions, checked alone, pass."""
    plant, faulty, want = FAULTS[fault]
    store, db = plant(tmp_path)
    outcomes = run_checks(store, db)
    assert failed(outcomes) == set(want), {k: outcomes[k] for k in failed(outcomes) ^ set(want)}
    for name, details in want.items():
        assert _holds(outcomes[name][1], details), (name, outcomes[name][1])
    clean = [p for p in ALL if p not in faulty]
    assert not clean or not failed(run_checks(store, db, partitions=clean))


def test_norms_are_checked_only_when_every_head_normalizes(tmp_path: Path) -> None:
    """The head rule is over all the checked rows, as before: a partition whose head does not
    normalize exempts the norm test (a non-finite value still fails)."""
    store, db = build(
        tmp_path,
        a=rows_of("a", head="mean"),
        c=rows_of("c", vectors={"c2": 2 * np.eye(1, DIM, dtype=np.float32)}),
    )
    assert not failed(run_checks(store, db))
    assert failed(run_checks(store, db, partitions=["b", "c"])) == {"vectors_valid"}


def test_another_vector_width_names_both(tmp_path: Path) -> None:
    outcomes = run_checks(*build(tmp_path), dim=9)
    assert failed(outcomes) == {"vectors_valid"}
    assert outcomes["vectors_valid"][1] == {"reason": "vector dimension 8 != expected 9"}


def test_the_checks_read_one_partition_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No read of the chunk table spans two partitions with vectors, text or more columns than the
    checks use; the store is read shard by shard, each shard once."""
    store, db = _copy_row(tmp_path, ["c"])  # a foreign id: the one lookup across partitions runs too
    reads: list[tuple[list[str], list[str] | None]] = []
    shards: list[str] = []
    read, iter_shards = validation.read_partitions, DocumentStore.iter_shards

    def spy_read(table: Any, partitions: list[str], columns: list[str] | None = None, where: str | None = None):
        reads.append((list(partitions), columns))
        return read(table, partitions, columns, where)

    def spy_shards(self: DocumentStore, names: list[str], **options: object):
        for name, items in iter_shards(self, names, **options):
            shards.append(name)
            yield name, items

    monkeypatch.setattr(validation, "read_partitions", spy_read)
    monkeypatch.setattr(DocumentStore, "iter_shards", spy_shards)
    outcomes = run_checks(store, db)
    assert outcomes["unique_chunk_ids"][1]["duplicates"] == 1
    assert shards == ALL
    chunk_reads = [(parts, cols) for parts, cols in reads if cols is not None]
    assert [parts for parts, cols in chunk_reads if "vector" in cols] == [["a"], ["b"], ["c"]]
    assert all(cols == validation.CHECK_COLUMNS for parts, cols in chunk_reads if "vector" in cols)
    [(parts, cols)] = [(parts, cols) for parts, cols in chunk_reads if "vector" not in cols]
    assert (parts, cols) == (ALL, ["chunk_id", "partition", "doc_id", "chunk_index", "granularity"])
    assert [parts for parts, cols in reads if cols is None] == [["a"], ["b"], ["c"]]  # rejected rows


def test_the_dagster_checks_publish_the_same_outcomes(tmp_path: Path) -> None:
    """A real Dagster run of the table checks over the three partitions (no engine: the table
    checks need only the table and the store) publishes what ``check_shards`` returns."""
    store, db = _copy_row(tmp_path, ["c"])
    tables = late_chunk_assets(index=False)
    checks = tables.asset_checks[0]
    defs = dg.Definitions(
        asset_checks=[checks],
        jobs=[dg.define_asset_job("checks_only", selection=dg.AssetSelection.checks(checks))],
        resources={"lancedb": LanceDBResource(uri=str(db)), "store": DocumentStoreResource(path=str(store))},
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        for p in ALL:
            metadata = {"partition_rows": CHUNKS[p], "embedding_dim": DIM}
            instance.report_runless_asset_event(
                dg.AssetMaterialization(tables.wiring.chunk_key, partition=p, metadata=metadata)
            )
        op = f"{tables.wiring.chunk_key.to_python_identifier()}_table_checks"
        want = run_checks(store, db)
        # the partitions named in the run config, then none named: every partition of the table
        for config in ({"partitions": ALL}, {}):
            result = defs.resolve_job_def("checks_only").execute_in_process(
                instance=instance, run_config={"ops": {op: {"config": config}}}, raise_on_error=False
            )
            got = {e.check_name: e for e in result.get_asset_check_evaluations()}
            assert list(got) == list(want)
            for name, (passed, details) in want.items():
                assert got[name].passed == passed
                assert got[name].metadata["partitions"].value == ALL
                assert got[name].metadata["details"].value == details
    assert not got["unique_chunk_ids"].passed and got["vectors_valid"].passed


def test_table_partitions_reads_the_column_in_batches(tmp_path: Path) -> None:
    """What the checks validate when no run or config names partitions: every partition in the
    table, read 100 rows at a time here (5,000 rows in 3 commits, 7 partitions)."""
    from latechunk_dagster.sink.writes import table_partitions

    names = [f"p{i % 7}/{'é' * (i % 3)}" for i in range(5000)]
    table = sink.connect(str(tmp_path)).create_table("t", pa.table({"partition": names[:2000]}))
    table.add(pa.table({"partition": names[2000:4000]}))
    table.add(pa.table({"partition": names[4000:]}))
    assert table_partitions(table, batch_rows=100) == table_partitions(table) == sorted(set(names))
    assert len(sorted(set(names))) == 21
