"""The code location of the Kubernetes deployment (``dagster api grpc --python-file definitions.py``).

One late-chunked table: documents from the store volume, vectors from the vLLM servers of
``deploy/vllm-server.yaml``, rows in LanceDB on S3. Everything the pods differ in comes from their
environment (``deploy/dagster-values.yaml``): ``LATECHUNK_VLLM_URL``, ``LATECHUNK_MODEL``,
``LATECHUNK_LANCEDB_URI``, ``LATECHUNK_DOCUMENT_STORE``, and the ``AWS_*`` keys of
``deploy/storage-secret.yaml``, which LanceDB reads by itself (no ``storage_options`` here, so no key
enters the resource config the UI shows).

A backfill runs one partition per run (``backfill_policy=None``): the daemon's queue spreads the runs
over run pods, and the engine pool (``latechunk_engine``) lets as many encode at once as there are
servers.
"""

import os

import dagster as dg

from latechunk_dagster import DocumentStoreResource, LanceDBResource, late_chunk_assets
from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

#: The model directory on the models volume: the servers serve it, this process tokenizes with it.
MODEL = os.environ.get("LATECHUNK_MODEL", "/models/all-MiniLM-L6-v2")

table = late_chunk_assets(table_name="chunks_minilm", model=MODEL, backfill_policy=None)

defs = table.to_definitions(
    resources={
        "engine": VLLMServerEngineResource(
            base_url=dg.EnvVar("LATECHUNK_VLLM_URL"), model=MODEL, max_in_flight=8, timeout_s=120
        ),
        "lancedb": LanceDBResource(uri=dg.EnvVar("LATECHUNK_LANCEDB_URI")),
        "store": DocumentStoreResource(path=dg.EnvVar("LATECHUNK_DOCUMENT_STORE")),
    },
)
