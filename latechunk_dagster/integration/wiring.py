"""What the asset, checks and sensor of one late-chunked table share: keys, resource keys, tables, partitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.granularities import SINGLE


@dataclass(frozen=True)
class Granularity:
    """One granularity of a table definition: its strategy, its LanceDB table and its assets.

    Attributes:
        name: the granularity's name (:data:`~latechunk_dagster.core.granularities.SINGLE`, ``""``,
            for a table of one strategy).
        strategy: its default chunking strategy (run config may choose another per run).
        table_name: its LanceDB chunk table (:func:`~latechunk_dagster.sink.schema.granularity_table`).
        chunk_key: the asset key of that table.
        index_key: the asset key of its index (``None`` without an index asset).
        parent: the next (coarser) granularity's name, where its chunks' parents are; ``None`` for
            the last granularity and a single strategy.
    """

    name: str
    strategy: ChunkingStrategy
    table_name: str
    chunk_key: dg.AssetKey
    index_key: dg.AssetKey | None
    parent: str | None = None


@dataclass(frozen=True)
class TableWiring:
    """The names one factory call chose; every builder of :mod:`latechunk_dagster.integration` reads them.

    Attributes:
        granularities: every granularity of the table definition, finest first (one, named ``""``,
            for a single strategy).
        documents_key: asset key of the documents.
        documents_from_asset: True when documents come from an upstream asset (an input of the
            chunk asset) rather than the document-store resource.
        id_column, text_column: document columns of the upstream asset's tables.
        chunks_column: the upstream asset's column of each document's own chunks (``given_chunks``),
            or ``None`` (the store resource has its own ``chunks_column``).
        partitions_def: partitions of the chunk asset (one per shard for a dynamic store).
        pool: Dagster concurrency pool of the encoder (``None``: no pool).
        engine_key, lancedb_key, store_key: resource keys.
        table_name: the table definition's name (the one table of a single strategy; each
            granularity's table is named after it).
        rejected_table_name: the LanceDB table of rejected documents, one for every granularity.
        chunks_column: see above.
        op_name: a Python identifier naming the definition's steps (``<prefix>_<name>``).
        generations: the definition is under generations (:mod:`latechunk_dagster.sink.generations`):
            a run writes the generation of its vector configuration, checks and the index read the
            newest generation, and the promote asset switches readers to it.
    """

    granularities: tuple[Granularity, ...]
    documents_key: dg.AssetKey
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
    chunks_column: str | None = None
    op_name: str = "chunk_vectors"
    generations: bool = False

    @property
    def single(self) -> bool:
        """True for a table of one strategy (its one granularity is named ``""``)."""
        return len(self.granularities) == 1 and self.granularities[0].name == SINGLE

    @property
    def chunk_key(self) -> dg.AssetKey:
        """The chunk asset key of the first (finest) granularity: the only one of a single strategy."""
        return self.granularities[0].chunk_key

    @property
    def chunk_keys(self) -> list[dg.AssetKey]:
        """The chunk asset key of every granularity, finest first."""
        return [g.chunk_key for g in self.granularities]

    @property
    def index_key(self) -> dg.AssetKey | None:
        """The index asset key of the first granularity (``None`` without an index asset)."""
        return self.granularities[0].index_key

    @property
    def strategy(self) -> ChunkingStrategy:
        """The default strategy of the first (finest) granularity: the only one of a single strategy."""
        return self.granularities[0].strategy

    @property
    def strategies(self) -> dict[str, ChunkingStrategy]:
        """``{granularity: default strategy}``, finest first (``{"": strategy}`` for a single strategy)."""
        return {g.name: g.strategy for g in self.granularities}

    @property
    def chunk_tables(self) -> dict[str, str]:
        """``{granularity: LanceDB chunk table}``, finest first."""
        return {g.name: g.table_name for g in self.granularities}

    @property
    def table_names(self) -> list[str]:
        """Every LanceDB table of the definition: each granularity's chunk table, then the rejected table."""
        return [*self.chunk_tables.values(), self.rejected_table_name]

    def granularity(self, key: dg.AssetKey) -> Granularity:
        """The granularity whose chunk asset is ``key``.

        Raises:
            KeyError: ``key`` is no chunk asset of this table.
        """
        for g in self.granularities:
            if g.chunk_key == key:
                return g
        raise KeyError(f"{key.to_user_string()} is not a chunk asset of table {self.table_name!r}")

    def built_tables(self, lancedb: Any) -> tuple[dict[str, str], str]:
        """``({granularity: chunk table}, rejected table)`` the runs write now: the newest generation's
        (:func:`~latechunk_dagster.sink.generations.built_table`) when the definition is under
        generations, else :attr:`chunk_tables` and :attr:`rejected_table_name`. ``lancedb``: the resource."""
        from latechunk_dagster.sink.generations import built_table

        base, rejected = built_table(lancedb.settings().connect(), self.table_name)
        return self.tables_of(base), rejected or self.rejected_table_name

    def served_tables(self, lancedb: Any) -> dict[str, str]:
        """``{granularity: chunk table}`` readers are served now: the current generation's
        (:func:`~latechunk_dagster.sink.generations.current_table`) under generations, else
        :attr:`chunk_tables`. ``lancedb``: the resource."""
        from latechunk_dagster.sink.generations import current_table

        return self.tables_of(current_table(lancedb.settings().connect(), self.table_name))

    def tables_of(self, base: str) -> dict[str, str]:
        """``{granularity: chunk table}`` of the generation whose base name is ``base``."""
        from latechunk_dagster.sink.schema import granularity_table

        if base == self.table_name:
            return self.chunk_tables
        return {g.name: granularity_table(base, g.name) for g in self.granularities}

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
