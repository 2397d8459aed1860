"""The Dagster ``Definitions`` of the embedded default: ``dagster dev -m latechunk_dagster.app.definitions``.

Built with the same factory a user calls (:func:`~latechunk_dagster.late_chunk_assets`): the
shipped model, a local LanceDB under ``$LATECHUNK_HOME`` and the demo store (or
``LATECHUNK_DOCUMENT_STORE``), see :mod:`latechunk_dagster.app.settings`. Two granularities from
one encode (:func:`~latechunk_dagster.app.demo_queries.demo_granularities`: tables
``chunks_sentences32`` and ``chunks_sentences128``), which ``retrieval_eval`` compares.
"""

import dagster as dg
from pydantic import Field

from latechunk_dagster import LateChunkTranslator, late_chunk_assets
from latechunk_dagster.app import settings
from latechunk_dagster.app.demo_queries import demo_granularities
from latechunk_dagster.app.settings import shipped_model_path
from latechunk_dagster.core.blending import DEFAULT_BLEND
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource
from latechunk_dagster.integration.translator import LateChunkTableProps
from latechunk_dagster.sources.files import DocumentStore


class DemoDocumentStoreResource(DocumentStoreResource):
    """The document store of the embedded default: builds the stdlib demo corpus at ``path`` first if asked."""

    build_demo: bool = Field(default=False, description="Build the stdlib demo corpus at `path` if missing.")

    def get_store(self) -> DocumentStore:
        from pathlib import Path

        p = Path(self.path)
        if self.build_demo and not (p.is_dir() and any(p.glob("*.jsonl"))):
            from latechunk_dagster.app.demo_corpus import build_demo_store

            build_demo_store(p)
        return super().get_store()


def default_resources() -> dict[str, dg.ConfigurableResource]:
    store_path, build_demo = settings.document_store()
    return {
        # blended vectors searched small-to-big: the default that does not lose to chunks alone (issue 48)
        "engine": VLLMEngineResource(model=shipped_model_path(), blend=DEFAULT_BLEND),
        "lancedb": LanceDBResource(uri=settings.lancedb_uri()),
        "store": DemoDocumentStoreResource(path=store_path, build_demo=build_demo),
    }


RESOURCES = default_resources()


class DefaultAppTranslator(LateChunkTranslator):
    """The embedded default's names: the index assets are ``chunk_index_<granularity>`` (not
    ``chunk_vectors_<granularity>_index``; ``chunk_index`` for a table of one strategy)."""

    def get_index_spec(self, props: LateChunkTableProps) -> dg.AssetSpec:
        key = f"chunk_index_{props.granularity}" if props.granularity else "chunk_index"
        return super().get_index_spec(props).replace_attributes(key=dg.AssetKey(key))


#: The table definition of the embedded default: one chunk asset per granularity
#: (``chunk_vectors_sentences32``, ``chunk_vectors_sentences128``), partitions ``document_shards``.
TABLE = late_chunk_assets(
    name="chunk_vectors",
    model=RESOURCES["engine"].model_path(),
    translator=DefaultAppTranslator(),
    strategies=demo_granularities(),
    job_name="chunk_documents",
    index_job_name="index_chunks",
    sensor_name="document_store_sensor",
    queries=settings.queries_path(),
)
nightly_index = dg.ScheduleDefinition(
    job=TABLE.jobs[1], cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.STOPPED
)
#: ``retrieval_eval`` (every granularity side by side, small-to-big, the winner) and its check
#: ``late_not_below_naive`` (none without a query file).
EVAL_JOBS = (
    [dg.define_asset_job("evaluate_retrieval", selection=dg.AssetSelection.assets(*TABLE.extra_assets))]
    if TABLE.extra_assets
    else []
)

defs = dg.Definitions.merge(
    TABLE.to_definitions(
        resources=RESOURCES,
        schedules=[nightly_index],
        # One process per run: the chunking step and the parity check share one engine load
        # (the multiprocess executor would start the model once per step process).
        executor=dg.in_process_executor,
    ),
    dg.Definitions(jobs=EVAL_JOBS),
)
