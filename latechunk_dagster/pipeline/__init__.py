"""A partition as a bounded stream: read, skip unchanged, encode in batches, stage, one atomic commit.

Dagster-free: :func:`materialize_partition` is what the ``chunk_vectors`` asset calls per partition.
"""

from latechunk_dagster.pipeline.config import CHUNKING_VERSION, default_batch_tokens, vector_config
from latechunk_dagster.pipeline.partition import (
    IN_FLIGHT_BATCHES,
    PartitionReport,
    SystemicFailureError,
    materialize_partition,
)
from latechunk_dagster.pipeline.progress import Progress

__all__ = [
    "CHUNKING_VERSION",
    "IN_FLIGHT_BATCHES",
    "PartitionReport",
    "Progress",
    "SystemicFailureError",
    "default_batch_tokens",
    "materialize_partition",
    "vector_config",
]
