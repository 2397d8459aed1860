"""One shard run for both orchestrators: the strategy rule, the settings, the run with its error
recording, and one summary whose names both publish.

Dagster's chunk asset (:mod:`latechunk_dagster.integration.assets`) and Airflow's
``LateChunkShardOperator`` (:mod:`latechunk_dagster.airflow.tasks`) call these, and nothing of
their own between the store and :func:`~latechunk_dagster.pipeline.materialize_partition`:

* :func:`strategy_from_run_config`: a strategy from a name and parameters over the default one
  (one default per strategy: the default strategy's own parameters, none for another strategy);
* :class:`ShardSettings`: every partition setting, checked once, reachable from both (Dagster's
  run config, the Airflow operator's arguments);
* :func:`run_shard`: the partition materialized; a shard that cannot be read or fails
  systemically (:data:`~latechunk_dagster.pipeline.partition.SHARD_ERRORS`) is recorded in the
  rejected table with one ``*`` row and the same log line, then raised;
* :func:`shard_summary`: the counts under one set of names (:data:`SUMMARY_KEYS`): Dagster's
  partition metadata and Airflow's XCom value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy, strategy_from_config
from latechunk_dagster.pipeline.accounting import PartitionReport
from latechunk_dagster.pipeline.config import check_host_workers
from latechunk_dagster.pipeline.partition import SHARD_ERRORS, materialize_partition, record_shard_failure
from latechunk_dagster.sources.documents import Document, RejectedRow

#: The keys of :func:`shard_summary`, in order: what both orchestrators publish for a shard.
SUMMARY_KEYS = (
    "table_uri",
    "table",
    "version",
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
)

CHAR_SPANS_REFUSAL = "char_spans needs per-document spans; call LateChunker.chunk directly"


def strategy_from_run_config(
    name: str | None, params: Mapping[str, Any] | None, default: ChunkingStrategy
) -> ChunkingStrategy:
    """The strategy of a run: ``name`` with ``params`` (``None``: ``default``'s name).

    One rule for both orchestrators: ``default``'s own parameters are the defaults of its name, and
    a strategy of another name has no default parameter (``fixed_tokens`` needs its ``chunk_size``).
    A value that is the text of an integer (``"64"``, what an Airflow template renders) is that integer.

    Raises:
        ValueError: an unknown name or parameter, a missing one, ``char_spans`` (spans per
            document do not come from run config).
    """
    chosen = name or default.name
    if chosen == "char_spans":
        raise ValueError(CHAR_SPANS_REFUSAL)
    merged = dict(default.params()) if chosen == default.name else {}
    merged.update({k: _int_text(v) for k, v in (params or {}).items() if v is not None})
    return strategy_from_config(chosen, merged)


def _int_text(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    return value


@dataclass(frozen=True)
class ShardSettings:
    """The settings of a shard run, checked when built (:func:`run_shard`).

    Attributes:
        batch_tokens: document tokens per engine call (``None`` or 0: the default, 8,192 on CPU,
            131,072 on GPU: :func:`~latechunk_dagster.pipeline.config.default_batch_tokens`).
        force: re-encode every document, not only new or changed ones.
        max_rejected_share, systemic_min_documents: the systemic-failure rule of
            :mod:`latechunk_dagster.pipeline.partition` (a reason that rejects at least this share of
            at least this many documents fails the shard, keeping its old rows).
        host_workers: host worker processes (``None``: the default, ``LATECHUNK_HOST_WORKERS`` or 0).

    Raises:
        ValueError: a value out of range, naming the setting.
    """

    batch_tokens: int | None = None
    force: bool = False
    max_rejected_share: float = 0.5
    systemic_min_documents: int = 10
    host_workers: int | None = None

    def __post_init__(self) -> None:
        if self.batch_tokens is not None and (isinstance(self.batch_tokens, bool) or self.batch_tokens < 0):
            raise ValueError(f"batch_tokens must be an integer >= 0 (0: the default), got {self.batch_tokens!r}")
        share = self.max_rejected_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not (0 < share <= 1):
            raise ValueError(f"max_rejected_share must be a number in (0, 1], got {share!r}")
        if not math.isfinite(float(share)):
            raise ValueError(f"max_rejected_share must be finite, got {share!r}")
        n = self.systemic_min_documents
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"systemic_min_documents must be an integer >= 1, got {n!r}")
        if self.host_workers is not None:
            check_host_workers(self.host_workers)


def run_shard(
    chunker: LateChunker,
    documents: Iterable[Document | RejectedRow],
    partition: str,
    strategy: ChunkingStrategy,
    *,
    chunk_table: Any,
    rejected_table: Any,
    run_id: str,
    settings: ShardSettings,
    expected_documents: int | None = None,
    log: logging.Logger | Any | None = None,
) -> PartitionReport:
    """:func:`~latechunk_dagster.pipeline.materialize_partition` of one shard, with the shared
    error recording and log lines of both orchestrators.

    Raises:
        SHARD_ERRORS: the shard cannot be read, or its documents failed for one reason; nothing
            was written to the chunk table, and the shard's rejection rows were replaced by one row
            naming the error (``doc_id`` ``"*"``). Any other error (a bad setting, a table of
            another schema, a bug) propagates with nothing recorded.
    """
    log = log or logging.getLogger(__name__)
    try:
        report = materialize_partition(
            chunker,
            documents,
            partition,
            strategy,
            chunk_table=chunk_table,
            rejected_table=rejected_table,
            run_id=run_id,
            batch_tokens=settings.batch_tokens or None,
            force=settings.force,
            max_rejected_share=settings.max_rejected_share,
            systemic_min_documents=settings.systemic_min_documents,
            expected_documents=expected_documents,
            host_workers=settings.host_workers,
            log=log,
        )
    except SHARD_ERRORS as exc:
        reason = record_shard_failure(rejected_table, partition, exc, run_id)
        log.error(f"partition {partition}: {reason}, its old rows are kept: {exc}")
        raise
    if report.rejected:
        log.warning(
            f"partition {partition}: {report.rejected} of {report.documents} documents rejected "
            f"{report.rejected_reasons} (see the rejected-documents table)"
        )
    return report


def shard_summary(
    report: PartitionReport,
    chunker: LateChunker,
    strategy: ChunkingStrategy,
    *,
    table_uri: str,
    table_name: str,
    table_version: int,
    run_id: str,
) -> dict[str, Any]:
    """A shard's :class:`PartitionReport` under :data:`SUMMARY_KEYS` (JSON-able, no vectors).

    ``version``: the table version after the commit, or ``table_version`` when nothing changed.
    """
    write = report.write
    out = {
        "table_uri": table_uri,
        "table": table_name,
        "version": int(write.version if write else table_version),
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
        "strategy": strategy.describe(),
        "engine_path": chunker.path,
        "engine": chunker.settings.engine,  # "vllm", "vllm-server", "transformers"
        "shard_fingerprint": report.fingerprint,
        "doc_ids_sha256": hashlib.sha256(json.dumps(report.chunked_doc_ids).encode()).hexdigest(),
        "rows_inserted": write.inserted if write else 0,
        "rows_updated": write.updated if write else 0,
        "rows_deleted": write.deleted if write else 0,
        "commit_attempts": write.attempts if write else 0,
        "lancedb_commit_attempts": write.lance_attempts if write else 0,
    }
    assert tuple(out) == SUMMARY_KEYS
    return out
