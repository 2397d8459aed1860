"""Asset checks on ``chunk_vectors``: they read back what was written and validate it.

Partition-aware: a check validates the partitions of the run it executes in (the run's
``dagster/partition`` tag or partition range), or the ``partitions`` of its run config, or
else every partition in the table. The assertions live in :mod:`latechunk_dagster.sink.validation`.
"""

import json
from collections.abc import Iterator

import dagster as dg
import numpy as np
import pyarrow as pa
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from pydantic import Field

from latechunk_dagster.core.chunking import strategy_from_config
from latechunk_dagster.integration.assets import ENGINE_POOL, chunk_vectors, document_shards
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.sink import sql_string, validation
from latechunk_dagster.sources.files import Document, DocumentStore

CHECKS = {
    "vectors_valid": "vectors finite, of the table's dimension, unit norm when the head normalizes",
    "spans_tile": "per document, token ranges tile the tokens; char ranges in order, inside the text, text matches",
    "unique_chunk_ids": "no duplicate chunk_id",
    "documents_accounted": "every document of the shard has chunks or a rejection record",
    "row_count_matches": "rows in the table = rows the last materialization reported",
}


class CheckConfig(dg.Config):
    partitions: list[str] = Field(default_factory=list, description="Partitions to check; empty: the run's, else all.")


class ParityConfig(CheckConfig):
    docs_per_partition: int = Field(default=2, description="Documents re-embedded per partition.")
    atol: float = Field(default=1e-4, description="Largest allowed absolute deviation per vector value.")


def run_partitions(context: dg.AssetCheckExecutionContext, config: CheckConfig, table: object) -> list[str]:
    """Partitions this check execution validates (see module docstring)."""
    if config.partitions:
        return list(config.partitions)
    tags = context.run.tags
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    start, end = tags.get(ASSET_PARTITION_RANGE_START_TAG), tags.get(ASSET_PARTITION_RANGE_END_TAG)
    if start and end:
        keys = context.instance.get_dynamic_partitions(document_shards.name)
        return keys[keys.index(start) : keys.index(end) + 1]
    return sorted(set(table.search().select(["partition"]).limit(None).to_arrow().column(0).to_pylist()))  # type: ignore[attr-defined]


def read_partition(table: object, partitions: list[str]) -> pa.Table:
    if not partitions:
        return table.search().limit(0).to_arrow()  # type: ignore[attr-defined]
    where = "partition IN (" + ", ".join(sql_string(p) for p in partitions) + ")"
    return table.search().where(where).limit(None).to_arrow()  # type: ignore[attr-defined]


def _last_reported(instance: dg.DagsterInstance, partition: str, key: str) -> int | None:
    """An int the last materialization of ``partition`` reported in its metadata, or ``None``."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=chunk_vectors.key, asset_partitions=[partition]), limit=1
    )
    if not result.records:
        return None
    mat = result.records[0].asset_materialization
    value = mat.metadata.get(key) if mat else None
    return int(value.value) if value is not None else None


def _result(name: str, outcome: validation.Outcome, partitions: list[str]) -> dg.AssetCheckResult:
    passed, details = outcome
    return dg.AssetCheckResult(
        check_name=name,
        asset_key=chunk_vectors.key,
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"partitions": dg.MetadataValue.json(partitions), "details": dg.MetadataValue.json(details)},
    )


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec(name, asset=chunk_vectors, blocking=True, description=d) for name, d in CHECKS.items()],
    description="Validates the rows of chunk_vectors' partitions in LanceDB.",
)
def chunk_table_checks(
    context: dg.AssetCheckExecutionContext, config: CheckConfig, lancedb: LanceDBResource, store: DocumentStoreResource
) -> Iterator[dg.AssetCheckResult]:
    table = lancedb.open_chunk_table()
    if table is None:
        for name in CHECKS:
            yield _result(name, (False, {"reason": f"no table {lancedb.table_name!r}"}), [])
        return
    partitions = run_partitions(context, config, table)
    rows = read_partition(table, partitions)
    with lancedb.get_connection() as db:
        rejected = (
            read_partition(db.open_table(lancedb.rejected_table_name), partitions)
            if lancedb.rejected_table_name in db.list_tables().tables
            else pa.table({"doc_id": pa.array([], pa.string()), "partition": pa.array([], pa.string())})
        )
    st = store.get_store()
    known = set(st.shards())
    docs_by_part = {p: _shard_docs(st, p, known) for p in partitions}
    dim = table.schema.field("vector").type.list_size
    heads = set(rows.column("head").to_pylist()) if rows.num_rows else set()
    reported = {_last_reported(context.instance, p, "embedding_dim") for p in partitions} - {None}
    expected_dim = reported.pop() if len(reported) == 1 else dim
    yield _result(
        "vectors_valid", validation.vectors_valid(rows, expected_dim, all(h.endswith("l2") for h in heads)), partitions
    )
    rows_of = {p: _of_partition(rows, p) for p in partitions}
    span_outcomes = [
        _unreadable(docs_by_part[p]) or validation.spans_tile(rows_of[p], docs_by_part[p]) for p in partitions
    ]
    yield _result("spans_tile", _merge(span_outcomes, partitions), partitions)
    yield _result("unique_chunk_ids", validation.unique_chunk_ids(rows), partitions)
    accounted = [
        _unreadable(docs_by_part[p])
        or validation.documents_accounted(rows_of[p], _of_partition(rejected, p), docs_by_part[p])
        for p in partitions
    ]
    yield _result("documents_accounted", _merge(accounted, partitions), partitions)
    counts = [
        validation.row_count_matches(rows_of[p], _last_reported(context.instance, p, "partition_row_count"))
        for p in partitions
    ]
    yield _result("row_count_matches", _merge(counts, partitions), partitions)


def _of_partition(rows: pa.Table, partition: str) -> pa.Table:
    return rows.filter(pa.compute.equal(rows.column("partition"), partition))


def _shard_docs(st: DocumentStore, partition: str, known: set[str]) -> dict[str, Document] | str:
    """The shard's documents by id ({} for a shard gone from the store), or the read error as text."""
    if partition not in known:
        return {}
    try:
        docs, bad_rows = st.read_shard_with_rejections(partition)
        by_id = {d.doc_id: d for d in docs}
        # a row that made no document is accounted by its rejection record, like a document
        by_id.update({r.doc_id: Document(r.doc_id, "", "") for r in bad_rows if r.doc_id not in by_id})
        return by_id
    except (ValueError, KeyError, OSError) as exc:
        return f"shard cannot be read: {exc}"


def _unreadable(docs: dict[str, Document] | str) -> validation.Outcome | None:
    return (False, {"reason": docs}) if isinstance(docs, str) else None


def _merge(outcomes: list[validation.Outcome], partitions: list[str]) -> validation.Outcome:
    return all(o[0] for o in outcomes), {p: o[1] for p, o in zip(partitions, outcomes)}


@dg.asset_check(
    asset=chunk_vectors,
    blocking=True,
    pool=ENGINE_POOL,
    description="Re-embeds a few documents per partition and compares with the stored vectors.",
)
def parity_sample(
    context: dg.AssetCheckExecutionContext,
    config: ParityConfig,
    engine: VLLMEngineResource,
    lancedb: LanceDBResource,
    store: DocumentStoreResource,
) -> dg.AssetCheckResult:
    table = lancedb.open_chunk_table()
    if table is None:
        return dg.AssetCheckResult(passed=False, metadata={"reason": "no chunk table"})
    partitions = run_partitions(context, config, table)
    rows = read_partition(table, partitions)
    chunker = engine.get_chunker()
    st = store.get_store()
    details: dict[str, object] = {}
    passed = True
    for p in partitions:
        part = _of_partition(rows, p)
        doc_ids = sorted(set(part.column("doc_id").to_pylist()))[: config.docs_per_partition]
        docs = _shard_docs(st, p, set(st.shards()))
        if isinstance(docs, str):
            passed = False
            details[p] = docs
            continue
        for doc_id in doc_ids:
            mine = part.filter(pa.compute.equal(part.column("doc_id"), doc_id)).sort_by("chunk_index")
            params = json.loads(mine.column("strategy_params")[0].as_py())
            strategy = strategy_from_config(params.pop("name"), params)
            if doc_id not in docs:
                outcome: validation.Outcome = (False, {"reason": "document no longer in the store"})
            else:
                [fresh] = chunker.chunk([docs[doc_id].text], strategy, doc_ids=[doc_id])
                # shape: [n_chunks, dim]
                stored = np.stack([np.asarray(v, np.float32) for v in mine.column("vector").to_pylist()])
                outcome = validation.vectors_match(stored, fresh.vectors, config.atol)
            passed &= outcome[0]
            details[f"{p}/{doc_id}"] = outcome[1]
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"partitions": dg.MetadataValue.json(partitions), "details": dg.MetadataValue.json(details)},
    )
