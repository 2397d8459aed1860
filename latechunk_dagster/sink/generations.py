"""Generations of a table definition: a change of what a vector means is built beside the served
vectors, and readers switch to it in one commit (issue 36; contract section 8).

A table definition ``table`` (one strategy's table, or one table per granularity, and its table of
rejected documents) is under generations once its **log** ``f"{table}__generations"`` exists
(:func:`enable_generations`). Each generation is a complete set of the definition's tables, all
written with one **definition key** (:func:`definition_key`: the hash of every granularity's
``vector_config``, so whatever counts in ``vector_config`` opens a generation):

- generation 1 keeps the definition's own names (``table``, ``table_<g>``, ``rejected``): the tables
  written before generations, and a stock store opened on ``table``, are generation 1;
- generation ``N >= 2`` is ``f"{table}__g{N}"`` (its granularity tables ``f"{table}__g{N}_<g>"``) and
  ``f"{rejected}__g{N}"`` (:func:`generation_table`).

The log is an append-only LanceDB table of events (``open``, ``promote``, ``rollback``, ``drop``),
each row one commit. The served (**current**) generation is the top of the stack that ``promote``
pushes and ``rollback`` pops (:func:`read_state`), so promotion and rollback are each one commit of
one row: a reader resolving the definition (:func:`current_table`) sees the old generation or the
new one, never a mix, and a search that resolved the old one before the commit reads it to its end
(its tables stay until :func:`clean` drops them after the retention period).

A writer resolves the generation of its key (:func:`writing_tables`): the generation already opened
for that key, or a new one opened beside the current. With no generation current (a new definition)
the first generation opened is promoted at once: there is nothing served to protect.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.creation import open_or_create
from latechunk_dagster.sink.generation_log import (
    LOG_SCHEMA,
    LOG_SUFFIX,
    Generation,
    GenerationState,
    append_event,
    definition_key,
    generation_table,
    log_table_name,
    read_state,
)
from latechunk_dagster.sink.granularity_tables import granularity_tables
from latechunk_dagster.sink.writes import stored_partitions
from latechunk_dagster.sources.documents import converted_vector_config

#: Generations not current are kept this long after they stopped being served (or were opened,
#: for one never promoted) before :func:`clean` drops them. A week: long enough to roll back after
#: a weekend's traffic on the new vectors, short enough that a demo-sized table pays little.
DEFAULT_RETENTION = timedelta(days=7)

#: The environment variable that sets the retention in days (a float; default
#: :data:`DEFAULT_RETENTION`), read by :func:`retention_period`.
RETENTION_ENV = "LATECHUNK_GENERATION_RETENTION_DAYS"

#: Tags :func:`tag_commit` puts on the versions runs commit start with this.
RUN_TAG_PREFIX = "run-"

_TAG_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def stored_key(db: Any, table: str, run_configs: Mapping[str, str] | None = None) -> str | None:
    """The definition key of the rows stored under ``table`` (one row's ``vector_config`` per
    granularity table), or ``None`` when there are none.

    A converted document's row holds its own ``vector_config`` (the run's with its converter:
    :func:`~latechunk_dagster.sources.documents.converted_vector_config`); when it is the one a run
    of ``run_configs`` (``{granularity: vector_config}``) gives it, the table's configuration is the
    run's, so a table of converted documents keys as the run that wrote it. A row of text read as it
    is holds the run's own, and is read first where there is one (``latechunk generations --enable``
    has no run configuration)."""
    tables = granularity_tables(db, table, ordered=False)
    configs: dict[str, str | None] = {}
    for g, t in tables.items():
        columns = ["vector_config", "converter"] if "converter" in t.schema.names else ["vector_config"]
        plain = t.search().where("converter IS NULL") if len(columns) == 2 else None
        rows = plain.select(columns).limit(1).to_arrow().to_pylist() if plain is not None else []
        rows = rows or t.search().select(columns).limit(1).to_arrow().to_pylist()
        if rows:
            config, converter = rows[0]["vector_config"], rows[0].get("converter")
            run = (run_configs or {}).get(g)
            configs[g] = run if run is not None and config == converted_vector_config(run, converter) else config
    return definition_key(configs) if configs else None


def enable_generations(
    db: Any, table: str, rejected: str, *, run_id: str | None = None, run_configs: Mapping[str, str] | None = None
) -> GenerationState:
    """Put the table definition ``table`` (its rejected table ``rejected``) under generations:
    create its log and, when rows are stored under ``table`` already, record them as generation 1
    (key :func:`stored_key`) and promote it. Idempotent.

    Args:
        db: a LanceDB connection.
        run_configs: the enabling run's ``{granularity: vector_config}``, which stored rows of
            converted documents are recognised by (:func:`stored_key`); ``None``: the rows' own.
    """
    state = read_state(db, table)
    if state is not None:
        return state
    open_or_create(db, log_table_name(table), LOG_SCHEMA)
    key = stored_key(db, table, run_configs)
    if key is not None:
        append_event(
            db,
            table,
            "open",
            1,
            key=key,
            table=table,
            rejected=rejected,
            run_id=run_id,
            note="tables before generations",
        )
        append_event(db, table, "promote", 1, run_id=run_id, note="served before generations")
    return read_state(db, table)  # type: ignore[return-value]


def writing_tables(
    db: Any, table: str, rejected: str, key: str, *, run_id: str | None = None
) -> tuple[str, str, int | None]:
    """Where a run of definition key ``key`` writes: ``(chunk table name, rejected table name,
    generation)``; ``(table, rejected, None)`` when ``table`` is not under generations.

    The generation already opened for ``key`` (current or being built, not dropped); else a new one,
    numbered after every generation ever opened, whose ``open`` is committed here. When no
    generation is current, the generation returned is promoted in the same call (a new definition:
    nothing is served yet).
    """
    for _ in range(5):
        state = read_state(db, table)
        if state is None:
            return table, rejected, None
        gen = state.of_key(key)
        if gen is None:
            n = max(state.generations, default=0) + 1
            append_event(
                db,
                table,
                "open",
                n,
                key=key,
                table=generation_table(table, n),
                rejected=generation_table(rejected, n),
                run_id=run_id,
            )
            state = read_state(db, table)
            gen = state.of_key(key) if state else None
            if gen is None:  # another writer took number n for another key: open the next one
                time.sleep(0.05)
                continue
        if state is not None and state.current is None:
            append_event(db, table, "promote", gen.number, run_id=run_id, note="first generation")
        return gen.table, gen.rejected or generation_table(rejected, gen.number), gen.number
    raise RuntimeError(f"could not open a generation of {table!r} for key {key}: other writers kept taking the number")


def current_table(db: Any, table: str, listed: Collection[str] | None = None) -> str:
    """The name readers open for the table definition ``table``: its current generation's (the base
    of its granularity tables), or ``table`` itself when it is not under generations or none is
    promoted yet. One ``list_tables`` (none with ``listed``, as :func:`read_state`) and, under
    generations, one read of the log."""
    state = read_state(db, table, listed)
    current = state.current if state else None
    return current.table if current else table


def built_table(db: Any, table: str) -> tuple[str, str | None]:
    """``(chunk table name, rejected table name)`` of the newest generation (the one a backfill
    builds; the current one when none is being built); ``(table, None)`` outside generations. The
    Dagster checks and the promote gate read these: what the runs wrote."""
    state = read_state(db, table)
    newest = state.newest if state else None
    return (newest.table, newest.rejected) if newest else (table, None)


def promote(
    db: Any, table: str, generation: int | None = None, *, run_id: str | None = None, note: str = ""
) -> Generation:
    """Make ``generation`` (default: the newest) current: one commit of one log row.

    The caller gates it (the Dagster promote asset on every partition's checks, the Airflow task
    after every shard, ``latechunk promote`` on :func:`missing_partitions`).

    Raises:
        ValueError: ``table`` is not under generations; no such generation, or dropped; already current.
    """
    state = _state(db, table)
    target = state.newest if generation is None else state.generations.get(generation)
    if target is None or target.dropped:
        raise ValueError(f"table definition {table!r} has no generation {generation} to promote: {describe(state)}")
    if state.current is not None and state.current.number == target.number:
        raise ValueError(f"generation {target.number} of {table!r} is current already")
    append_event(db, table, "promote", target.number, run_id=run_id, note=note)
    return target


def rollback(db: Any, table: str, *, run_id: str | None = None, note: str = "") -> Generation:
    """Serve the generation current before the last promotion again: one commit of one log row, no
    encoding. Returns the generation now current.

    Raises:
        ValueError: not under generations, or no earlier generation to return to.
    """
    state = _state(db, table)
    if len(state.stack) < 2:
        raise ValueError(f"table definition {table!r} has no earlier generation to roll back to: {describe(state)}")
    append_event(db, table, "rollback", state.stack[-1], run_id=run_id, note=note)
    return state.generations[state.stack[-2]]


def retention_period(days: float | str | None = None) -> timedelta:
    """The retention of generations that are not current: ``days`` when given, else
    ``$LATECHUNK_GENERATION_RETENTION_DAYS``, else :data:`DEFAULT_RETENTION`.

    Raises:
        ValueError: not a finite number of days >= 0 (names where the value came from).
    """
    source = "retention" if days is not None else RETENTION_ENV
    raw = days if days is not None else os.environ.get(RETENTION_ENV)
    if raw is None or raw == "":
        return DEFAULT_RETENTION
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{source} must be a number of days >= 0, got {raw!r}")
    return timedelta(days=value)


def clean(db: Any, table: str, *, retention: timedelta | None = None, now: datetime | None = None) -> list[int]:
    """Drop the tables of generations that are neither current nor the newest (the one a backfill
    builds) and have not been served (or, never promoted, were opened) within ``retention``; a
    generation any of whose tables carries a user's tag (any tag but the runs' own ``run-...``
    lineage tags, :func:`tag_commit`) is kept. Returns the numbers dropped; each gets a ``drop`` row.

    Args:
        retention: default :func:`retention_period` (``$LATECHUNK_GENERATION_RETENTION_DAYS`` or 7 days).

    Raises:
        ValueError: ``table`` is not under generations.
    """
    retention = retention_period() if retention is None else retention
    state, now = _state(db, table), now or datetime.now(UTC)
    # the current generation, and the newest one (the one a backfill builds: it is never dropped
    # under a long backfill, however long ago it was opened)
    current, dropped = {*state.stack[-1:], *([state.newest.number] if state.newest else [])}, []
    listed = set(table_names(db))
    for g in state.generations.values():
        since = g.served_until or g.opened_at
        if g.dropped or g.number in current or now - since < retention:
            continue
        names = generation_tables(db, g)
        if any(_protected(db.open_table(name)) for name in names if name in listed):
            continue
        for name in names:
            db.drop_table(name, ignore_missing=True)
        append_event(db, table, "drop", g.number, note=f"older than {retention}")
        dropped.append(g.number)
    return dropped


def _protected(table: Any) -> bool:
    """Whether ``table`` carries a tag other than the runs' lineage tags (:data:`RUN_TAG_PREFIX`)."""
    return any(not tag.startswith(RUN_TAG_PREFIX) for tag in table.tags.list())


def generation_tables(db: Any, gen: Generation) -> list[str]:
    """The table names of ``gen`` that exist: its chunk table(s) and its rejected table."""
    names = [t.name for t in granularity_tables(db, gen.table, ordered=False).values()]
    listed = set(table_names(db))
    return names + ([gen.rejected] if gen.rejected and gen.rejected in listed else [])


def every_generation(db: Any, names: Sequence[str]) -> list[str]:
    """``names`` and, for each table definition under generations that one of ``names`` belongs to
    (a table of one of its live generations: chunk, granularity or rejected table), the tables of
    its other live generations: what a partition sync reads and deletes from, so a shard that leaves
    the store leaves every generation (the one served, the one a backfill builds, the ones kept for
    rollback), not only the names configured. One listing, and one log read per definition under
    generations; ``names`` unchanged (same order, first) when there is none.
    """
    listed = table_names(db)
    out, wanted = list(names), set(names)
    for log in (n for n in listed if n.endswith(LOG_SUFFIX)):
        state = read_state(db, log[: -len(LOG_SUFFIX)], listed)
        live = [g for g in (state.generations.values() if state else ()) if not g.dropped]
        tables = {g.number: generation_tables(db, g) for g in live}
        if wanted & {t for ts in tables.values() for t in ts}:
            out += [t for ts in tables.values() for t in ts if t not in out]
    return out


def missing_partitions(db: Any, table: str, generation: Generation) -> list[str]:
    """Partitions the current generation holds (rows or rejections) that ``generation`` holds
    nowhere: what a backfill has yet to write before ``latechunk promote`` may switch."""
    state = _state(db, table)
    current = state.current
    if current is None or current.number == generation.number:
        return []

    def held(g: Generation) -> set[str]:
        names = [t.name for t in granularity_tables(db, g.table, ordered=False).values()]
        return stored_partitions(db, names + ([g.rejected] if g.rejected else []))

    return sorted(held(current) - held(generation))


def tag_name(run_id: str, partition: str) -> str:
    """The tag of the table version a run committed for ``partition``: ``run-<run_id>-<12 hex of the
    partition's sha256>`` (tags take letters, digits, ``.``, ``-``, ``_``; partitions take any text)."""
    digest = hashlib.sha256(partition.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{RUN_TAG_PREFIX}{_TAG_CHARS.sub('_', run_id)}-{digest}"


def tag_commit(table: Any, version: int, run_id: str, partition: str) -> str:
    """Tag ``version`` of ``table`` with :func:`tag_name` (``table.checkout(tag)`` reads what the run
    wrote); a tag already on that version is kept. Returns the tag."""
    tag = tag_name(run_id, partition)
    have = table.tags.list()
    if tag in have:
        if have[tag]["version"] != version:
            table.tags.update(tag, version)
        return tag
    table.tags.create(tag, version)
    return tag


def describe(state: GenerationState) -> str:
    """One line: every generation, its key and table, which is current, which dropped."""
    current = state.current.number if state.current else None
    parts = [
        f"{g.number}{' (current)' if g.number == current else ''}{' (dropped)' if g.dropped else ''}: {g.table}"
        for g in state.generations.values()
    ]
    return "generations " + ("; ".join(parts) if parts else "none")


def _state(db: Any, table: str) -> GenerationState:
    state = read_state(db, table)
    if state is None:
        raise ValueError(
            f"table definition {table!r} is not under generations (no table {log_table_name(table)!r}): "
            "enable them first (latechunk generations --enable, or the orchestrator's generations=True)"
        )
    return state
