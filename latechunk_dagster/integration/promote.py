"""The promote asset of a table definition under generations: readers switch to the generation the
partitions built, once every partition was written into it and its blocking checks passed there.

The gate reads Dagster's own records: each partition's last materialization of each chunk asset
(its ``generation`` metadata) and the executions of the chunk assets' blocking checks since the
generation was opened (the ``partitions`` each execution covered, and whether it passed; the latest
execution covering a partition decides). Promotion is one commit of the generation log
(:func:`latechunk_dagster.sink.generations.promote`); a failed gate raises ``dg.Failure`` naming
what is missing and commits nothing.
"""

from datetime import datetime
from typing import Any

import dagster as dg

from latechunk_dagster.integration.wiring import TableWiring
from latechunk_dagster.sink.generations import Generation, clean, promote, read_state

#: How many executions of one check the gate reads back (newest first).
CHECK_HISTORY = 10_000


def _written(w: TableWiring, instance: dg.DagsterInstance, partitions: list[str], gen: int) -> list[str]:
    """``asset/partition`` whose last materialization did not write generation ``gen``."""
    missing = []
    for key in w.chunk_keys:
        for p in partitions:
            result = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[p]), limit=1
            )
            mat = result.records[0].asset_materialization if result.records else None
            value = mat.metadata.get("generation") if mat else None
            if value is None or int(value.value) != gen:
                missing.append(f"{key.to_user_string()}/{p}")
    return missing


def _checked(w: TableWiring, instance: dg.DagsterInstance, partitions: list[str], since: datetime) -> list[str]:
    """``check/partition`` without a passing latest execution (since ``since``) of a blocking check."""
    failing = []
    storage = instance.event_log_storage
    for key in w.chunk_keys:
        for check_key in _check_keys(w, key):
            decided: dict[str, bool] = {}
            for record in storage.get_asset_check_execution_history(check_key, limit=CHECK_HISTORY):
                # an execution is recorded (planned) when its run starts; its evaluation is what counts
                evaluation = record.event.asset_check_evaluation if record.event else None
                if evaluation is None or record.event.timestamp < since.timestamp():  # type: ignore[union-attr]
                    continue
                covered = evaluation.metadata.get("partitions")
                for p in covered.value if covered is not None else []:
                    decided.setdefault(p, bool(evaluation.passed))
            failing += [f"{check_key.name}/{p}" for p in partitions if not decided.get(p, False)]
    return failing


def _check_keys(w: TableWiring, key: dg.AssetKey) -> list[dg.AssetCheckKey]:
    from latechunk_dagster.integration.checks import CHECKS
    from latechunk_dagster.sink.parents import PARENT_CHECK

    names = list(CHECKS) + (list(PARENT_CHECK) if w.granularity(key).parent is not None else [])
    return [dg.AssetCheckKey(key, n) for n in names]


def promotion_gate(w: TableWiring, instance: dg.DagsterInstance, gen: Generation) -> list[str]:
    """What stops generation ``gen`` from being promoted: partitions not written into it, and
    blocking checks without a passing execution on it (empty: promote)."""
    partitions = w.all_partition_keys(instance)
    return _written(w, instance, partitions, gen.number) + _checked(w, instance, partitions, gen.opened_at)


def _clean(context: dg.AssetExecutionContext, db: Any, table: str) -> list[int]:
    """:func:`~latechunk_dagster.sink.generations.clean` past the retention, logged: each
    materialization of the promote asset is when old generations leave."""
    dropped = clean(db, table)
    if dropped:
        context.log.info(f"dropped generations {dropped} of {table!r}: not served within the retention")
    return dropped


def build_promote_asset(w: TableWiring, key: dg.AssetKey, group_name: str) -> dg.AssetsDefinition:
    """The promote asset of ``w`` (unpartitioned, after every chunk asset): promotes the newest
    generation when :func:`promotion_gate` is empty, then drops generations not served within the
    retention (:func:`~latechunk_dagster.sink.generations.clean`); metadata ``generation`` (current
    after it), ``promoted`` (whether this materialization switched readers), ``previous`` and
    ``dropped_generations``."""

    @dg.asset(
        key=key,
        group_name=group_name,
        deps=w.chunk_keys,
        required_resource_keys={w.lancedb_key},
        description=f"Switches readers of {w.table_name!r} to the generation the partitions built, once every "
        "partition was written into it and its blocking checks passed (one commit; latechunk rollback undoes it).",
    )
    def _promote(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        db = w.resource(context, w.lancedb_key).settings().connect()
        state = read_state(db, w.table_name)
        if state is None or state.newest is None:
            raise dg.Failure(f"table definition {w.table_name!r} has no generation: materialize its partitions first")
        newest, current = state.newest, state.current
        meta: dict[str, Any] = {"previous": current.number if current else 0}
        if current is not None and current.number == newest.number:
            context.log.info(f"generation {newest.number} of {w.table_name!r} is current already")
            meta["dropped_generations"] = _clean(context, db, w.table_name)
            return dg.MaterializeResult(metadata={**meta, "generation": newest.number, "promoted": False})
        blocked = promotion_gate(w, context.instance, newest)
        if blocked:
            raise dg.Failure(
                f"generation {newest.number} of {w.table_name!r} is not promoted: {len(blocked)} partition "
                f"writes or checks missing or failed ({', '.join(blocked[:10])})",
                metadata={"blocked": dg.MetadataValue.json(blocked[:100])},
            )
        try:  # the library's gate too (partitions the current generation holds); indexes built before serving
            promote(
                db,
                w.table_name,
                newest.number,
                run_id=context.run.run_id,
                note="Dagster promote asset",
                log_line=context.log.info,
            )
        except ValueError as exc:
            raise dg.Failure(str(exc)) from exc
        context.log.info(f"promoted generation {newest.number} of {w.table_name!r} ({newest.table})")
        meta["dropped_generations"] = _clean(context, db, w.table_name)
        return dg.MaterializeResult(
            metadata={**meta, "generation": newest.number, "promoted": True, "table": newest.table}
        )

    return _promote
