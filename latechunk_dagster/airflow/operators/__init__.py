"""Operators of the late-chunking Airflow provider (:mod:`latechunk_dagster.airflow.operators.latechunk`)."""

from latechunk_dagster.airflow.operators.generations import LateChunkPromoteOperator
from latechunk_dagster.airflow.operators.latechunk import (
    ENGINE_POOL,
    LateChunkChecksOperator,
    LateChunkIndexOperator,
    LateChunkShardOperator,
    ListShardsOperator,
    table_asset,
)

__all__ = [
    "ENGINE_POOL",
    "LateChunkChecksOperator",
    "LateChunkIndexOperator",
    "LateChunkPromoteOperator",
    "LateChunkShardOperator",
    "ListShardsOperator",
    "table_asset",
]
