"""What the asset, checks and sensor of one late-chunked table share: keys, resource keys, tables, partitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from latechunk_dagster.core.chunking import ChunkingStrategy


@dataclass(frozen=True)
class TableWiring:
    """The names one factory call chose; every builder of :mod:`latechunk_dagster.integration` reads them.

    Attributes:
        chunk_key, documents_key, index_key: asset keys (``index_key`` ``None`` without an index asset).
        documents_from_asset: True when documents come from an upstream asset (an input of the
            chunk asset) rather than the document-store resource.
        id_column, text_column: document columns of the upstream asset's tables.
        partitions_def: partitions of the chunk asset (one per shard for a dynamic store).
        pool: Dagster concurrency pool of the encoder (``None``: no pool).
        engine_key, lancedb_key, store_key: resource keys.
        table_name, rejected_table_name: LanceDB tables.
        strategy: default chunking strategy (run config may override it per run).
    """

    chunk_key: dg.AssetKey
    documents_key: dg.AssetKey
    index_key: dg.AssetKey | None
    documents_from_asset: bool
    id_column: str
    text_column: str
    partitions_def: dg.PartitionsDefinition
    pool: str | None
    engine_key: str
    lancedb_key: str
    store_key: str
    table_name: str
    rejected_table_name: str
    strategy: ChunkingStrategy

    @property
    def table_names(self) -> list[str]:
        return [self.table_name, self.rejected_table_name]

    def resource(self, context: Any, key: str) -> Any:
        """The resource bound to ``key`` in an execution context."""
        return getattr(context.resources, key)

    def all_partition_keys(self, instance: dg.DagsterInstance) -> list[str]:
        """Every partition key, in the partitions definition's order."""
        return list(self.partitions_def.get_partition_keys(dynamic_partitions_store=instance))

    def run_partition_keys(self, tags: dict[str, str], instance: dg.DagsterInstance) -> list[str] | None:
        """The partitions a run targets, from its tags (one key, or a range); ``None`` for an unpartitioned run."""
        if "dagster/partition" in tags:
            return [tags["dagster/partition"]]
        start, end = tags.get(ASSET_PARTITION_RANGE_START_TAG), tags.get(ASSET_PARTITION_RANGE_END_TAG)
        if start and end:
            keys = self.all_partition_keys(instance)
            return keys[keys.index(start) : keys.index(end) + 1]
        return None


def dynamic_name(partitions_def: dg.PartitionsDefinition) -> str | None:
    """The name of a ``DynamicPartitionsDefinition``, else ``None``."""
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition) and partitions_def.name:
        return partitions_def.name
    return None
