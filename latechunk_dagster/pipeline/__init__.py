"""A partition as a bounded stream: read, skip unchanged, encode in batches, stage, one atomic commit.

Dagster-free: :func:`materialize_partition` is what the ``chunk_vectors`` asset calls per partition;
:func:`chunk_partition` chunks a small partition in one engine call, into rows in memory. Both count
their results the same way (:mod:`~latechunk_dagster.pipeline.accounting`).
"""

from latechunk_dagster.pipeline.accounting import PartitionReport
from latechunk_dagster.pipeline.config import CHUNKING_VERSION, default_batch_tokens, vector_config
from latechunk_dagster.pipeline.oneshot import PartitionRows, chunk_partition
from latechunk_dagster.pipeline.partition import IN_FLIGHT_BATCHES, SystemicFailureError, materialize_partition
from latechunk_dagster.pipeline.progress import Progress

__all__ = [
    "CHUNKING_VERSION",
    "IN_FLIGHT_BATCHES",
    "PartitionReport",
    "PartitionRows",
    "Progress",
    "SystemicFailureError",
    "chunk_partition",
    "default_batch_tokens",
    "materialize_partition",
    "vector_config",
]
