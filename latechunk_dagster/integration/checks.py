"""Asset checks of one chunk table: they read back what was written and validate it.

Partition-aware: a check validates the partitions of the run it executes in (the run's
``dagster/partition`` tag or partition range), or the ``partitions`` of its run config, or
else every partition in the table. The assertions live in :mod:`latechunk_dagster.sink.validation`,
which reads and checks one partition at a time: a check over a single-run backfill of many
partitions holds one partition's rows and one shard's documents at once, not the run's.
When documents come from an upstream asset (not the store resource), the checks compare with
what the last materialization of each partition reported instead of re-reading the documents,
and there is no ``parity_sample``.
"""

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from latechunk_dagster.core.chunking import GivenChunks, strategy_from_config
from latechunk_dagster.evaluation.blends import table_blend
from latechunk_dagster.integration.wiring import Granularity, TableWiring
from latechunk_dagster.pipeline.table_checks import granularity_table_outcomes
from latechunk_dagster.sink import indexing, validation
from latechunk_dagster.sink.parents import PARENT_CHECK
from latechunk_dagster.sink.schema import sql_in, sql_string
from latechunk_dagster.sink.writes import table_partitions

CHECKS = validation.CHECKS


class CheckConfig(dg.Config):
    partitions: list[str] = Field(default_factory=list, description="Partitions to check; empty: the run's, else all.")


class ParityConfig(CheckConfig):
    docs_per_partition: int = Field(default=2, description="Documents re-embedded per partition.")
    atol: float = Field(default=1e-4, description="Largest allowed absolute deviation per vector value.")


class IndexCoverageConfig(dg.Config):
    max_unindexed_fraction: float = Field(
        default=indexing.DEFAULT_POLICY.max_unindexed_fraction,
        description="Share of the rows an index may leave uncovered (committed since the last refresh).",
    )
    max_small_fragments: int = Field(
        default=indexing.DEFAULT_POLICY.max_small_fragments,
        description="Small fragments the table may hold before the next refresh compacts them.",
    )


def run_partitions(
    w: TableWiring, context: dg.AssetCheckExecutionContext, config: CheckConfig, table: Any
) -> list[str]:
    """Partitions this check execution validates (see module docstring), each once."""
    if config.partitions:
        return list(dict.fromkeys(config.partitions))
    keys = w.run_partition_keys(context.run.tags, context.instance)
    if keys is not None:
        return keys
    return table_partitions(table)


def last_reported(asset_key: dg.AssetKey, instance: dg.DagsterInstance, partition: str, key: str) -> int | None:
    """An int the last materialization of ``partition`` of ``asset_key`` reported in its metadata, or ``None``."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
    )
    if not result.records:
        return None
    mat = result.records[0].asset_materialization
    value = mat.metadata.get(key) if mat else None
    return int(value.value) if value is not None else None


def _reported_outcome(
    asset_key: dg.AssetKey, instance: dg.DagsterInstance, p: str, rows: pa.Table, rejected: pa.Table
) -> validation.Outcome:
    """Upstream-asset documents: chunked + rejected documents = what the materialization read, none both."""
    chunked = set(rows.column("doc_id").to_pylist())
    refused = set(rejected.column("doc_id").to_pylist())
    expected = last_reported(asset_key, instance, p, "documents_in")
    both = sorted(chunked & refused)
    ok = expected is not None and len(chunked | refused) == expected and not both
    return ok, {"documents_in": expected, "chunked": len(chunked), "rejected": len(refused), "both": both[:10]}


def build_checks(w: TableWiring, *, with_parity: bool = True) -> list[dg.AssetChecksDefinition]:
    """The blocking checks of every granularity table (``CHECKS`` in one multi-check per granularity,
    plus ``parity_sample`` on each)."""
    checks = [build_table_checks(w, g) for g in w.granularities]
    if with_parity and not w.documents_from_asset:
        checks.extend(build_parity_check(w, g) for g in w.granularities)
    checks.extend(build_index_coverage_check(w, g) for g in w.granularities if g.index_key is not None)
    return checks


def build_table_checks(w: TableWiring, g: Granularity) -> dg.AssetChecksDefinition:
    """``CHECKS`` over the rows of one granularity table, as blocking checks of its chunk asset; for a
    granularity with a next one, also ``PARENT_CHECK`` (its ``parent_chunk_id`` links against the
    next granularity's table, :func:`~latechunk_dagster.sink.validation.parents_exist`)."""
    keys = {w.lancedb_key} | (set() if w.documents_from_asset else {w.store_key})
    key = g.chunk_key
    parent_table = w.chunk_tables[g.parent] if g.parent is not None else None
    described = {**CHECKS, **(PARENT_CHECK if parent_table else {})}

    @dg.multi_asset_check(
        specs=[dg.AssetCheckSpec(name, asset=key, blocking=True, description=d) for name, d in described.items()],
        description=f"Validates the rows of {key.to_user_string()}'s partitions in LanceDB table {g.table_name!r}.",
        required_resource_keys=keys,
        name=f"{key.to_python_identifier()}_table_checks",
    )
    def chunk_table_checks(
        context: dg.AssetCheckExecutionContext, config: CheckConfig
    ) -> Iterator[dg.AssetCheckResult]:
        lancedb = w.resource(context, w.lancedb_key)

        def result(name: str, outcome: validation.Outcome, partitions: list[str]) -> dg.AssetCheckResult:
            passed, details = outcome
            return dg.AssetCheckResult(
                check_name=name,
                asset_key=key,
                passed=passed,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={"partitions": dg.MetadataValue.json(partitions), "details": dg.MetadataValue.json(details)},
            )

        built, rejected_name = w.built_tables(lancedb)  # the newest generation's, under generations
        partitions, outcomes = granularity_table_outcomes(
            lancedb,
            built[g.name],
            rejected_name,
            lambda table: run_partitions(w, context, config, table),
            expected_rows=lambda p: last_reported(key, context.instance, p, "partition_rows"),
            reported_dim=lambda p: last_reported(key, context.instance, p, "embedding_dim"),
            parent_table=built[g.parent] if g.parent is not None else None,
            store=None if w.documents_from_asset else w.resource(context, w.store_key).get_store(),
            accounted=(lambda p, rows, rejected: _reported_outcome(key, context.instance, p, rows, rejected))
            if w.documents_from_asset
            else None,
        )
        for name, outcome in outcomes.items():
            yield result(name, outcome, partitions)

    return chunk_table_checks


def build_parity_check(w: TableWiring, g: Granularity) -> dg.AssetChecksDefinition:
    """``parity_sample`` of one granularity table: re-embeds a few documents per partition with the
    strategy their rows record (alone: a granularity's vectors equal a single-strategy run of its
    strategy) and compares with the stored vectors."""

    @dg.asset_check(
        asset=g.chunk_key,
        name="parity_sample",
        blocking=True,
        pool=w.pool,
        description="Re-embeds a few documents per partition (those the run wrote, when it wrote the partition) "
        "and compares with the stored vectors.",
        required_resource_keys={w.engine_key, w.lancedb_key, w.store_key},
    )
    def parity_sample(context: dg.AssetCheckExecutionContext, config: ParityConfig) -> dg.AssetCheckResult:
        lancedb = w.resource(context, w.lancedb_key)
        name = w.built_tables(lancedb)[0][g.name]  # the newest generation's, under generations
        table = lancedb.open_table(name)
        if table is None:
            return dg.AssetCheckResult(passed=False, metadata={"reason": f"no chunk table {name!r}"})
        partitions = run_partitions(w, context, config, table)
        same_run = g.chunk_key in (context.run.asset_selection or set())
        # in the run that materialized the partition: sample what this run wrote (incremental
        # runs leave unchanged documents' rows, checked by the run that wrote them)
        this_run = f"run_id = {sql_string(context.run.run_id)}" if same_run else None
        chunker = w.resource(context, w.engine_key).get_chunker()
        # one partition at a time: its doc_ids, then the rows and texts of the sampled documents only
        sampled: dict[str, list[str]] = {}
        for p in partitions:
            doc_ids = validation.read_partitions(table, [p], ["doc_id"], this_run).column("doc_id")
            if len(doc_ids) or not same_run:
                sampled[p] = sorted(pc.unique(doc_ids).to_pylist())[: config.docs_per_partition]
        store = w.resource(context, w.store_key).get_store()
        documents = validation.iter_shard_documents(store, list(sampled), keep=sampled)
        details: dict[str, object] = {}
        passed = True
        for p in partitions:
            if p not in sampled:
                details[p] = "no document re-encoded by this run"
                continue
            docs = next(documents)[1]
            if isinstance(docs, str):
                passed = False
                details[p] = docs
                continue
            if not sampled[p]:
                continue
            scope = " AND ".join(filter(None, [sql_in("doc_id", sampled[p]), this_run]))
            part = validation.read_partitions(table, [p], ["doc_id", "chunk_index", "strategy_params", "vector"], scope)
            for doc_id in sampled[p]:
                mine = part.filter(pc.equal(part.column("doc_id"), doc_id)).sort_by("chunk_index")
                params = json.loads(mine.column("strategy_params")[0].as_py())
                params.pop("blend", None)  # the vectors' blend weight (issue 48), not a chunking parameter
                strategy = strategy_from_config(params.pop("name"), params)
                weight, engine_weight = table_blend(mine), float(getattr(chunker, "blend", 1.0))
                if doc_id not in docs:
                    outcome: validation.Outcome = (False, {"reason": "document no longer in the store"})
                elif weight != engine_weight:
                    why = f"rows written with blend={weight:g}, the engine's chunker blends {engine_weight:g}"
                    outcome = (False, {"reason": why})
                else:
                    doc = docs[doc_id]
                    given = {"chunks": [doc.chunks]} if strategy.name == GivenChunks.name else {}
                    [fresh] = chunker.chunk([doc.text], strategy, doc_ids=[doc_id], **given)
                    # shape: [n_chunks, dim]
                    stored = np.stack([np.asarray(v, np.float32) for v in mine.column("vector").to_pylist()])
                    outcome = validation.vectors_match(stored, fresh.vectors, config.atol)
                passed &= outcome[0]
                # nested, not f"{p}/{doc_id}": partition "a/b" + doc "c" and "a" + "b/c" would share a key
                details.setdefault(p, {})[doc_id] = outcome[1]  # type: ignore[index]
        return dg.AssetCheckResult(
            passed=passed,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"partitions": dg.MetadataValue.json(partitions), "details": dg.MetadataValue.json(details)},
        )

    return parity_sample


def build_index_coverage_check(w: TableWiring, g: Granularity) -> dg.AssetChecksDefinition:
    """``index_coverage`` of one granularity table's index asset: the rows its indexes do not cover yet
    and its small fragments, against :class:`IndexCoverageConfig` (a warning: searches stay right,
    only slower, until the next refresh). It runs after each refresh and on its own (the UI, a schedule)."""
    assert g.index_key is not None

    @dg.asset_check(
        asset=g.index_key,
        name="index_coverage",
        blocking=False,
        description=f"Rows of {g.table_name!r} the indexes do not cover yet, and small fragments, "
        "against thresholds (run config).",
        required_resource_keys={w.lancedb_key},
    )
    def index_coverage(context: dg.AssetCheckExecutionContext, config: IndexCoverageConfig) -> dg.AssetCheckResult:
        table = w.resource(context, w.lancedb_key).open_table(g.table_name)
        if table is None:
            return dg.AssetCheckResult(passed=False, metadata={"reason": f"no chunk table {g.table_name!r}"})
        policy = indexing.IndexPolicy(
            max_unindexed_fraction=config.max_unindexed_fraction, max_small_fragments=config.max_small_fragments
        )
        coverage = indexing.index_coverage(table, policy)
        return dg.AssetCheckResult(
            passed=coverage["ok"],
            severity=dg.AssetCheckSeverity.WARN,
            description="; ".join(coverage["problems"]) or None,
            metadata={
                "rows": dg.MetadataValue.int(coverage["rows"]),
                "unindexed_rows": dg.MetadataValue.json(coverage["unindexed_rows"]),
                "fragments": dg.MetadataValue.int(coverage["fragments"]),
                "small_fragments": dg.MetadataValue.int(coverage["small_fragments"]),
                "vector_segments": dg.MetadataValue.int(coverage["vector_segments"]),
            },
        )

    return index_coverage
