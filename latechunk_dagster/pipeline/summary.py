"""A shard's summary: the names both orchestrators publish for a shard (Dagster's partition
metadata, Airflow's XCom value), from its :class:`~latechunk_dagster.pipeline.accounting.PartitionReport`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.granularities import SINGLE, Granularities
from latechunk_dagster.pipeline.accounting import GranularityReport, PartitionReport
from latechunk_dagster.pipeline.config import is_single, normalised
from latechunk_dagster.sink.generations import tag_name
from latechunk_dagster.sink.schema import granularity_table

#: One strategy, or several granularities ``{name: strategy}`` finest first (a run's edge's input).
Strategies = ChunkingStrategy | Mapping[str, ChunkingStrategy]

#: The keys of :func:`shard_summary`, in order: what both orchestrators publish for a shard.
SUMMARY_KEYS = (
    "table_uri",
    "table",
    "version",
    "tag",
    "partition",
    "run_id",
    "documents_in",
    "documents_reencoded",
    "documents_new",
    "documents_skipped",
    "documents_rejected",
    "documents_deleted",
    "rejected_reasons",
    "chunks_written",
    "partition_rows",
    "chunks_cut_inside_words",
    "tokens_encoded",
    "window_tokens",
    "encoder_windows",
    "documents_over_model_length",
    "embedding_dim",
    "engine_seconds",
    "tokens_per_second",
    "seconds",
    "engine_paths",
    "model",
    "model_sha256",
    "strategy",
    "engine_path",
    "engine",
    "shard_fingerprint",
    "doc_ids_sha256",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "commit_attempts",
    "lancedb_commit_attempts",
    "granularities",
    "generation",
)

#: The keys of each granularity's entry of a summary's ``granularities`` (``{name: {key: value}}``;
#: one entry ``""`` for a single strategy, whose values are the top-level ones).
GRANULARITY_KEYS = (
    "table_uri",
    "table",
    "version",
    "tag",
    "strategy",
    "chunks_written",
    "partition_rows",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
)


def describe_strategies(strategy: Strategies | Granularities) -> str:
    """``strategy.describe()``, or ``"small=FixedTokens(...); large=..."`` for several granularities
    (``strategy``: as the run's edge normalised it, or a bare strategy)."""
    granularities = normalised(strategy)
    if is_single(granularities):
        return granularities[SINGLE].describe()
    return "; ".join(f"{g}={s.describe()}" for g, s in granularities.items())


def shard_summary(
    report: PartitionReport,
    chunker: LateChunker,
    strategy: Strategies | Granularities,
    *,
    table_uri: str,
    table_name: str,
    table_version: int,
    run_id: str,
    generation: int | None = None,
) -> dict[str, Any]:
    """A shard's :class:`PartitionReport` under :data:`SUMMARY_KEYS` (JSON-able, no vectors).

    ``version``: the table version after the commit, or ``table_version`` when nothing changed.
    With several granularities, ``table_uri`` / ``table_name`` name the table definition
    (each granularity's table is :func:`~latechunk_dagster.sink.schema.granularity_table` of them),
    ``version`` is the first (finest) granularity table's, ``chunks_written``, ``partition_rows``,
    ``rows_*`` and ``commit_attempts`` are sums over the tables, and ``granularities`` holds each
    table's own (:data:`GRANULARITY_KEYS`); for one strategy its one entry ``""`` repeats the
    top-level values. ``tag``: the tag :func:`run_shard` put on that commit's table version
    (:func:`~latechunk_dagster.sink.generations.tag_name`; ``""`` when nothing was committed), so
    ``table.checkout(tag)`` reads what the run wrote; ``generation``: the table definition's generation
    the run wrote (:mod:`latechunk_dagster.sink.generations`), ``None`` outside generations.
    """
    granularities = normalised(strategy)
    single = is_single(granularities)
    write = report.write
    parts = report.granularities or {
        "": GranularityReport(table_name, report.chunks_written, report.partition_rows, write, table_version)
    }
    per: dict[str, dict[str, Any]] = {}
    for g, s in granularities.items():
        part = parts[g]
        w = part.write
        per[g] = {
            "table_uri": granularity_table(table_uri, g),
            "table": granularity_table(table_name, g),
            "version": int(w.version if w else (table_version if single else part.version)),
            "tag": tag_name(run_id, report.partition) if w else "",
            "strategy": s.describe(),
            "chunks_written": part.chunks_written,
            "partition_rows": part.partition_rows,
            "rows_inserted": w.inserted if w else 0,
            "rows_updated": w.updated if w else 0,
            "rows_deleted": w.deleted if w else 0,
        }
    writes = [p.write for p in parts.values() if p.write is not None]
    out = {
        "table_uri": table_uri,
        "table": table_name,
        "version": next(iter(per.values()))["version"],
        "tag": next(iter(per.values()))["tag"],
        "partition": report.partition,
        "run_id": run_id,
        "documents_in": report.documents,
        "documents_reencoded": report.documents_reencoded,
        "documents_new": report.documents_new,
        "documents_skipped": report.documents_skipped,
        "documents_rejected": report.rejected,
        "documents_deleted": report.documents_deleted,
        "rejected_reasons": dict(report.rejected_reasons),
        "chunks_written": report.chunks_written,
        "partition_rows": report.partition_rows,
        "chunks_cut_inside_words": report.word_cuts,
        "tokens_encoded": report.tokens_encoded,
        "window_tokens": report.window_tokens,
        "encoder_windows": report.windows,
        "documents_over_model_length": report.windowed_documents,
        "embedding_dim": chunker.embedding_dim,
        "engine_seconds": round(report.engine_seconds, 3),
        "tokens_per_second": round(report.tokens_encoded / max(report.engine_seconds, 1e-9), 1),
        "seconds": round(report.seconds, 3),
        "engine_paths": dict(report.paths),
        "model": chunker.card.name,
        "model_sha256": chunker.card.fingerprint,
        "strategy": describe_strategies(granularities),
        "engine_path": chunker.path,
        "engine": chunker.settings.engine,  # "vllm", "vllm-server", "transformers"
        "shard_fingerprint": report.fingerprint,
        "doc_ids_sha256": hashlib.sha256(json.dumps(report.chunked_doc_ids).encode()).hexdigest(),
        "rows_inserted": sum(w.inserted for w in writes),
        "rows_updated": sum(w.updated for w in writes),
        "rows_deleted": sum(w.deleted for w in writes),
        "commit_attempts": sum(w.attempts for w in writes),
        "lancedb_commit_attempts": sum(w.lance_attempts for w in writes),
        "granularities": per,
        "generation": generation,
    }
    assert tuple(out) == SUMMARY_KEYS and all(tuple(v) == GRANULARITY_KEYS for v in per.values())
    return out
