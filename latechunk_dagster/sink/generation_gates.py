"""What a generation must hold before it is served, and what a read of a dropped one says (issues 47
and 51; :mod:`latechunk_dagster.sink.generations` calls these from ``promote`` and ``rollback``, so
the Dagster promote asset, Airflow's promote task and ``latechunk promote`` share one gate).

* **Partitions** (:func:`missing_partitions`, issue 47 kind 7): a generation that lacks partitions
  the current one holds would lose their documents from search; ``promote`` refuses it unless
  ``force=True``.
* **Indexes** (:func:`build_missing_indexes`, issue 51 item 1): hybrid search needs the full-text
  index, and the filters and large tables the scalar and vector indexes; a generation is indexed
  (:func:`~latechunk_dagster.sink.indexing.refresh_indexes`, where a chunk table lacks one) before
  the commit that serves it, so search answers right after any promotion or rollback.
* **Dropped generations** (:func:`reading_generation`, issue 47 kind 14): a search that resolved a
  generation before :func:`~latechunk_dagster.sink.generations.clean` dropped it gets an error that
  names the generation and what is current, not lance's raw "Not found".
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from latechunk_dagster.sink.generation_log import Generation, GenerationState, read_state
from latechunk_dagster.sink.granularity_tables import granularity_tables
from latechunk_dagster.sink.writes import stored_partitions

#: The columns of a chunk table :func:`~latechunk_dagster.sink.indexing.refresh_indexes` always
#: indexes (full-text, BTREE, BITMAP); the vector index is wanted from ``ANN_MIN_ROWS`` rows.
INDEXED_COLUMNS = ("text", "doc_id", "partition")

#: A generation's own table name (``generation_table``): its definition, then ``__g<N>`` (and a granularity).
_GENERATION_NAME = re.compile(r"^(.+?)__g\d+(?:_.*)?$")

#: Lance's errors for files or a table that are gone (a table dropped under an open handle).
_GONE = re.compile(r"not found|no such file|was not found|does not exist", re.IGNORECASE)


def held_partitions(db: Any, gen: Generation) -> set[str]:
    """Partitions ``gen`` holds rows or rejections of (one column read a table)."""
    names = [t.name for t in granularity_tables(db, gen.table, ordered=False).values()]
    return stored_partitions(db, names + ([gen.rejected] if gen.rejected else []))


def missing_partitions(db: Any, state: GenerationState, generation: Generation) -> list[str]:
    """Partitions the current generation of ``state`` holds (rows or rejections) that ``generation``
    holds nowhere, sorted: what a backfill has yet to write before ``generation`` may be served.
    Empty when nothing is current or ``generation`` is."""
    current = state.current
    if current is None or current.number == generation.number:
        return []
    return sorted(held_partitions(db, current) - held_partitions(db, generation))


def missing_indexes(table: Any) -> list[str]:
    """The indexes a non-empty chunk table (one with a ``text`` column) lacks of those
    :func:`~latechunk_dagster.sink.indexing.refresh_indexes` builds: ``text``, ``doc_id``,
    ``partition``, and ``vector`` from ``ANN_MIN_ROWS`` rows. Empty for any other table (a
    rejected-documents table, an empty one)."""
    from latechunk_dagster.sink.indexing import ANN_MIN_ROWS

    names = set(table.schema.names)
    if "text" not in names or table.count_rows() == 0:
        return []
    have = {list(i.columns)[0] for i in table.list_indices() if len(list(i.columns)) == 1}
    wanted = [c for c in INDEXED_COLUMNS if c in names]
    if "vector" in names and table.count_rows() >= ANN_MIN_ROWS:
        wanted.append("vector")
    return [c for c in wanted if c not in have]


def build_missing_indexes(db: Any, gen: Generation, log: Any = None) -> dict[str, dict[str, Any]]:
    """Index every chunk table of ``gen`` that lacks an index (:func:`missing_indexes`) with
    :func:`~latechunk_dagster.sink.indexing.refresh_indexes`; tables with every index are left alone.

    Args:
        log: called with one line per table indexed (e.g. ``context.log.info``); default none.

    Returns:
        ``{physical table name: refresh report}`` of the tables indexed (empty: none needed it).
    """
    from latechunk_dagster.sink.indexing import refresh_indexes

    reports = {}
    for table in granularity_tables(db, gen.table, ordered=False).values():
        lacking = missing_indexes(table)
        if not lacking:
            continue
        reports[table.name] = refresh_indexes(table)
        if log is not None:
            log(f"indexed {table.name!r} (generation {gen.number}) before serving it: it lacked {', '.join(lacking)}")
    return reports


def dropped_message(db: Any, definition: str, name: str) -> str | None:
    """What to say when a read of table ``name`` of ``definition`` found it gone: ``None`` unless
    ``name`` is a table of a generation the log marks dropped; else names the generation, its table
    and the current one. A reader given a generation's own table name (``latechunk search`` resolves
    the generation before it calls :func:`~latechunk_dagster.sink.search.search`) is traced back to
    its definition by the name (``f"{definition}__g{N}"``)."""
    state = read_state(db, definition)
    if state is None and (found := _GENERATION_NAME.match(name)) is not None:
        definition = found.group(1)
        state = read_state(db, definition)
    if state is None:
        return None
    for g in state.generations.values():
        granularity = name.startswith(f"{g.table}_") and not name.startswith(f"{g.table}__g")
        if g.dropped and (name == g.table or granularity):
            current = state.current
            now = f"generation {current.number} ({current.table!r}) is current" if current else "none is current"
            return (
                f"generation {g.number} of {definition!r} (table {name!r}) was dropped past the retention while it "
                f"was read: {now}; search again"
            )
    return None


@contextlib.contextmanager
def reading_generation(db: Any, definition: str, name: str) -> Iterator[None]:
    """Reads of table ``name``, resolved as ``definition``'s current generation: when lance finds
    its files gone because :func:`~latechunk_dagster.sink.generations.clean` dropped that generation
    meanwhile, raise ``ValueError`` naming it (:func:`dropped_message`) instead of lance's error.

    Raises:
        ValueError: the generation read was dropped (from the original error); any other error as it was.
    """
    try:
        yield
    except (OSError, RuntimeError, ValueError) as exc:
        message = dropped_message(db, definition, name) if _GONE.search(str(exc)) else None
        if message is None:
            raise
        raise ValueError(message) from exc
