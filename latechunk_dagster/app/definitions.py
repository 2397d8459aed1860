"""The Dagster ``Definitions`` of the embedded default: ``dagster dev -m latechunk_dagster.app.definitions``.

Resources read :mod:`latechunk_dagster.app.settings` (``LATECHUNK_HOME``, ``LATECHUNK_DOCUMENT_STORE``);
production deployments override them with resource config as usual.
"""

from __future__ import annotations

import dagster as dg

from latechunk_dagster.app import settings
from latechunk_dagster.core.model_card import model_version
from latechunk_dagster.integration.assets import (
    CODE_VERSION,
    ChunkingConfig,
    chunk_index,
    chunk_vectors,
    document_shards,
    documents,
)
from latechunk_dagster.integration.checks import chunk_table_checks, parity_sample
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.integration.sensors import document_store_sensor

chunk_job = dg.define_asset_job(
    "chunk_documents",
    selection=dg.AssetSelection.assets(chunk_vectors),
    partitions_def=document_shards,
    description="Late-chunk shards into LanceDB, then run the asset checks.",
)
index_job = dg.define_asset_job("index_chunks", selection=dg.AssetSelection.assets(chunk_index))
nightly_index = dg.ScheduleDefinition(
    job=index_job, cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.STOPPED
)


def default_resources() -> dict[str, dg.ConfigurableResource]:
    store_path, build_demo = settings.document_store()
    return {
        "engine": VLLMEngineResource(),
        "lancedb": LanceDBResource(uri=settings.lancedb_uri()),
        "store": DocumentStoreResource(path=store_path, build_demo=build_demo),
    }


def versioned_chunk_vectors(engine: VLLMEngineResource, default: ChunkingConfig) -> dg.AssetsDefinition:
    """``chunk_vectors`` whose code version names the model and the default strategy, so the UI
    marks every partition stale when either changes in the definitions (a strategy chosen in one
    run's config is recorded in the rows' lineage, not in the code version)."""
    version = f"{CODE_VERSION}+model.{model_version(engine.model_path())}+{default.build().describe()}"
    return chunk_vectors.map_asset_specs(lambda spec: spec.replace_attributes(code_version=version))


RESOURCES = default_resources()

defs = dg.Definitions(
    assets=[documents, versioned_chunk_vectors(RESOURCES["engine"], ChunkingConfig()), chunk_index],
    asset_checks=[chunk_table_checks, parity_sample],
    jobs=[chunk_job, index_job],
    schedules=[nightly_index],
    sensors=[document_store_sensor],
    resources=RESOURCES,
    # One process per run: the chunking step and the parity check share one engine load
    # (the multiprocess executor would start the model once per step process).
    executor=dg.in_process_executor,
)
