"""One shard run for both orchestrators: the strategy rule, the settings, the run with its error
recording, and one summary whose names both publish.

Dagster's chunk asset (:mod:`latechunk_dagster.integration.assets`) and Airflow's
``LateChunkShardOperator`` (:mod:`latechunk_dagster.airflow.tasks`) call these, and nothing of
their own between the store and :func:`~latechunk_dagster.pipeline.materialize_partition`:

* :func:`strategy_from_run_config`: a strategy from a name and parameters over the default one
  (one default per strategy: the default strategy's own parameters, none for another strategy),
  or several named ones (granularities, ``strategies={"small": {"name": ..., **params}, ...}``,
  finest first: issue 29);
* :class:`ShardSettings`: every partition setting, checked once, reachable from both (Dagster's
  run config, the Airflow operator's ``settings``; the engine's values are in
  :mod:`latechunk_dagster.pipeline.engine_settings`);
* :func:`run_shard`: the partition materialized (into the granularity tables it opens or
  creates, :func:`open_chunk_tables`, with several strategies); a shard that cannot be read or fails
  systemically (:data:`~latechunk_dagster.pipeline.partition.SHARD_ERRORS`) is recorded in the
  rejected table with one ``*`` row and the same log line, then raised;
* :func:`shard_summary`: the counts under one set of names (:data:`SUMMARY_KEYS`): Dagster's
  partition metadata and Airflow's XCom value; per granularity table under
  :data:`GRANULARITY_KEYS` (the ``granularities`` entry).
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
from latechunk_dagster.core.chunking import ChunkingStrategy, GivenChunks, strategy_from_config
from latechunk_dagster.core.granularities import check_granularities
from latechunk_dagster.pipeline.accounting import GranularityReport, PartitionReport
from latechunk_dagster.pipeline.config import check_host_workers
from latechunk_dagster.pipeline.partition import SHARD_ERRORS, materialize_partition, record_shard_failure
from latechunk_dagster.sink.generations import tag_commit, tag_name
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sources.chunk_column import check_chunks_column
from latechunk_dagster.sources.documents import Document, RejectedRow

#: One strategy, or several granularities ``{name: strategy}`` finest first.
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

CHAR_SPANS_REFUSAL = "char_spans needs per-document spans; call LateChunker.chunk directly"


def strategy_from_run_config(
    name: str | None,
    params: Mapping[str, Any] | None,
    default: ChunkingStrategy,
    *,
    strategies: Mapping[str, Mapping[str, Any] | ChunkingStrategy] | None = None,
) -> Strategies:
    """The strategy of a run: ``name`` with ``params`` (``None``: ``default``'s name); or, with
    ``strategies``, several named ones.

    One rule for both orchestrators: ``default``'s own parameters are the defaults of its name, and
    a strategy of another name has no default parameter (``fixed_tokens`` needs its ``chunk_size``).
    A value that is the text of an integer (``"64"``, what an Airflow template renders) is that integer.

    Args:
        strategies: the granularities of the table definition, finest first (each chunk's parent is
            in the next one): ``{granularity: {"name": strategy name, **its params}}`` (a missing or
            empty ``"name"``: ``default``'s), or ``{granularity: strategy}``; names are letters,
            digits and ``_`` (they name tables: :func:`~latechunk_dagster.sink.schema.granularity_table`).
            ``given_chunks`` takes each document's own chunks (a store's chunks column). ``name``
            and ``params`` must then be unset.

    Returns:
        One strategy, or ``{granularity: strategy}`` in the order given when ``strategies`` is set.

    Raises:
        ValueError: an unknown name or parameter, a missing one, ``char_spans`` (spans per
            document do not come from run config; ``given_chunks`` reads them from the store), a
            bad or empty granularity mapping, or ``strategies`` beside ``name`` / ``params``.
    """
    if strategies is not None:
        if name or params:
            raise ValueError("give either one strategy (name and params) or several named strategies, not both")
        return _named_strategies(strategies, default)
    chosen = name or default.name
    if chosen == "char_spans":
        raise ValueError(CHAR_SPANS_REFUSAL)
    merged = dict(default.params()) if chosen == default.name else {}
    merged.update({k: _int_text(v) for k, v in (params or {}).items() if v is not None})
    return strategy_from_config(chosen, merged)


def _named_strategies(
    strategies: Mapping[str, Mapping[str, Any] | ChunkingStrategy], default: ChunkingStrategy
) -> dict[str, ChunkingStrategy]:
    """``{granularity: strategy}`` of run config's several named strategies (:func:`strategy_from_run_config`)."""
    if not isinstance(strategies, Mapping) or not strategies:
        raise ValueError(
            f"strategies must be a non-empty mapping of granularity names to strategies, got {strategies!r}"
        )
    out: dict[str, ChunkingStrategy] = {}
    for g, spec in strategies.items():
        if isinstance(spec, ChunkingStrategy):
            if spec.name == "char_spans":
                raise ValueError(f"granularity {g!r}: {CHAR_SPANS_REFUSAL}")
            out[g] = spec
            continue
        if not isinstance(spec, Mapping):
            raise ValueError(f"granularity {g!r}: expected {{'name': strategy, **params}}, got {spec!r}")
        params = {k: v for k, v in spec.items() if k != "name"}
        try:
            out[g] = strategy_from_run_config(spec.get("name") or None, params, default)  # type: ignore[assignment]
        except ValueError as exc:
            raise ValueError(f"granularity {g!r}: {exc}") from None
    return check_granularities(out)


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
        chunks_column: the store column holding each document's own chunks
            (``DocumentStore(chunks_column=...)``, ``iter_table_documents(chunks_column=...)``), read by
            a ``given_chunks`` strategy; ``None``: none (a ``given_chunks`` strategy is then refused
            by :func:`run_shard`).

    Raises:
        ValueError: a value out of range, naming the setting.
    """

    batch_tokens: int | None = None
    force: bool = False
    max_rejected_share: float = 0.5
    systemic_min_documents: int = 10
    host_workers: int | None = None
    chunks_column: str | None = None

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
        check_chunks_column(self.chunks_column)

    def check_strategies(self, strategy: Strategies) -> dict[str, ChunkingStrategy]:
        """The run's granularities (:func:`~latechunk_dagster.core.granularities.check_granularities`),
        checked against :attr:`chunks_column`.

        Raises:
            ValueError: a ``given_chunks`` strategy without a ``chunks_column`` (naming the granularity),
                or a bad granularity mapping.
        """
        granularities = check_granularities(strategy)
        given = [g for g, s in granularities.items() if isinstance(s, GivenChunks)]
        if given and self.chunks_column is None:
            which = "the strategy" if given == [""] else f"granularity {given[0]!r}"
            raise ValueError(
                f"{which} is given_chunks, which needs each document's own chunks: set chunks_column "
                "(the store column that holds them)"
            )
        return granularities


def open_chunk_tables(db: Any, table_name: str, strategy: Strategies, dim: int, warn: Any = None) -> Any:
    """The chunk table(s) of a run, opened or created: ``db.chunk_table(table_name, dim)`` for one
    strategy; ``{granularity: db.chunk_table(granularity_table(table_name, granularity), dim)}``
    (finest first) for several. First the definition's tables that no granularity writes any more
    (a granularity removed from it) are dropped, one line each on ``warn`` (contract section 7),
    where ``db`` can (``drop_leftover_tables``).

    Args:
        db: anything with ``chunk_table(name, dim)``: a
            :class:`~latechunk_dagster.sink.database.LanceDBSettings`, Dagster's ``LanceDBResource``.

    Raises:
        ValueError: as ``db.chunk_table`` (a table of another schema), a bad granularity mapping.
    """
    granularities = [] if isinstance(strategy, ChunkingStrategy) else list(check_granularities(strategy))
    drop = getattr(db, "drop_leftover_tables", None)
    if drop is not None:
        drop(table_name, granularities, warn)
    if isinstance(strategy, ChunkingStrategy):
        return db.chunk_table(table_name, dim)
    return {g: db.chunk_table(granularity_table(table_name, g), dim) for g in granularities}


def run_shard(
    chunker: LateChunker,
    documents: Iterable[Document | RejectedRow],
    partition: str,
    strategy: Strategies,
    *,
    chunk_table: Any = None,
    rejected_table: Any,
    run_id: str,
    settings: ShardSettings,
    expected_documents: int | None = None,
    log: logging.Logger | Any | None = None,
    db: Any = None,
    table_name: str | None = None,
) -> PartitionReport:
    """:func:`~latechunk_dagster.pipeline.materialize_partition` of one shard, with the shared
    error recording and log lines of both orchestrators.

    Args:
        strategy: one strategy, or several granularities ``{name: strategy}`` finest first
            (:func:`strategy_from_run_config` with ``strategies=``), encoded once per document.
        chunk_table: the open chunk table (one strategy) or ``{granularity: open table}``; or
            ``None`` with ``db`` and ``table_name``: the table(s) are opened or created here
            (:func:`open_chunk_tables`: ``table_name`` itself for one strategy, ``table_name_<granularity>``
            for each of several).
        db: anything with ``chunk_table(name, dim)`` (``LanceDBSettings``, Dagster's ``LanceDBResource``).
        settings: :class:`ShardSettings` (its ``chunks_column`` is what ``given_chunks`` needs).

    Raises:
        ValueError: ``given_chunks`` without ``settings.chunks_column``; neither ``chunk_table`` nor
            ``db`` and ``table_name``; as :func:`~latechunk_dagster.pipeline.materialize_partition`.
        SHARD_ERRORS: the shard cannot be read, or its documents failed for one reason; nothing
            was written to the chunk table, and the shard's rejection rows were replaced by one row
            naming the error (``doc_id`` ``"*"``). Any other error (a bad setting, a table of
            another schema, a bug) propagates with nothing recorded.
    """
    log = log or logging.getLogger(__name__)
    granularities = settings.check_strategies(strategy)
    if settings.chunks_column is not None and not any(isinstance(s, GivenChunks) for s in granularities.values()):
        log.warning(
            f"partition {partition}: chunks_column {settings.chunks_column!r} is read, but no strategy is "
            "given_chunks: the documents' own chunks are not used (they only count in each document's sha256)"
        )
    if chunk_table is None:
        if db is None or not table_name:
            raise ValueError("run_shard needs chunk_table, or db and table_name to open the chunk tables")
        chunk_table = open_chunk_tables(db, table_name, strategy, chunker.embedding_dim, log.warning)
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
    tag_commits(report, chunk_table, run_id)
    if report.rejected:
        log.warning(
            f"partition {partition}: {report.rejected} of {report.documents} documents rejected "
            f"{report.rejected_reasons} (see the rejected-documents table)"
        )
    return report


def describe_strategies(strategy: Strategies) -> str:
    """``strategy.describe()``, or ``"small=FixedTokens(...); large=..."`` for several granularities."""
    if isinstance(strategy, ChunkingStrategy):
        return strategy.describe()
    return "; ".join(f"{g}={s.describe()}" for g, s in check_granularities(strategy).items())


def shard_summary(
    report: PartitionReport,
    chunker: LateChunker,
    strategy: Strategies,
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
    single = isinstance(strategy, ChunkingStrategy)
    write = report.write
    parts = report.granularities or {
        "": GranularityReport(table_name, report.chunks_written, report.partition_rows, write, table_version)
    }
    per: dict[str, dict[str, Any]] = {}
    for g, s in check_granularities(strategy).items():
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
        "strategy": describe_strategies(strategy),
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


def tag_commits(report: PartitionReport, chunk_table: Any, run_id: str) -> None:
    """Tag the table version each granularity table's commit made with the run
    (:func:`~latechunk_dagster.sink.generations.tag_commit`); tables the run did not change get none."""
    tables = chunk_table if isinstance(chunk_table, Mapping) else {"": chunk_table}
    for g, part in report.granularities.items():
        if part.write is not None and g in tables:
            tag_commit(tables[g], part.write.version, run_id, report.partition)
