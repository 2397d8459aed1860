"""The tables a run writes: its table definition's generation for the run's vector configuration.

Both orchestrators call :func:`open_run_tables` once the engine is loaded (the definition key needs
the model's lineage); outside generations it opens the configured names, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.pipeline.config import granularity_configs
from latechunk_dagster.pipeline.shard import Strategies, open_chunk_tables
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.generations import definition_key, enable_generations, read_state, writing_tables


@dataclass(frozen=True)
class RunTables:
    """The open tables of a run and their names.

    Attributes:
        chunk_table: the open chunk table, or ``{granularity: open table}`` (as ``run_shard`` takes it).
        rejected_table: the open rejected-documents table.
        table_name, rejected_name: the names written (a generation's, e.g. ``chunks__g2``).
        generation: the generation written, ``None`` outside generations.
        key: the run's definition key (:func:`~latechunk_dagster.sink.generations.definition_key`).
        served: the generation readers are served when the tables were opened (``None`` outside
            generations or none served).
    """

    chunk_table: Any
    rejected_table: Any
    table_name: str
    rejected_name: str
    generation: int | None
    key: str
    served: int | None = None

    def describe(self) -> str:
        """One line for a run's log: which generation it writes and whether readers are served it."""
        line = f"writing generation {self.generation} ({self.table_name!r})"
        if self.served == self.generation:
            return f"{line}, the one readers are served"
        return (
            f"{line}, which readers are NOT served (generation {self.served} is): searches see its rows once it "
            "is promoted; after a rollback, run the served generation's configuration to write into it"
        )


def lance_settings(db: Any) -> LanceDBSettings:
    """The :class:`~latechunk_dagster.sink.database.LanceDBSettings` of a ``LanceDBSettings``, Dagster's
    ``LanceDBResource`` (``settings()``) or Airflow's ``LanceDBHook`` (``get_settings()``)."""
    for attr in ("settings", "get_settings"):
        if callable(getattr(db, attr, None)):
            return getattr(db, attr)()
    return db


def lance_connection(db: Any) -> Any:
    """A ``lancedb`` connection from a ``LanceDBSettings``, Dagster's ``LanceDBResource`` (``settings()``)
    or Airflow's ``LanceDBHook`` (``get_settings()``)."""
    return lance_settings(db).connect()


def open_run_tables(
    db: Any,
    table_name: str,
    rejected_name: str,
    strategy: Strategies | Granularities,
    chunker: LateChunker,
    *,
    run_id: str,
    generations: bool = False,
    warn: Any = None,
) -> RunTables:
    """Open (or create) the chunk and rejected tables a run of ``chunker`` and ``strategy`` writes.

    With ``generations=True`` the definition is put under generations first
    (:func:`~latechunk_dagster.sink.generations.enable_generations`, idempotent). Under generations
    the tables are those of the generation of the run's definition key
    (:func:`~latechunk_dagster.sink.generations.writing_tables`: opened beside the current one when
    the key is new; generation 1 adopted under another key when its rows' ``vector_config`` is the
    run's); otherwise ``table_name`` and ``rejected_name`` themselves.

    Args:
        db: a ``LanceDBSettings``, ``LanceDBResource`` or ``LanceDBHook`` (``chunk_table``, ``rejected_table``).
        strategy: the run's granularities as its edge normalised them
            (:class:`~latechunk_dagster.core.granularities.Granularities`), or a bare strategy.
        warn: where a removed granularity's dropped table is named (:func:`~latechunk_dagster.pipeline.
            shard.open_chunk_tables`).

    Raises:
        ValueError: as ``db.chunk_table`` (a table of another schema).
    """
    conn = lance_connection(db)
    configs = granularity_configs(chunker.settings, strategy)
    if generations:
        enable_generations(conn, table_name, rejected_name, run_id=run_id, run_configs=configs)
    key = definition_key(configs)
    name, rejected, generation = writing_tables(
        conn, table_name, rejected_name, key, run_id=run_id, run_configs=configs
    )
    state = read_state(conn, table_name) if generation is not None else None
    return RunTables(
        chunk_table=open_chunk_tables(db, name, strategy, chunker.embedding_dim, warn),
        rejected_table=db.rejected_table(rejected),
        table_name=name,
        rejected_name=rejected,
        generation=generation,
        key=key,
        served=state.current.number if state is not None and state.current is not None else None,
    )
