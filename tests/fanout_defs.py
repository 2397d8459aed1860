"""The code location of the fan-out test: the factory's chunk asset over a store, two vLLM servers, S3.

Loaded by Dagster's daemon (and its code server, run and step processes) from a workspace file;
the deployment comes from the JSON in :data:`SPEC_ENV` (servers, model directory, table URI and
storage options, store path, partitions), so every process of a run builds the same definitions.
"""

from __future__ import annotations

import json
import os
from typing import Any

import dagster as dg

from latechunk_dagster import FixedTokens, late_chunk_assets
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

SPEC_ENV = "LATECHUNK_FANOUT_SPEC"
STRATEGY = FixedTokens(chunk_size=8)


def build(spec: dict[str, Any]) -> tuple[Any, dg.Definitions]:
    """(the factory's result, the Definitions) of one table on ``spec``'s servers, store and table."""
    table = late_chunk_assets(
        partitions_def=dg.StaticPartitionsDefinition(spec["partitions"]),
        backfill_policy=dg.BackfillPolicy.multi_run(1),
        strategy=STRATEGY,
        sensor=False,
        parity_check=False,
        index=False,
    )
    first, *others = spec["servers"]
    resources = {
        "engine": VLLMServerEngineResource(
            base_url=first, other_base_urls=others, model=spec["model"], retries=2, backoff_s=0.2
        ),
        "lancedb": LanceDBResource(uri=spec["db"], storage_options=spec.get("storage_options", {})),
        "store": DocumentStoreResource(path=spec["store"]),
    }
    return table, dg.Definitions.merge(table.to_definitions(), dg.Definitions(resources=resources))


if SPEC_ENV in os.environ:
    _, defs = build(json.loads(os.environ[SPEC_ENV]))
