"""Keep partitions in sync with the store: new shards become partitions, changed shards re-run."""

import json

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from latechunk_dagster.assets import chunk_vectors, document_shards, documents
from latechunk_dagster.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.store import DocumentStore


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
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=k, run_key=f"{k}:{current[k][:200]}") for k in changed],
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
