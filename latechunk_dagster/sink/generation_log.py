"""The generations log of a table definition (issue 36; :mod:`latechunk_dagster.sink.generations`
uses it): its table name and schema, its events, and the state they add up to.

The log is an append-only LanceDB table ``f"{table}__generations"`` of events (``open``,
``promote``, ``rollback``, ``drop``), each row one commit; :func:`read_state` folds the rows, in
commit order, into a :class:`GenerationState`: every generation and the stack of promotions whose
top is the one readers are served.

**Every event is a compare-and-swap (issue 47 kind 3).** A row's ``seq`` is its place in the log:
an event decided on a state read with ``n`` as its next place is committed as row ``seq = n`` by an
insert-only ``merge_insert`` keyed by ``seq``, which lance's unenforced primary key makes fail for
the second of two writers that inserted the same ``seq`` at once (it retries, finds the row and
inserts nothing: ``num_inserted_rows == 0``; measured with two handles at one version). The loser
reads the log again and decides again (:func:`commit_planned`), so an event always follows exactly
the state it was decided on: two writers of two keys never both open generation ``n``, a rollback
never pops a promotion it did not see. Rows are folded in ``seq`` order, ties (logs written before
this rule) in commit order (their row addresses: fragments are numbered by commit), never by a
writer's clock.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.creation import open_or_create
from latechunk_dagster.sink.retry import PRIMARY_KEY_METADATA, retry_commit

#: The log of a table definition ``t`` is the table ``f"{t}{LOG_SUFFIX}"``.
LOG_SUFFIX = "__generations"

EVENTS = ("open", "promote", "rollback", "drop")

#: Times :func:`commit_planned` reads the log and tries its event again after another writer's
#: event took the place (each loss means another event landed: the log moved on).
PLAN_ATTEMPTS = 50

LOG_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False, metadata=PRIMARY_KEY_METADATA),
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
    next_seq: int = 0

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
    generations (no log). One read of the log (a few rows per generation), in commit order (module
    docstring).

    Args:
        listed: the database's table names when the caller has listed them (saves a listing: one
            request on an object store).
    """
    name = log_table_name(table)
    if name not in (table_names(db) if listed is None else listed):
        return None
    log = db.open_table(name)
    to_lance = getattr(log, "to_lance", None)
    if to_lance is not None:  # ties of seq (older logs) in commit order: fragments are numbered by commit
        rows = to_lance().to_table(with_row_address=True).sort_by([("seq", "ascending"), ("_rowaddr", "ascending")])
    else:  # LanceDB Cloud: a stable sort keeps the scan order of ties
        rows = log.to_arrow().sort_by([("seq", "ascending")])
    return state_of(rows.to_pylist())


def state_of(rows: list[dict[str, Any]]) -> GenerationState:
    """:class:`GenerationState` of log rows in commit order (by ``seq``; module docstring).

    An ``open`` of a number already opened (two writers opening one at once in a log written before
    compare-and-swap) is ignored: the first one owns the number. ``promote`` pushes its generation
    (moving it to the top if already on the stack), ``rollback`` pops the top, ``drop`` marks a
    generation dropped and takes it off the stack.
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
    next_seq = max((row["seq"] for row in rows), default=-1) + 1
    return GenerationState(gens, tuple(stack), len(rows), next_seq)


def replace_generation(g: Generation, **changes: Any) -> Generation:
    return Generation(**{**g.__dict__, **changes})


def end_serving(gens: dict[int, Generation], n: int, at: datetime) -> None:
    gens[n] = replace_generation(gens[n], served_until=at)


def log_row(event: str, generation: int, seq: int, **fields: Any) -> dict[str, Any]:
    """One log row of ``LOG_SCHEMA`` (unset fields ``None``), stamped now (UTC; for people: rows are
    ordered by ``seq``)."""
    if event not in EVENTS:
        raise ValueError(f"log events are {EVENTS}, got {event!r}")
    row = {name: None for name in LOG_SCHEMA.names} | fields
    return row | {"seq": seq, "event": event, "generation": generation, "at": datetime.now(UTC)}


def try_event(db: Any, definition: str, after: GenerationState, row: Mapping[str, Any]) -> bool:
    """Commit ``row`` (:func:`log_row`, any ``seq``) as the event right after the state ``after``:
    row ``seq = after.next_seq``, inserted only where no row holds that place. One compare-and-swap.

    Returns:
        ``True`` when it was committed; ``False`` when another writer's event holds the place (the
        log moved on since ``after`` was read: read it again and decide again).

    Raises:
        CommitConflictError: lance still refused the commit after bounded retries.
    """
    log = open_or_create(db, log_table_name(definition), LOG_SCHEMA)
    data = {**row, "seq": after.next_seq}
    result, _ = retry_commit(
        lambda: log.merge_insert("seq").when_not_matched_insert_all().execute(pa.Table.from_pylist([data], LOG_SCHEMA)),
        what=f"{row['event']} generation {row['generation']} of {definition!r}",
        refresh=log.checkout_latest,
    )
    return int(result.num_inserted_rows) == 1


#: What an event's planner returns: ``(event, generation, other fields)``, or ``None`` (nothing to commit).
Plan = tuple[str, int, dict[str, Any]] | None


def commit_planned(
    db: Any, definition: str, plan: Callable[[GenerationState], Plan], *, what: str
) -> tuple[GenerationState, Plan]:
    """Read the log, let ``plan`` decide the event on that state, commit it right after that state
    (:func:`try_event`); when another writer's event landed first, read again and ask ``plan`` again
    (it may now decide otherwise, or raise), at most :data:`PLAN_ATTEMPTS` times.

    Returns:
        ``(the state the event followed, the plan committed)``; the plan is ``None`` when ``plan``
        decided there was nothing to commit (the state is then the one it decided on).

    Raises:
        ValueError: ``definition`` is not under generations (no log); whatever ``plan`` raises.
        RuntimeError: every attempt lost to another writer (names ``what``).
    """
    for attempt in range(PLAN_ATTEMPTS):
        state = read_state(db, definition)
        if state is None:
            raise ValueError(
                f"table definition {definition!r} is not under generations (no table {log_table_name(definition)!r})"
            )
        decided = plan(state)
        if decided is None:
            return state, None
        event, generation, fields = decided
        if try_event(db, definition, state, log_row(event, generation, state.next_seq, **fields)):
            return state, decided
        time.sleep(random.uniform(0.0, min(0.5, 0.01 * 2**attempt)))  # full jitter (retry.py)
    raise RuntimeError(f"{what} of {definition!r}: other writers took every place in its log ({PLAN_ATTEMPTS} tries)")


def append_event(db: Any, definition: str, event: str, generation: int, **fields: Any) -> GenerationState:
    """One log row of the table definition ``definition`` after whatever the log holds now (no
    condition on the state): one committed event. Returns the state it followed."""
    return commit_planned(
        db, definition, lambda _: (event, generation, fields), what=f"{event} generation {generation}"
    )[0]
