"""The generations log of a table definition (issue 36; :mod:`latechunk_dagster.sink.generations`
uses it): its table name and schema, its events, and the state they add up to.

The log is an append-only LanceDB table ``f"{table}__generations"`` of events (``open``,
``promote``, ``rollback``, ``drop``), each row one commit (:func:`append_event`);
:func:`read_state` folds the rows, in commit order, into a :class:`GenerationState`: every
generation and the stack of promotions whose top is the one readers are served.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.creation import open_or_create
from latechunk_dagster.sink.retry import retry_commit

#: The log of a table definition ``t`` is the table ``f"{t}{LOG_SUFFIX}"``.
LOG_SUFFIX = "__generations"

EVENTS = ("open", "promote", "rollback", "drop")

LOG_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("table", pa.string()),
        pa.field("rejected", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("note", pa.string()),
    ]
)


def log_table_name(table: str) -> str:
    """The log of the table definition ``table``: ``f"{table}__generations"``."""
    return f"{table}{LOG_SUFFIX}"


def generation_table(table: str, generation: int) -> str:
    """The name generation ``generation`` gives ``table`` (a chunk table definition or a rejected table).

    Example:
        >>> generation_table("chunks", 1), generation_table("chunks", 3)
        ('chunks', 'chunks__g3')
    """
    if generation < 1:
        raise ValueError(f"generations count from 1, got {generation}")
    return table if generation == 1 else f"{table}__g{generation}"


def definition_key(configs: Mapping[str, str | None]) -> str:
    """The definition key of ``{granularity: vector_config}`` (``{"": config}`` for one strategy): hex
    sha256 (first 16 characters) of the sorted mapping as JSON. Two runs share a generation exactly
    when every granularity's ``vector_config`` is the same."""
    blob = json.dumps(sorted(configs.items()), separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Generation:
    """One generation of a table definition.

    Attributes:
        number: 1, 2, ...; key: its definition key; table, rejected: its table names (the chunk
            table definition's, i.e. the base of its granularity tables, and the rejected table's).
        opened_at: when it was opened (UTC); served_until: when it last stopped being current
            (``None``: current now, or never promoted); promoted: it has been current at some point.
        dropped: its tables were dropped (:func:`clean`).
    """

    number: int
    key: str
    table: str
    rejected: str | None
    opened_at: datetime
    promoted: bool = False
    served_until: datetime | None = None
    dropped: bool = False


@dataclass(frozen=True)
class GenerationState:
    """What the log says (:func:`read_state`): every generation and the stack of promotions
    (``stack[-1]``: the current generation; ``rollback`` pops it)."""

    generations: dict[int, Generation] = field(default_factory=dict)
    stack: tuple[int, ...] = ()
    events: int = 0

    @property
    def current(self) -> Generation | None:
        """The generation readers are served, or ``None`` (none promoted yet)."""
        return self.generations[self.stack[-1]] if self.stack else None

    def of_key(self, key: str) -> Generation | None:
        """The generation (not dropped) opened for definition key ``key``, or ``None``."""
        found = [g for g in self.generations.values() if g.key == key and not g.dropped]
        return found[0] if found else None

    @property
    def newest(self) -> Generation | None:
        """The generation opened last and not dropped: the one a backfill builds (or the current)."""
        live = [g for g in self.generations.values() if not g.dropped]
        return max(live, key=lambda g: g.number) if live else None


def read_state(db: Any, table: str, listed: Collection[str] | None = None) -> GenerationState | None:
    """The generations of ``table`` as its log holds them, or ``None`` when ``table`` is not under
    generations (no log). One read of the log (a few rows per generation).

    Args:
        listed: the database's table names when the caller has listed them (saves a listing: one
            request on an object store).
    """
    name = log_table_name(table)
    if name not in (table_names(db) if listed is None else listed):
        return None
    rows = db.open_table(name).to_arrow().sort_by([("seq", "ascending"), ("at", "ascending")]).to_pylist()
    return state_of(rows)


def state_of(rows: list[dict[str, Any]]) -> GenerationState:
    """:class:`GenerationState` of log rows in commit order (``seq``, then ``at``).

    An ``open`` of a number already opened (two writers opening one at once) is ignored: the first
    one owns the number. ``promote`` pushes its generation (moving it to the top if already on the
    stack), ``rollback`` pops the top, ``drop`` marks a generation dropped and takes it off the stack.
    """
    gens: dict[int, Generation] = {}
    stack: list[int] = []
    for row in rows:
        n, event, at = row["generation"], row["event"], row["at"]
        if event == "open":
            if n not in gens:
                gens[n] = Generation(n, row["key"], row["table"], row["rejected"], at)
            continue
        if n not in gens:
            continue
        if event == "promote":
            if stack and stack[-1] != n:
                end_serving(gens, stack[-1], at)
            if n in stack:
                stack.remove(n)
            stack.append(n)
            gens[n] = replace_generation(gens[n], promoted=True, served_until=None)
        elif event == "rollback" and stack and stack[-1] == n and len(stack) > 1:
            end_serving(gens, stack.pop(), at)
            gens[stack[-1]] = replace_generation(gens[stack[-1]], served_until=None)
        elif event == "drop":
            gens[n] = replace_generation(gens[n], dropped=True)
            if n in stack:
                stack.remove(n)
    return GenerationState(gens, tuple(stack), len(rows))


def replace_generation(g: Generation, **changes: Any) -> Generation:
    return Generation(**{**g.__dict__, **changes})


def end_serving(gens: dict[int, Generation], n: int, at: datetime) -> None:
    gens[n] = replace_generation(gens[n], served_until=at)


def append_event(db: Any, definition: str, event: str, generation: int, **fields: Any) -> None:
    """One log row of the table definition ``definition``, one commit (retried on a commit conflict)."""
    log = open_or_create(db, log_table_name(definition), LOG_SCHEMA)
    seq = read_state(db, definition)
    row = {name: None for name in LOG_SCHEMA.names} | fields
    row |= {"seq": seq.events if seq else 0, "event": event, "generation": generation, "at": datetime.now(UTC)}
    retry_commit(
        lambda: log.add(pa.Table.from_pylist([row], schema=LOG_SCHEMA)),
        what=f"{event} generation {generation} of {definition!r}",
        refresh=log.checkout_latest,
    )
