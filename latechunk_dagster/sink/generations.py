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
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.creation import open_or_create
from latechunk_dagster.sink.generation_gates import build_missing_indexes
from latechunk_dagster.sink.generation_gates import missing_partitions as _missing_in
from latechunk_dagster.sink.generation_log import (
    LOG_SCHEMA,
    LOG_SUFFIX,
    Generation,
    GenerationState,
    Plan,
    commit_planned,
    definition_key,
    generation_table,
    log_table_name,
    read_state,
)
from latechunk_dagster.sink.granularity_tables import granularity_tables
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
        fields = {
            "key": key,
            "table": table,
            "rejected": rejected,
            "run_id": run_id,
            "note": "tables before generations",
        }
        # each a compare-and-swap: two enabling runs at once adopt the stored rows once
        commit_planned(db, table, lambda s: None if s.generations else ("open", 1, fields), what="adopt generation 1")
        served = {"run_id": run_id, "note": "served before generations"}
        commit_planned(db, table, lambda s: None if s.stack else ("promote", 1, served), what="serve generation 1")
    return read_state(db, table)  # type: ignore[return-value]


def adopted_match(
    db: Any, state: GenerationState, key: str, run_configs: Mapping[str, str] | None
) -> Generation | None:
    """Generation 1 when it was adopted under another key (:func:`enable_generations` keys stored
    rows of converted documents by their own ``vector_config`` when the enabling run's is another)
    but its rows' ``vector_config`` is what a run of ``run_configs`` writes (:func:`stored_key`
    gives ``key``): a run after a rollback to it, with its strategy back, writes it (issue 51)."""
    first = state.generations.get(1)
    if first is None or first.dropped or first.key == key or run_configs is None:
        return None
    return first if stored_key(db, first.table, run_configs) == key else None


def writing_tables(
    db: Any,
    table: str,
    rejected: str,
    key: str,
    *,
    run_id: str | None = None,
    run_configs: Mapping[str, str] | None = None,
) -> tuple[str, str, int | None]:
    """Where a run of definition key ``key`` writes: ``(chunk table name, rejected table name,
    generation)``; ``(table, rejected, None)`` when ``table`` is not under generations.

    The generation already opened for ``key`` (current or being built, not dropped), or generation 1
    adopted under another key whose rows are the run's (:func:`adopted_match`, with ``run_configs``:
    the run's ``{granularity: vector_config}``), the served one first where both match (a third
    generation opened for the key before adopted ones were matched is left); else a new one,
    numbered after every generation ever opened, whose ``open`` is one compare-and-swap of the log
    (:func:`~latechunk_dagster.sink.generation_log.commit_planned`): a writer of another key that
    opened that number first makes this one decide again, so two keys never share a number. When no
    generation is current, the generation returned is promoted in the same call (a new definition:
    nothing is served yet).
    """
    if read_state(db, table) is None:
        return table, rejected, None
    found: list[Generation] = []

    def plan_open(state: GenerationState) -> Plan:
        adopted = adopted_match(db, state, key, run_configs)
        served = state.current if state.current is not None and state.current in (adopted, state.of_key(key)) else None
        found[:] = [g for g in [served or state.of_key(key) or adopted] if g is not None]
        if found:
            return None
        n = max(state.generations, default=0) + 1
        names = {"table": generation_table(table, n), "rejected": generation_table(rejected, n)}
        return "open", n, {"key": key, **names, "run_id": run_id}

    _, opened = commit_planned(db, table, plan_open, what=f"open a generation for key {key}")
    gen = found[0] if not opened else read_state(db, table).generations[opened[1]]  # type: ignore[union-attr]

    def plan_first(state: GenerationState) -> Plan:
        return (
            None
            if state.current is not None
            else ("promote", gen.number, {"run_id": run_id, "note": "first generation"})
        )

    commit_planned(db, table, plan_first, what=f"serve generation {gen.number}")
    return gen.table, gen.rejected or generation_table(rejected, gen.number), gen.number


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
    db: Any,
    table: str,
    generation: int | None = None,
    *,
    force: bool = False,
    run_id: str | None = None,
    note: str = "",
    log_line: Callable[[str], Any] | None = None,
) -> Generation:
    """Make ``generation`` (default: the newest) current: one compare-and-swap of one log row, after
    its chunk tables were indexed where they lacked an index
    (:func:`~latechunk_dagster.sink.generation_gates.build_missing_indexes`: hybrid search answers
    the moment it is served). The one gate of every front (the Dagster promote asset, after its own
    gate on Dagster's records; Airflow's promote task; ``latechunk promote``).

    Args:
        force: promote although the generation lacks partitions the current one holds.
        log_line: called with a line per table indexed here (e.g. ``context.log.info``).

    Raises:
        ValueError: ``table`` is not under generations; no such generation, or dropped; already
            current; without ``force``, it lacks partitions the current generation holds (names
            them: :func:`missing_partitions`). Decided again on the log as it is when the commit
            lands, so a promotion that raced another one is judged against the one that won.
    """
    state = _state(db, table)
    first = state.newest if generation is None else state.generations.get(generation)
    if first is None or first.dropped:
        raise ValueError(f"table definition {table!r} has no generation {generation} to promote: {describe(state)}")

    def plan(state: GenerationState) -> Plan:
        target = state.generations[first.number]
        if target.dropped:
            raise ValueError(f"generation {target.number} of {table!r} was dropped: {describe(state)}")
        if state.current is not None and state.current.number == target.number:
            raise ValueError(f"generation {target.number} of {table!r} is current already")
        missing = [] if force else _missing_in(db, state, target)
        if missing:
            raise ValueError(
                f"generation {target.number} of {table!r} lacks {len(missing)} partitions the current generation has "
                f"({', '.join(missing[:5])}): materialize them first, or promote with force=True (--force)"
            )
        return "promote", target.number, {"run_id": run_id, "note": note}

    plan(state)  # refused before any index is built for it
    build_missing_indexes(db, first, log_line)
    commit_planned(db, table, plan, what=f"promote generation {first.number}")
    return first


def rollback(
    db: Any, table: str, *, run_id: str | None = None, note: str = "", log_line: Callable[[str], Any] | None = None
) -> Generation:
    """Serve the generation current before the last promotion again: one compare-and-swap of one
    log row, no encoding (its chunk tables indexed first where they lack an index, as :func:`promote`).
    Returns the generation current right after this commit.

    Raises:
        ValueError: not under generations, or no earlier generation to return to; "another promotion
            landed" when a promotion or rollback of another writer committed between this one's read of
            the log and its commit (nothing is rolled back; names what is current now).
    """
    seen = _state(db, table)
    if len(seen.stack) < 2:
        raise ValueError(f"table definition {table!r} has no earlier generation to roll back to: {describe(seen)}")
    build_missing_indexes(db, seen.generations[seen.stack[-2]], log_line)

    def plan(state: GenerationState) -> Plan:
        if state.stack != seen.stack:
            now = state.current.number if state.current else None
            raise ValueError(
                f"another promotion landed on {table!r} while rolling back from generation {seen.stack[-1]}: "
                f"generation {now} is current now; nothing was rolled back"
            )
        return "rollback", state.stack[-1], {"run_id": run_id, "note": note}

    after, _ = commit_planned(db, table, plan, what="rollback")
    return after.generations[after.stack[-2]]


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
    """Drop the tables of generations that are not :func:`kept` (the current one, the one it demoted,
    the newest) and have not been served (or, never promoted, were opened) within ``retention``; a
    generation any of whose tables carries a user's tag (any tag but the runs' own ``run-...``
    lineage tags, :func:`tag_commit`) is kept. Returns the numbers dropped. Each ``drop`` row is
    committed first, as a compare-and-swap decided on the log as it is then (a rollback or promotion
    that landed meanwhile is seen), and the tables are dropped after it.

    Args:
        retention: default :func:`retention_period` (``$LATECHUNK_GENERATION_RETENTION_DAYS`` or 7 days).

    Raises:
        ValueError: ``table`` is not under generations.
    """
    retention = retention_period() if retention is None else retention
    now, dropped = now or datetime.now(UTC), []
    listed = set(table_names(db))
    for number in list(_state(db, table).generations):

        def plan(state: GenerationState, n: int = number) -> Plan:
            g = state.generations[n]
            if g.dropped or n in kept(state) or now - (g.served_until or g.opened_at) < retention:
                return None
            if any(_protected(db.open_table(name)) for name in generation_tables(db, g) if name in listed):
                return None
            return "drop", n, {"note": f"older than {retention}"}

        state, decided = commit_planned(db, table, plan, what=f"drop generation {number}")
        if decided is not None:  # the drop is committed first: no reader resolves it after this
            for name in generation_tables(db, state.generations[number]):
                db.drop_table(name, ignore_missing=True)
            dropped.append(number)
    return dropped


def kept(state: GenerationState) -> set[int]:
    """Generations :func:`clean` keeps whatever the retention: the current one, the one it demoted
    (the top but one of the stack: a rollback always has somewhere to go, and a search that resolved
    it just before the promotion reads it to its end, issue 47 kind 14), and the newest (the one a
    backfill builds, however long ago it was opened)."""
    return {*state.stack[-2:], *([state.newest.number] if state.newest else [])}


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
    nowhere: what a backfill has yet to write before :func:`promote` may switch without ``force``
    (:func:`~latechunk_dagster.sink.generation_gates.missing_partitions` on the log as it is now)."""
    return _missing_in(db, _state(db, table), generation)


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
