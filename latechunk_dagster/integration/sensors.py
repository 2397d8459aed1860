"""Keep dynamic partitions in sync with the store: new shards become partitions, changed shards re-run."""

import hashlib
import json
import logging
from collections.abc import Callable

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from latechunk_dagster.integration.resources import LanceDBResource
from latechunk_dagster.integration.wiring import TableWiring, dynamic_name
from latechunk_dagster.sources.files import DocumentStore

log = logging.getLogger(__name__)


def sync_partitions(
    instance: dg.DagsterInstance,
    store: DocumentStore,
    partitions_def: dg.DynamicPartitionsDefinition,
    lancedb: LanceDBResource | None = None,
    table_names: list[str] | None = None,
    *,
    warn: Callable[[str], None] | None = None,
) -> tuple[list[str], list[str]]:
    """Add the store's shards that are not yet partitions; delete partitions whose shard is gone,
    and (with ``lancedb``) their rows in ``table_names``, so search never returns documents that
    left the store.

    A shard whose name is not valid UTF-8 cannot be a partition key: it is skipped, and ``warn``
    (default: this module's logger) gets a line naming it and why (:meth:`DocumentStore.bad_shards`);
    every other shard is synced as usual.

    Returns ``(added, removed)``. Used by the ``latechunk sync-partitions`` command; the sensor
    does the same through a ``SensorResult``.
    """
    name = partitions_def.name
    assert name is not None
    for bad in store.bad_shards():
        (warn or log.warning)(f"skipped: {bad.detail}")
    shards = set(store.shards())
    known = set(instance.get_dynamic_partitions(name))
    added, removed = sorted(shards - known), sorted(known - shards)
    if added:
        instance.add_dynamic_partitions(name, added)
    if lancedb is not None and table_names:
        lancedb.drop_partitions(table_names, removed)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed


def range_run_requests(order: list[str], changed: list[str], versions: dict[str, str]) -> list[dg.RunRequest]:
    """One run per contiguous stretch of changed partitions (in partition order).

    A stretch of several partitions becomes one run over a partition range, so the single-run
    backfill policy loads the engine once for all of them. ``run_key`` includes the shard
    fingerprints, so the same change is never requested twice.
    """
    todo = set(changed)
    stretches: list[list[str]] = []
    for i, key in enumerate(order):
        if key not in todo:
            continue
        if stretches and i > 0 and order[i - 1] == stretches[-1][-1]:
            stretches[-1].append(key)
        else:
            stretches.append([key])
    requests = []
    for keys in stretches:
        run_key = hashlib.sha256(json.dumps([(k, versions[k]) for k in keys]).encode()).hexdigest()
        if len(keys) == 1:
            requests.append(dg.RunRequest(partition_key=keys[0], run_key=run_key))
        else:
            tags = {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
            requests.append(dg.RunRequest(run_key=run_key, tags=tags))
    return requests


def shard_fingerprints(st: DocumentStore) -> dict[str, str]:
    """{shard: fingerprint}; a shard that cannot be read gets ``"unreadable:<error>"`` so that it is
    still requested, and its run records why (see ``chunk_vectors``)."""
    try:
        return st.fingerprints()
    except (ValueError, OSError):
        out = {}
        for shard in st.shards():
            try:
                out[shard] = st.shard_fingerprint(shard)
            except (ValueError, OSError) as exc:
                out[shard] = f"unreadable:{exc}"
        return out


def build_store_sensor(w: TableWiring, name: str) -> dg.SensorDefinition:
    """A sensor that adds a partition per new shard, requests runs of new or changed shards and drops
    the partitions and rows of shards that left the store (dynamic partitions only)."""
    pname = dynamic_name(w.partitions_def)
    if pname is None:
        raise ValueError("the store sensor needs a DynamicPartitionsDefinition")
    partitions_def = w.partitions_def
    assert isinstance(partitions_def, dg.DynamicPartitionsDefinition)

    @dg.sensor(
        name=name,
        asset_selection=[w.chunk_key],
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        required_resource_keys={w.store_key, w.lancedb_key},
        description="Adds a partition per new shard, materializes new or changed shards, and drops the "
        "partitions and rows of shards that left the store.",
    )
    # direct invocation (tests, `sensor(context)`) also passes the required resources as keywords
    def _sensor(context: dg.SensorEvaluationContext, **_resources: object) -> dg.SensorResult:
        st = w.resource(context, w.store_key).get_store()
        lancedb = w.resource(context, w.lancedb_key)
        previous: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        current = shard_fingerprints(st)
        for bad in st.bad_shards():
            context.log.warning(f"skipped: {bad.detail}")
        known_order = context.instance.get_dynamic_partitions(pname)
        known = set(known_order)
        new = sorted(set(current) - known)
        gone = sorted(known - set(current))
        changed = sorted(k for k, fp in current.items() if previous.get(k) != fp)
        if gone:
            dropped = lancedb.drop_partitions(w.table_names, gone)
            context.log.info(f"shards gone from the store: {gone}; deleted {dropped} rows")
        order = [k for k in known_order if k in current] + new
        return dg.SensorResult(
            run_requests=range_run_requests(order, changed, current),
            # the new data versions of the documents source asset: the UI then marks stale partitions
            asset_events=[
                dg.AssetObservation(asset_key=w.documents_key, partition=k, tags={DATA_VERSION_TAG: current[k]})
                for k in changed
                if k in known and not current[k].startswith("unreadable:")
            ],
            dynamic_partitions_requests=[
                r
                for r in (
                    partitions_def.build_add_request(new) if new else None,
                    partitions_def.build_delete_request(gone) if gone else None,
                )
                if r
            ],
            cursor=json.dumps(current, sort_keys=True),
        )

    return _sensor
