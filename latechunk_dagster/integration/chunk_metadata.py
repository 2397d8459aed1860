"""The chunk assets' Dagster metadata: a shard job's summaries in Dagster's types.

:class:`~latechunk_dagster.pipeline.shard_job.ShardJob` computes each shard's summary
(:data:`~latechunk_dagster.pipeline.shard.SUMMARY_KEYS`, the names Airflow's XCom has too); this
module only translates: per partition (:func:`partition_metadata`, :func:`shard_error_metadata`),
and per granularity table at the end of a run (:class:`RunTotals`, :func:`table_metadata`: Dagster's
standard table entries through ``TableMetadataSet`` and ``UriMetadataSet``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

# Dagster 1.13 keeps its standard metadata sets out of the top-level namespace (``dg.TableMetadataSet``
# is absent in 1.13.28); they are public API all the same (docs: "Table metadata").
from dagster._core.definitions.metadata.metadata_set import TableMetadataSet, UriMetadataSet

#: Per partition, the summary counts a run's totals add up, by total name.
TOTALED = {
    "documents": "documents_in",
    "chunks": "chunks_written",
    "rejected": "documents_rejected",
    "tokens": "tokens_encoded",
    "seconds": "engine_seconds",
}


def metadata_value(value: Any) -> Any:
    """A summary value as Dagster metadata (ints, floats, text; dicts as JSON; None as null, so a
    reader gets ``None`` back as Airflow's XCom holds it, not the text ``"None"``)."""
    if value is None:
        return dg.MetadataValue.null()
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    if isinstance(value, dict):
        return dg.MetadataValue.json(value)
    return dg.MetadataValue.text(str(value))


def granularity_summary(summary: Mapping[str, Any], granularity: str) -> dict[str, Any]:
    """One granularity asset's view of a shard summary: the summary itself for one strategy
    (``granularity`` ``""``); else the shared counts under that granularity's own table, counts and
    commit (its ``granularities`` entry), and ``granularity``."""
    if not granularity:
        return dict(summary)
    shared = {k: v for k, v in summary.items() if k != "granularities"}
    return {**shared, **summary["granularities"][granularity], "granularity": granularity}


def partition_metadata(summary: Mapping[str, Any], granularity: str) -> dict[str, Any]:
    """A partition's metadata of one granularity asset (:func:`granularity_summary` as Dagster values)."""
    return {k: metadata_value(v) for k, v in granularity_summary(summary, granularity).items()}


def shard_error_metadata(exc: BaseException) -> dict[str, Any]:
    """A partition's metadata when its shard failed (its old rows are kept): the error, and
    ``partition_rows`` -1 so the blocking checks fail it."""
    return {"shard_error": dg.MetadataValue.text(str(exc)), "partition_rows": dg.MetadataValue.int(-1)}


@dataclass
class RunTotals:
    """One granularity asset's sums over a run's partitions (:data:`TOTALED`) and its failed shards."""

    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TOTALED, 0.0))
    unreadable_shards: int = 0

    def add(self, mine: Mapping[str, Any]) -> None:
        """Add one partition's :func:`granularity_summary`."""
        for total, key in TOTALED.items():
            self.sums[total] += mine[key]

    def metadata(self) -> dict[str, Any]:
        """The run's ``run_*`` entries."""
        s = self.sums
        return {
            "run_documents_in": dg.MetadataValue.int(int(s["documents"])),
            "run_chunks_written": dg.MetadataValue.int(int(s["chunks"])),
            "run_documents_rejected": dg.MetadataValue.int(int(s["rejected"])),
            "run_unreadable_shards": dg.MetadataValue.int(self.unreadable_shards),
            "run_tokens_per_second": dg.MetadataValue.float(s["tokens"] / max(s["seconds"], 1e-9)),
        }


def table_metadata(table: Any, uri: str) -> dict[str, Any]:
    """Dagster's standard entries of a LanceDB table (``dagster/row_count``, ``dagster/uri``,
    ``dagster/column_schema``) and its ``version``.

    Args:
        table: an open LanceDB table (``count_rows()``, ``schema``, ``version``).
        uri: where it lives (``LanceDBSettings.table_uri``).
    """
    columns = [dg.TableColumn(f.name, str(f.type)) for f in table.schema]
    return {
        **dict(TableMetadataSet(row_count=table.count_rows())),
        **dict(UriMetadataSet(uri=uri)),
        **dict(TableMetadataSet(column_schema=dg.TableSchema(columns=columns))),
        "version": dg.MetadataValue.int(table.version),
    }
