"""Maps one late-chunked table to Dagster asset specs: keys, groups, descriptions and code versions.

Subclass :class:`LateChunkTranslator` and override one method to change how the assets of
:func:`~latechunk_dagster.late_chunk_assets` look in Dagster (the dagster-sling / dagster-dbt
translator pattern); the factory never hard-codes a key, group or version. Each spec reaches
Dagster whole: every attribute it sets (owners, tags, kinds, metadata, automation condition,
freshness policy, description, group, code version) is on the built asset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg

from latechunk_dagster import __version__
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.granularities import SINGLE
from latechunk_dagster.pipeline.config import CHUNKING_VERSION
from latechunk_dagster.sink.schema import granularity_table


@dataclass(frozen=True)
class LateChunkTableProps:
    """What the translator knows about one late-chunked table, or one granularity of it.

    A table definition of several strategies (``late_chunk_assets(strategies={...})``) has one
    chunk table per granularity; the translator is asked for each granularity's chunk and index
    specs with that granularity's props (``granularity``, ``strategy``, ``parent_strategy``).

    Attributes:
        name: name of the chunk asset (``"chunk_vectors"``); a granularity's chunk asset is
            :attr:`asset_name` (``"chunk_vectors_fine"``).
        key_prefix: asset key prefix shared by the table's assets.
        group_name: default Dagster group.
        table_name, rejected_table_name: LanceDB table names of the definition (a granularity's own
            chunk table is :attr:`chunk_table_name`).
        strategy: the default chunking strategy of the granularity (run config may choose another
            per run); the first granularity's in the documents spec.
        model_version: fingerprint of the model directory (config files and weight sizes,
            :func:`latechunk_dagster.core.model_card.model_version`), ``None`` when unknown.
        documents_key: key of the documents asset the chunk asset reads.
        tags: tags of every asset of the table.
        automation_condition: when Dagster's automation requests chunk partitions
            (``late_chunk_assets(automation_condition=...)``); ``None``: never on its own.
        granularity: the granularity's name; ``""`` for a table of one strategy.
        parent_strategy: the next (coarser) granularity's default strategy, which this one's parent
            links depend on; ``None`` for the last granularity and a single strategy.
    """

    name: str
    key_prefix: tuple[str, ...]
    group_name: str
    table_name: str
    rejected_table_name: str
    strategy: ChunkingStrategy
    model_version: str | None
    documents_key: dg.AssetKey
    tags: dict[str, str] = field(default_factory=dict)
    automation_condition: dg.AutomationCondition | None = None
    granularity: str = SINGLE
    parent_strategy: ChunkingStrategy | None = None

    @property
    def asset_name(self) -> str:
        """The chunk asset's name: ``name``, or ``f"{name}_{granularity}"`` for a named granularity."""
        return f"{self.name}_{self.granularity}" if self.granularity else self.name

    @property
    def chunk_table_name(self) -> str:
        """The granularity's LanceDB chunk table (:func:`~latechunk_dagster.sink.schema.granularity_table`)."""
        return granularity_table(self.table_name, self.granularity)


class LateChunkTranslator:
    """Default asset specs of a late-chunked table. Override any method in a subclass.

    Example::

        import dagster as dg
        from latechunk_dagster import LateChunkTranslator, late_chunk_assets

        class MyTranslator(LateChunkTranslator):
            def get_chunk_spec(self, props):
                return super().get_chunk_spec(props).replace_attributes(
                    owners=["team:search"], automation_condition=dg.AutomationCondition.eager()
                )

        table = late_chunk_assets(name="e5_chunks", translator=MyTranslator())
        assert table.chunk_asset.key == dg.AssetKey("e5_chunks")
        assert table.chunk_asset.owners_by_key[table.chunk_asset.key] == ["team:search"]
    """

    def key(self, props: LateChunkTableProps, name: str) -> dg.AssetKey:
        """``key_prefix + [name]``."""
        return dg.AssetKey([*props.key_prefix, name])

    def get_code_version(self, props: LateChunkTableProps) -> str:
        """Code version of a chunk asset: package chunking version, model fingerprint, default strategy
        (and, for a granularity with parents, the next granularity's strategy: ``parent.<strategy>``).

        A change of any of them marks every partition stale in the UI. A strategy chosen in one
        run's config is recorded in the rows' lineage, not here.
        """
        parts = [f"latechunk-{__version__}", f"chunking.{CHUNKING_VERSION}"]
        if props.model_version:
            parts.append(f"model.{props.model_version}")
        parts.append(props.strategy.describe())
        if props.parent_strategy is not None:
            parts.append(f"parent.{props.parent_strategy.describe()}")
        return "+".join(parts)

    def get_chunk_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        """Spec of the partitioned chunk asset of one granularity (one partition per shard)."""
        where = ""
        if props.granularity:
            where = f" ({props.strategy.describe()} chunks of granularity {props.granularity!r})"
        metadata = {"table_name": props.chunk_table_name, "rejected_table_name": props.rejected_table_name}
        if props.granularity:
            metadata["granularity"] = props.granularity
        return dg.AssetSpec(
            key=self.key(props, props.asset_name),
            deps=[props.documents_key],
            description=f"Late-chunked vectors of every document of a shard, in LanceDB table "
            f"{props.chunk_table_name!r}{where} (one encoder pass per document for every granularity).",
            group_name=props.group_name,
            code_version=self.get_code_version(props),
            kinds={"lancedb", "vllm"},
            metadata=metadata,
            tags=props.tags,
            automation_condition=props.automation_condition,
        )

    def get_documents_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        """Spec of the observable document-store source asset (data version per shard)."""
        return dg.AssetSpec(
            key=props.documents_key,
            description=(
                "Shards of the document store; data version per shard: in a local store the sha256 of its "
                "(doc_id, text sha256) pairs, in an object store the sha256 of what the listing says of its "
                "files (path, size, modification time): no object is read."
            ),
            group_name=props.group_name,
            tags=props.tags,
        )

    def get_index_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        """Spec of the index asset over the whole chunk table of one granularity."""
        return dg.AssetSpec(
            key=self.key(props, f"{props.asset_name}_index"),
            deps=[self.key(props, props.asset_name)],
            description=f"ANN index on vector, FTS on text, scalar indexes on doc_id/partition of "
            f"{props.chunk_table_name!r}; old versions compacted.",
            group_name=props.group_name,
            kinds={"lancedb"},
            tags=props.tags,
        )


def as_key_prefix(prefix: str | Sequence[str] | None) -> tuple[str, ...]:
    """``None`` -> ``()``; ``"a/b"`` or ``"a"`` -> ``("a", "b")`` / ``("a",)``; a sequence as is."""
    if prefix is None:
        return ()
    if isinstance(prefix, str):
        return tuple(p for p in prefix.split("/") if p)
    return tuple(prefix)
