"""What one :func:`~latechunk_dagster.late_chunk_assets` call builds, from its arguments as one value.

:class:`FactoryArgs` holds the call's arguments (each documented on ``late_chunk_assets``);
:func:`build_table_definitions` turns them and the checked granularities into the wiring every
piece shares (:class:`~latechunk_dagster.integration.wiring.TableWiring`), the assets, checks,
sensor and jobs (:class:`LateChunkDefinitions`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.integration.assets import build_chunk_asset, build_documents_asset, build_index_asset
from latechunk_dagster.integration.checks import build_checks
from latechunk_dagster.integration.sensors import build_store_sensor
from latechunk_dagster.integration.translator import LateChunkTableProps, LateChunkTranslator, as_key_prefix
from latechunk_dagster.integration.wiring import Granularity, TableWiring, dynamic_name

#: ``backfill_policy`` left to its default (``BackfillPolicy.single_run()``; ``None`` means none).
UNSET: Any = object()


@dataclass
class LateChunkDefinitions:
    """What :func:`~latechunk_dagster.late_chunk_assets` returns for one table.

    Attributes:
        chunk_asset: the partitioned chunk asset: with ``strategies``, a multi-asset of one asset
            per granularity table (:attr:`chunk_keys`), materialized by one step.
        documents_asset: the observable store asset (``None`` when documents come from an upstream asset).
        index_asset: the index asset (one per granularity table; ``None`` with ``index=False``).
        asset_checks: the blocking checks on each chunk asset.
        sensors: the store sensor (dynamic partitions over a store only).
        jobs: ``chunk_job`` (the chunk asset and its checks) and ``index_job``.
        wiring: the names every piece shares (keys, resource keys, tables, partitions).
    """

    chunk_asset: dg.AssetsDefinition
    documents_asset: dg.AssetsDefinition | None
    index_asset: dg.AssetsDefinition | None
    asset_checks: list[dg.AssetChecksDefinition]
    sensors: list[dg.SensorDefinition]
    jobs: list[Any]
    wiring: TableWiring
    extra_assets: list[Any] = field(default_factory=list)

    @property
    def assets(self) -> list[Any]:
        """Every asset of the table (documents, chunks, index, and any added ones)."""
        return [a for a in (self.documents_asset, self.chunk_asset, self.index_asset) if a is not None] + list(
            self.extra_assets
        )

    @property
    def chunk_keys(self) -> list[dg.AssetKey]:
        """The chunk asset key of each granularity table, finest first (one for a single strategy)."""
        return self.wiring.chunk_keys

    @property
    def partitions_def(self) -> dg.PartitionsDefinition:
        return self.wiring.partitions_def

    def to_definitions(self, resources: dict[str, Any] | None = None, **kwargs: Any) -> dg.Definitions:
        """A ``Definitions`` with every piece (merge it with others via ``dg.Definitions.merge``)."""
        return dg.Definitions(
            assets=self.assets,
            asset_checks=self.asset_checks,
            sensors=self.sensors,
            jobs=self.jobs,
            resources=resources,
            **kwargs,
        )


@dataclass(frozen=True)
class FactoryArgs:
    """The arguments of one :func:`~latechunk_dagster.late_chunk_assets` call, as given (each
    documented there)."""

    name: str
    key_prefix: str | Sequence[str] | None
    group_name: str
    partitions_def: dg.PartitionsDefinition | None
    backfill_policy: dg.BackfillPolicy | None
    pool: str | None
    engine_resource_key: str
    lancedb_resource_key: str
    store_resource_key: str
    documents: dg.AssetKey | str | Sequence[str] | dg.AssetsDefinition | None
    id_column: str
    text_column: str
    chunks_column: str | None
    table_name: str
    rejected_table_name: str
    strategy: ChunkingStrategy | None
    strategies: Mapping[str, ChunkingStrategy] | None
    model: str | None
    translator: LateChunkTranslator | None
    automation_condition: dg.AutomationCondition | None
    index: bool
    sensor: bool
    parity_check: bool
    job_name: str | None
    index_job_name: str | None
    sensor_name: str | None
    queries: str | Path | None
    eval_margin: float
    generations: bool

    @property
    def prefix(self) -> list[str]:
        """The asset key prefix as a list."""
        return as_key_prefix(self.key_prefix)

    @property
    def slug(self) -> str:
        """``<prefix>_<name>``: what the jobs and the sensor are named after."""
        return "_".join([*self.prefix, self.name]) if self.prefix else self.name

    @property
    def documents_key(self) -> dg.AssetKey:
        """The documents asset's key: the upstream asset's, or ``<prefix>/documents`` (the store's)."""
        if isinstance(self.documents, dg.AssetsDefinition):
            return self.documents.key
        if self.documents is not None:
            return dg.AssetKey.from_coercible(self.documents)
        return dg.AssetKey([*self.prefix, "documents"])


def build_table_definitions(args: FactoryArgs, granularities: dict[str, ChunkingStrategy]) -> LateChunkDefinitions:
    """The assets, checks, sensor and jobs of one table (:func:`~latechunk_dagster.late_chunk_assets`).

    Args:
        granularities: the checked ``{granularity: strategy}``, finest first (``{"": strategy}``).
    """
    translator = args.translator or LateChunkTranslator()
    props = table_props(args, granularities)
    chunk_specs = [translator.get_chunk_spec(p) for p in props]
    index_specs = [translator.get_index_spec(p) for p in props] if args.index else []
    w = table_wiring(args, props, chunk_specs, index_specs)
    backfill_policy = dg.BackfillPolicy.single_run() if args.backfill_policy is UNSET else args.backfill_policy
    chunk_asset = build_chunk_asset(w, chunk_specs, backfill_policy)
    from_asset = args.documents is not None
    documents_asset = None if from_asset else build_documents_asset(w, translator.get_documents_spec(props[0]))
    index_asset = build_index_asset(w, index_specs) if index_specs else None
    sensors = []
    if args.sensor and not from_asset and dynamic_name(w.partitions_def):
        sensors.append(build_store_sensor(w, args.sensor_name or f"{args.slug}_store_sensor"))
    checks = build_checks(w, with_parity=args.parity_check)
    extra: list[Any] = []
    if args.queries is not None:
        from latechunk_dagster.integration.evaluation import retrieval_eval_asset

        eval_asset, eval_check = retrieval_eval_asset(
            chunk_asset_key=w.chunk_key if w.single else w.chunk_keys,
            queries_path=args.queries,
            key=translator.key(props[0], "retrieval_eval"),
            group_name=args.group_name,
            engine_resource_key=args.engine_resource_key,
            lancedb_resource_key=args.lancedb_resource_key,
            store_resource_key=None if from_asset else args.store_resource_key,
            table_name=args.table_name,
            margin=args.eval_margin,
        )
        extra.append(eval_asset)
        checks.append(eval_check)
    if args.generations:
        from latechunk_dagster.integration.promote import build_promote_asset

        extra.append(build_promote_asset(w, dg.AssetKey([*args.prefix, f"{args.name}_promote"]), args.group_name))
    return LateChunkDefinitions(
        chunk_asset=chunk_asset,
        documents_asset=documents_asset,
        index_asset=index_asset,
        asset_checks=checks,
        sensors=sensors,
        jobs=table_jobs(args, w, index_asset),
        wiring=w,
        extra_assets=extra,
    )


def table_props(args: FactoryArgs, granularities: dict[str, ChunkingStrategy]) -> list[LateChunkTableProps]:
    """What the translator sees of each granularity table, finest first."""
    from latechunk_dagster.core.model_card import model_version

    names = list(granularities)
    return [
        LateChunkTableProps(
            name=args.name,
            key_prefix=args.prefix,
            group_name=args.group_name,
            table_name=args.table_name,
            rejected_table_name=args.rejected_table_name,
            strategy=granularities[g],
            model_version=model_version(args.model) if args.model else None,
            documents_key=args.documents_key,
            automation_condition=args.automation_condition,
            granularity=g,
            parent_strategy=granularities[names[i + 1]] if i + 1 < len(names) else None,
        )
        for i, g in enumerate(names)
    ]


def table_wiring(
    args: FactoryArgs,
    props: list[LateChunkTableProps],
    chunk_specs: list[dg.AssetSpec],
    index_specs: list[dg.AssetSpec],
) -> TableWiring:
    """The names every piece of the table shares (keys, resource keys, tables, partitions)."""
    names = [p.granularity for p in props]
    partitions_def = args.partitions_def or dg.DynamicPartitionsDefinition(
        name="_".join([*args.prefix, "document_shards"])
    )
    return TableWiring(
        granularities=tuple(
            Granularity(
                name=g,
                strategy=p.strategy,
                table_name=p.chunk_table_name,
                chunk_key=spec.key,
                index_key=index_specs[i].key if index_specs else None,
                parent=names[i + 1] if g and i + 1 < len(names) else None,
            )
            for i, (g, p, spec) in enumerate(zip(names, props, chunk_specs, strict=True))
        ),
        documents_key=args.documents_key,
        documents_from_asset=args.documents is not None,
        id_column=args.id_column,
        text_column=args.text_column,
        chunks_column=args.chunks_column,
        partitions_def=partitions_def,
        pool=args.pool,
        engine_key=args.engine_resource_key,
        lancedb_key=args.lancedb_resource_key,
        store_key=args.store_resource_key,
        table_name=args.table_name,
        rejected_table_name=args.rejected_table_name,
        op_name=dg.AssetKey([*args.prefix, args.name]).to_python_identifier(),
        generations=args.generations,
    )


def table_jobs(args: FactoryArgs, w: TableWiring, index_asset: dg.AssetsDefinition | None) -> list[Any]:
    """``chunk_job`` (the chunk assets and their checks) and, with an index asset, ``index_job``."""
    tables = ", ".join(repr(t) for t in w.chunk_tables.values())
    jobs: list[Any] = [
        dg.define_asset_job(
            args.job_name or f"{args.slug}_job",
            selection=dg.AssetSelection.assets(*w.chunk_keys),
            partitions_def=w.partitions_def,
            description=f"Late-chunk partitions into {tables}, then run the asset checks.",
        )
    ]
    if index_asset is not None:
        jobs.append(
            dg.define_asset_job(
                args.index_job_name or f"{args.slug}_index_job", selection=dg.AssetSelection.assets(index_asset)
            )
        )
    return jobs
