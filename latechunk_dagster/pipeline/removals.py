"""How many partitions one sync may remove at once: rclone's ``--max-delete``, as a share.

A store pointed at by mistake (another folder, a mount that came back empty but listable, a
typo in a path) lists complete and shares no shard with the partitions: read literally, every
partition left the store, and a sync would delete every row. So every path that removes
partitions asks :func:`check_removals` first: Dagster's ``sync_partitions`` (``latechunk
sync-partitions``, ``make demo``), the store sensor's tick, and Airflow's ``ListShardsOperator``.
Removing more than the share :func:`max_delete_share` of the known partitions at once is refused
whole (nothing added, nothing removed), naming the partitions and their rows, until the user
raises the share explicitly for that sync.

The setting has one home, here: ``LATECHUNK_MAX_DELETE`` (a share, ``50%`` or ``0.5``; default
:data:`DEFAULT_MAX_DELETE`); ``latechunk sync-partitions --max-delete`` and the operator's
``max_delete`` override it for one call. Which partitions left the store is not decided here
(:meth:`Listing.removed <latechunk_dagster.sources.listing.Listing.removed>`), nor which tables
hold their rows (the caller's table names).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

#: Environment variable of the share (``50%``, ``0.5``; ``100%``: no limit, ``0``: remove nothing).
MAX_DELETE_ENV = "LATECHUNK_MAX_DELETE"
#: Default share: a sync may remove at most half of the known partitions at once (rclone's
#: ``--max-delete`` is a count, off by default; a share fits stores of any size: one shard of
#: two may go, a whole store may not).
DEFAULT_MAX_DELETE = 0.5
#: Partitions named in a refusal (then "and N more").
NAMED = 20


class TooManyRemovalsError(ValueError):
    """A sync would remove more than the allowed share of the known partitions; nothing was changed.

    Attributes:
        removed: the partitions it would remove, sorted. known: how many partitions were known.
        limit: the share in force (0..1). rows: ``{table: rows of the removed partitions}``.
    """

    def __init__(self, removed: Sequence[str], known: int, limit: float, rows: dict[str, int], how: str) -> None:
        self.removed, self.known, self.limit, self.rows = list(removed), known, limit, dict(rows)
        named = ", ".join(repr(p) for p in self.removed[:NAMED])
        more = f" and {len(self.removed) - NAMED} more" if len(self.removed) > NAMED else ""
        held = ", ".join(f"{n} {t}" for t, n in self.rows.items() if n)
        in_rows = f" holding {sum(self.rows.values())} rows ({held})" if held else ""
        super().__init__(
            f"refusing to remove {len(self.removed)} of {known} known partitions at once "
            f"({100 * len(self.removed) / known:.0f}% > the limit of {_percent(limit)}): their shards are not in "
            f"the store: {named}{more}{in_rows}. Nothing was added or removed. If the store is the wrong one, "
            f"point at the right one; if these shards really left it, remove them with {how} "
            f"(or {MAX_DELETE_ENV}=100%)"
        )


def _percent(share: float) -> str:
    return f"{100 * share:g}%"


def max_delete_share(value: float | str | None = None) -> float:
    """The share of the known partitions a sync may remove at once, in ``[0, 1]``.

    Args:
        value: given for one call (a flag, an operator argument): ``0.5``, ``"50%"``, ``"0.5"``;
            ``None`` or ``""``: ``$LATECHUNK_MAX_DELETE``, else :data:`DEFAULT_MAX_DELETE`.

    Raises:
        ValueError: not a number or a percentage between 0 and 100%, naming the value and where
            it came from.
    """
    source = "max_delete"
    if value is None or value == "":
        value, source = os.environ.get(MAX_DELETE_ENV) or DEFAULT_MAX_DELETE, MAX_DELETE_ENV
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        share = -1.0
    if not 0 <= share <= 1:
        raise ValueError(f"{source} must be a share of the partitions, 0..1 or 0%..100% (e.g. 50%), got {value!r}")
    return share


def check_removals(
    removed: Sequence[str],
    known: Iterable[str],
    max_delete: float | str | None = None,
    *,
    how: str,
    db: Any = None,
    table_names: Sequence[str] = (),
) -> None:
    """Refuse to remove more than the share :func:`max_delete_share` of the ``known`` partitions.

    Args:
        removed: the partitions a sync would remove (``Listing.removed``).
        known: every partition known before the sync (the orchestrator's and the tables'
            ``partition`` values); the share is taken of how many there are.
        max_delete: the share for this call (see :func:`max_delete_share`).
        how: what the user runs to remove them anyway (named in the error).
        db, table_names: a LanceDB connection and the tables whose rows would go: the error
            counts them (one ``count_rows`` per table).

    Raises:
        TooManyRemovalsError: ``len(removed) > share * len(known)``; names the partitions, their
            rows and ``how``.
        ValueError: a bad ``max_delete`` (:func:`max_delete_share`).
    """
    limit = max_delete_share(max_delete)
    count = len(set(known) | set(removed))
    if not removed or len(removed) <= limit * count:
        return
    raise TooManyRemovalsError(sorted(removed), count, limit, _rows(db, table_names, removed), how)


def _rows(db: Any, table_names: Sequence[str], partitions: Sequence[str]) -> dict[str, int]:
    """``{table: rows of partitions}`` for each existing table of ``table_names``."""
    if db is None:
        return {}
    from latechunk_dagster.sink import catalog
    from latechunk_dagster.sink.schema import sql_in

    existing = set(catalog.table_names(db))  # every page of the listing
    where = sql_in("partition", partitions)
    return {t: db.open_table(t).count_rows(where) for t in table_names if t in existing}
