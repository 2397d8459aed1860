"""Keep partitions in sync with the store: new shards become partitions, changed shards re-run."""

import hashlib
import json

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from latechunk_dagster.integration.assets import chunk_vectors, document_shards, documents
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.sources.files import DocumentStore


def sync_partitions(
    instance: dg.DagsterInstance, store: DocumentStore, lancedb: LanceDBResource | None = None
) -> tuple[list[str], list[str]]:
    """Add the store's shards that are not yet partitions; delete partitions whose shard is gone,
    and (with ``lancedb``) their rows, so search never returns documents that left the store.

    Returns ``(added, removed)``. Used by the ``latechunk sync-partitions`` command; the sensor
    does the same through a ``SensorResult``.
    """
    shards = set(store.shards())
    known = set(instance.get_dynamic_partitions(document_shards.name))
    added, removed = sorted(shards - known), sorted(known - shards)
    if added:
        instance.add_dynamic_partitions(document_shards.name, added)
    if lancedb is not None:
        lancedb.drop_partitions(removed)
    for key in removed:
        instance.delete_dynamic_partition(document_shards.name, key)
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


@dg.sensor(
    asset_selection=[chunk_vectors],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Adds a partition per new shard, materializes new or changed shards, and drops the "
    "partitions and rows of shards that left the store.",
)
def document_store_sensor(
    context: dg.SensorEvaluationContext, store: DocumentStoreResource, lancedb: LanceDBResource
) -> dg.SensorResult:
    st = store.get_store()
    previous: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    current = shard_fingerprints(st)
    known = set(context.instance.get_dynamic_partitions(document_shards.name))
    new = sorted(set(current) - known)
    gone = sorted(known - set(current))
    changed = sorted(k for k, fp in current.items() if previous.get(k) != fp)
    if gone:
        context.log.info(f"shards gone from the store: {gone}; deleted {lancedb.drop_partitions(gone)} rows")
    order = [k for k in context.instance.get_dynamic_partitions(document_shards.name) if k in current] + new
    return dg.SensorResult(
        run_requests=range_run_requests(order, changed, current),
        # the new data versions of the `documents` source asset: the UI then marks stale partitions
        asset_events=[
            dg.AssetObservation(asset_key=documents.key, partition=k, tags={DATA_VERSION_TAG: current[k]})
            for k in changed
            if k in known and not current[k].startswith("unreadable:")
        ],
        dynamic_partitions_requests=[
            r
            for r in (
                document_shards.build_add_request(new) if new else None,
                document_shards.build_delete_request(gone) if gone else None,
            )
            if r
        ],
        cursor=json.dumps(current, sort_keys=True),
    )
