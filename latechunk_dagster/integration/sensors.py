"""Keep dynamic partitions in sync with the store: new shards become partitions, changed shards re-run."""

import hashlib
import json
import logging
from collections.abc import Callable, Iterable

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from latechunk_dagster.integration.resources import LanceDBResource
from latechunk_dagster.integration.wiring import TableWiring, dynamic_name
from latechunk_dagster.pipeline.partition import SHARD_ERRORS
from latechunk_dagster.pipeline.removals import check_removals
from latechunk_dagster.sources.files import DocumentStore, IncompleteListingError

log = logging.getLogger(__name__)

#: How a user removes, from a shell, the partitions a store sensor refused to remove.
SENSOR_HOW = "`latechunk sync-partitions -f YOUR_DEFINITIONS.py --max-delete 100%` (or -m YOUR.MODULE)"


def sync_partitions(
    instance: dg.DagsterInstance,
    store: DocumentStore,
    partitions_def: dg.DynamicPartitionsDefinition,
    lancedb: LanceDBResource | None = None,
    table_names: list[str] | None = None,
    *,
    warn: Callable[[str], None] | None = None,
    max_delete: float | str | None = None,
    how: str = "sync_partitions(..., max_delete=1.0)",
) -> tuple[list[str], list[str]]:
    """Add the store's shards that are not yet partitions; delete the partitions whose shard left
    the store and (with ``lancedb``) their rows in ``table_names``, so search never returns
    documents that left the store.

    What is removed is decided by :meth:`Listing.removed
    <latechunk_dagster.sources.listing.Listing.removed>` over Dagster's partitions *and* the
    tables' ``partition`` values (rows a run committed after its shard was removed are found too):
    nothing when the store could not be listed whole (a file being rewritten, a directory that
    cannot be listed), never a shard a skipped entry stands for. Every entry not read (a name that
    cannot be a partition key, a ``.jsonl.gz`` file, a FIFO...) gets a line on ``warn`` (default:
    this module's logger); every other shard is synced as usual.

    A sync that would remove more than ``max_delete`` (a share of the known partitions, default
    ``$LATECHUNK_MAX_DELETE`` or 50%: :mod:`latechunk_dagster.pipeline.removals`) changes nothing
    and raises, naming the partitions, their rows and ``how`` to remove them anyway.

    Returns ``(added, removed)``. Used by the ``latechunk sync-partitions`` command; the sensor
    does the same through a ``SensorResult``.

    Raises:
        IncompleteListingError: the store could not be listed at all (e.g. a single-file store cut
            off mid-write); nothing was added or removed. The message names the file.
        TooManyRemovalsError: more than ``max_delete`` of the partitions would be removed; nothing
            was added or removed.
    """
    name = partitions_def.name
    assert name is not None
    listing = store.listing()
    for line in listing.warnings():
        (warn or log.warning)(line)
    if listing.gaps and not listing.shards:
        raise IncompleteListingError(listing.incomplete_reason())
    known = instance.get_dynamic_partitions(name)
    db = lancedb.settings().connect() if lancedb and table_names else None
    stored = lancedb.settings().stored_partitions(table_names) if lancedb is not None and table_names else set()
    added = sorted(set(listing.shards) - set(known))
    removed = listing.removed(known, stored)
    check_removals(removed, set(known) | stored, max_delete, how=how, db=db, table_names=table_names or ())
    if added:
        instance.add_dynamic_partitions(name, added)
    if lancedb is not None and table_names:
        lancedb.drop_partitions(table_names, removed)
    for key in set(removed) & set(known):
        instance.delete_dynamic_partition(name, key)
    return added, removed


def range_run_requests(
    order: list[str], changed: list[str], versions: dict[str, str], generation: int = 0
) -> list[dg.RunRequest]:
    """One run per contiguous stretch of changed partitions (in partition order).

    A stretch of several partitions becomes one run over a partition range, so the single-run
    backfill policy loads the engine once for all of them. ``run_key`` is a hash of the shard
    fingerprints and the sensor cursor's ``generation`` (one more at every tick that requests
    runs): a tick that failed before its cursor was saved requests the same keys again (Dagster
    runs a key once), while a later change back to content seen before (an edit reverted, a shard
    removed and restored) gets a new key, so it runs.
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
        run_key = hashlib.sha256(json.dumps([generation, [(k, versions[k]) for k in keys]]).encode()).hexdigest()
        if len(keys) == 1:
            requests.append(dg.RunRequest(partition_key=keys[0], run_key=run_key))
        else:
            tags = {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
            requests.append(dg.RunRequest(run_key=run_key, tags=tags))
    return requests


def shard_fingerprints(st: DocumentStore, shards: Iterable[str] | None = None) -> dict[str, str]:
    """{shard: fingerprint} of ``shards`` (default: every shard); a shard that cannot be read gets
    ``"unreadable:<error>"`` so that it is still requested, and its run records why (see
    ``chunk_vectors``). Errors are told apart by :data:`SHARD_ERRORS` (bad data); any other error
    is a bug and fails the tick.

    Raises:
        IncompleteListingError: an object store's listing failed (no shard is read as changed)."""
    wanted = list(st.shards() if shards is None else shards)
    try:
        every = st.fingerprints()
        return {k: every[k] for k in wanted if k in every}
    except IncompleteListingError:  # the store, not a shard, cannot be read (an object store's listing failed)
        raise
    except SHARD_ERRORS:
        out = {}
        for shard in wanted:
            try:
                out[shard] = st.shard_fingerprint(shard)
            except SHARD_ERRORS as exc:
                out[shard] = f"unreadable:{exc}"
        return out


def read_cursor(cursor: str | None) -> tuple[int, dict[str, str]]:
    """``(generation, {shard: fingerprint})`` of the store sensor's cursor (a cursor written before
    generations were counted, a plain ``{shard: fingerprint}`` object, is generation 0)."""
    value = json.loads(cursor) if cursor else {}
    if isinstance(value.get("fingerprints"), dict):
        return int(value.get("generation", 0)), value["fingerprints"]
    return 0, value


#: Sensor metadata key of what ``latechunk sync-partitions -m/-f`` syncs (:func:`sync_target`).
SYNC_METADATA = "latechunk/sync"


def sync_target(w: TableWiring) -> dict[str, object]:
    """What a partition sync of the table needs, by name: ``{"partitions": dynamic partitions name,
    "store_key", "lancedb_key": resource keys, "table_names": the tables of its rows}``; the store
    sensor carries it as metadata (:data:`SYNC_METADATA`), so a loaded ``Definitions`` says it."""
    return {
        "partitions": dynamic_name(w.partitions_def),
        "store_key": w.store_key,
        "lancedb_key": w.lancedb_key,
        "table_names": w.table_names,
    }


def build_store_sensor(w: TableWiring, name: str) -> dg.SensorDefinition:
    """A sensor that adds a partition per new shard, requests runs of new or changed shards (of every
    granularity's chunk asset: one run encodes them together) and drops the partitions and rows of
    shards that left the store, from every granularity table and the rejected table (dynamic
    partitions only). A tick that would remove more than the share ``LATECHUNK_MAX_DELETE`` (default
    50%) of the partitions at once fails whole with
    :class:`~latechunk_dagster.pipeline.removals.TooManyRemovalsError` (no partition, run or row
    changes); ``latechunk sync-partitions ... --max-delete 100%`` removes them."""
    pname = dynamic_name(w.partitions_def)
    if pname is None:
        raise ValueError("the store sensor needs a DynamicPartitionsDefinition")
    partitions_def = w.partitions_def
    assert isinstance(partitions_def, dg.DynamicPartitionsDefinition)

    @dg.sensor(
        name=name,
        asset_selection=w.chunk_keys,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        required_resource_keys={w.store_key, w.lancedb_key},
        description="Adds a partition per new shard, materializes new or changed shards, and drops the "
        "partitions and rows of shards that left the store (refused, failing the tick, when more than "
        "LATECHUNK_MAX_DELETE, default 50%, of the partitions would go at once).",
        metadata={SYNC_METADATA: dg.MetadataValue.json(sync_target(w))},
    )
    # direct invocation (tests, `sensor(context)`) also passes the required resources as keywords
    def _sensor(context: dg.SensorEvaluationContext, **_resources: object) -> dg.SensorResult | dg.SkipReason:
        try:
            st = w.resource(context, w.store_key).get_store()
        except IncompleteListingError as exc:  # an unreachable or half-listed bucket: nothing is read as removed
            return dg.SkipReason(f"{exc}; no partition is added or removed")
        lancedb = w.resource(context, w.lancedb_key)
        generation, previous = read_cursor(context.cursor)
        listing = st.listing()
        for line in listing.warnings():
            context.log.warning(line)
        if listing.gaps and not listing.shards:
            return dg.SkipReason(listing.incomplete_reason())
        # a granularity removed from the definition: its table goes before rows are compared (contract 7)
        lancedb.drop_leftover_tables(w.table_name, [g.name for g in w.granularities if g.name], context.log.warning)
        known_order = context.instance.get_dynamic_partitions(pname)
        known = set(known_order)
        db = lancedb.settings().connect()
        stored = lancedb.settings().stored_partitions(w.table_names)  # every live generation's
        gone = listing.removed(known, stored)
        # too many at once: the tick fails whole (no partition, run or row changes), naming them
        check_removals(gone, known | stored, how=SENSOR_HOW, db=db, table_names=w.table_names)
        try:  # an object store's fingerprints come with its listing (no second listing, no read)
            listed = listing.fingerprints
            current = dict(listed) if listed is not None else shard_fingerprints(st, listing.shards)
        except IncompleteListingError as exc:  # an object store's second listing failed: read nothing as changed
            return dg.SkipReason(f"{exc}; no partition is added or removed")
        new = sorted(set(current) - known)
        changed = sorted(k for k, fp in current.items() if previous.get(k) != fp)
        if gone:
            dropped = lancedb.drop_partitions(w.table_names, gone)
            context.log.info(f"shards gone from the store: {gone}; deleted {dropped} rows")
        if changed:
            generation += 1
        # a shard not listed but not removed (held by a skipped entry, behind a gap) keeps its fingerprint
        fingerprints = {k: v for k, v in previous.items() if k not in gone and k in known} | current
        gone = [k for k in gone if k in known]
        order = [k for k in known_order if k in current] + new
        return dg.SensorResult(
            run_requests=range_run_requests(order, changed, current, generation),
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
            cursor=json.dumps({"generation": generation, "fingerprints": fingerprints}, sort_keys=True),
        )

    return _sensor
