"""The granularity tables of one table definition, and which one holds a granularity's parents (issue 29).

A table definition ``table`` written with several granularities is one LanceDB table per
granularity, :func:`~latechunk_dagster.sink.schema.granularity_table` (``f"{table}_{g}"``), whose
rows say ``granularity = g``. Each chunk of a granularity but the last records in
``parent_chunk_id`` the ``chunk_id`` of its parent in the next (coarser) granularity's table; chunk
ids cover the granularity name, so a parent id lies in exactly one table. The parent granularity is
read from what is written: one count per sibling table of the rows whose ``chunk_id`` is one of the
fine table's parent ids (:func:`parent_holders`). Nothing extra is stored, so tables written before
this module are read the same way. Search, small-to-big and the granularity evaluation use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from latechunk_dagster.core.granularities import GRANULARITY_NAME
from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.schema import granularity_table, sql_in

log = logging.getLogger(__name__)


def granularity_names(table_names: Iterable[str], table: str) -> list[str]:
    """The granularity names ``g`` whose table ``f"{table}_{g}"`` is among ``table_names``, sorted.

    By name alone (:data:`~latechunk_dagster.core.granularities.GRANULARITY_NAME`); no table is opened.

    Example:
        >>> granularity_names(["chunks", "chunks_small", "chunks_big", "other_x", "chunks_-"], "chunks")
        ['big', 'small']
    """
    prefix = f"{table}_"
    return sorted(
        t[len(prefix) :] for t in table_names if t.startswith(prefix) and GRANULARITY_NAME.fullmatch(t[len(prefix) :])
    )


def rows_granularity(table: Any) -> str | None:
    """What one row of ``table`` says its granularity is (``""`` or ``None`` for a single strategy's
    table); ``None`` too for an empty table or one without the column. One row of one column read."""
    if "granularity" not in table.schema.names:
        return None
    values = table.search().select(["granularity"]).limit(1).to_arrow().column("granularity").to_pylist()
    return values[0] if values else None


def definition_granularities(db: Any, name: str, *, empty: bool = False) -> dict[str, Any]:
    """``{granularity: open table}`` of every table ``granularity_table(name, g)`` (by name,
    :func:`granularity_names`) whose rows say they are granularity ``g`` (:func:`rows_granularity`),
    by name. Another definition's table that merely starts with ``name_`` (``chunks_minilm``, a
    single strategy's table, whose rows say ``""``) is not one of them (issue 40). With ``empty``,
    an empty table of such a name counts too (no row says otherwise: the listing of an error message)."""
    found: dict[str, Any] = {}
    for g in granularity_names(table_names(db), name):
        table = db.open_table(granularity_table(name, g))
        says = rows_granularity(table)
        if says == g or (empty and says is None and table.count_rows() == 0):
            found[g] = table
    return found


def granularity_table_of(db: Any, name: str, granularity: str) -> Any:
    """The table of granularity ``granularity`` of the table definition ``name``, checked by its rows.

    Raises:
        ValueError: there is no table ``granularity_table(name, granularity)``, or its rows say another
            granularity (another definition's table: ``chunks_minilm`` beside ``chunks_small``); the
            message names the table, what its rows say and the definition's granularities.
    """
    table_name = granularity_table(name, granularity)
    known = sorted(definition_granularities(db, name, empty=True))
    listing = f"tables of granularities of {name!r}: {', '.join(known)}" if known else f"{name!r} has none"
    if table_name not in table_names(db):
        raise ValueError(f"no table {table_name!r} ({listing})")
    table = db.open_table(table_name)
    says = rows_granularity(table)
    if says != granularity and not (says is None and table.count_rows() == 0):  # an empty table says nothing
        raise ValueError(
            f"table {table_name!r} is not granularity {granularity!r} of {name!r}: its rows say granularity "
            f"{says!r} (another table definition's table; {listing})"
        )
    return table


def granularity_tables(db: Any, name: str, *, ordered: bool = True) -> dict[str, Any]:
    """The tables of the table definition ``name`` in the LanceDB connection ``db``.

    ``name`` itself when it is a table (a single strategy: ``{"": table}``); else every granularity
    table of it by what its rows say (:func:`definition_granularities`). With ``ordered``, finest
    first by their parent links (:func:`granularity_chain`); else by name.

    Returns:
        ``{granularity: open table}``; ``{}`` when there is neither ``name`` nor a granularity table of it.

    Raises:
        ValueError: with ``ordered``, granularity tables whose parent links do not make one chain (names
            the table that does not fit).
    """
    if name in table_names(db):
        return {"": db.open_table(name)}
    found = definition_granularities(db, name)
    if not ordered or not found:
        return found
    return {g: found[g] for g in granularity_chain(found)}


def leftover_tables(db: Any, name: str, granularities: Iterable[str]) -> list[str]:
    """The granularity tables of the table definition ``name`` (by their rows:
    :func:`definition_granularities`) that none of ``granularities`` writes any more, sorted.

    Only a table linked by parent ids with one of the tables ``granularities`` still write counts
    (its rows' parents lie in one of them, or theirs in it: :func:`_linked`): that is a granularity
    removed from this definition. A table of another definition that happens to share the name
    (the demo's ``chunks_sentences32`` beside a user's own definition ``chunks`` of other
    granularities) links with none of them and is left alone, as is everything on a first run
    (nothing written yet to link with) and every granularity table beside a single strategy's table.
    """
    keep = set(granularities)
    found = definition_granularities(db, name)
    current = {g: t for g, t in found.items() if g in keep}
    return sorted(granularity_table(name, g) for g, t in found.items() if g not in keep and _linked(t, current))


def _linked(table: Any, others: Mapping[str, Any]) -> bool:
    """Whether one parent id of ``table`` lies in one of ``others``, or one of ``others``' in ``table``
    (one probe row each, then one count per table: :func:`parent_holders`)."""
    probe = _parent_probe(table)
    if probe and any(other.count_rows(sql_in("chunk_id", probe)) for other in others.values()):
        return True
    return any((ids := _parent_probe(other)) and table.count_rows(sql_in("chunk_id", ids)) for other in others.values())


def _parent_probe(table: Any) -> list[str]:
    """One ``parent_chunk_id`` of ``table`` (``[]``: none, or no such column)."""
    if "parent_chunk_id" not in table.schema.names:
        return []
    probe = table.search().where("parent_chunk_id IS NOT NULL").select(["parent_chunk_id"]).limit(1).to_arrow()
    return probe.column("parent_chunk_id").to_pylist()


def drop_leftover_tables(db: Any, name: str, granularities: Iterable[str], warn: Any = None) -> list[str]:
    """Drop the tables of the table definition ``name`` that no granularity of it writes any more
    (:func:`leftover_tables`: a granularity removed from the definition), one warning line each on
    ``warn`` (default: this module's logger). Contract section 7: such a table would keep the
    documents of shards that later leave the store (a partition sync deletes from the definition's
    tables) and break the chain of the definition's granularities (``latechunk eval``, small-to-big).

    Returns:
        The tables dropped.
    """
    dropped = leftover_tables(db, name, granularities)
    for table_name in dropped:
        db.drop_table(table_name, ignore_missing=True)
        (warn or log.warning)(
            f"dropped LanceDB table {table_name!r}: its rows are a granularity of table definition {name!r} "
            f"that the definition no longer has (it writes {sorted(granularities) or ['(one strategy)']})"
        )
    return dropped


def parent_holders(tables: Mapping[str, Any], granularity: str, ids: Sequence[str]) -> list[str]:
    """The granularities other than ``granularity`` whose table holds any of the chunk ids ``ids``.

    One ``count_rows(chunk_id IN ids)`` per other table. For parent ids of one granularity's rows
    written by one run, exactly one: the next granularity (chunk ids cover the granularity name).
    """
    where = sql_in("chunk_id", ids)
    return [g for g, table in tables.items() if g != granularity and table.count_rows(where)]


def parent_granularity(tables: Mapping[str, Any], granularity: str) -> str | None:
    """The granularity whose table holds the parents of ``granularity``'s rows; ``None`` for the
    coarsest (``parent_chunk_id`` NULL in every row, or no such column).

    One filtered read of one parent id, then :func:`parent_holders`.

    Raises:
        ValueError: the parent id is in no other table of ``tables``, or in several (names the granularity).
    """
    table = tables[granularity]
    if "parent_chunk_id" not in table.schema.names:
        return None
    probe = table.search().where("parent_chunk_id IS NOT NULL").select(["parent_chunk_id"]).limit(1).to_arrow()
    ids = probe.column("parent_chunk_id").to_pylist()
    if not ids:
        return None
    holders = parent_holders(tables, granularity, ids)
    if len(holders) != 1:
        raise ValueError(f"the parents of granularity {granularity!r} are in no granularity table of its definition")
    return holders[0]


def granularity_chain(tables: Mapping[str, Any]) -> list[str]:
    """The granularity names finest first: each one's parents lie in the next one's table
    (:func:`parent_granularity`, once per table).

    Raises:
        ValueError: the parent links do not make one chain: names the chain the links make and each
            table that does not fit it (e.g. the table of a granularity removed from the definition,
            left behind), or as :func:`parent_granularity`.
    """
    parent_of = {g: parent_granularity(tables, g) for g in tables}
    children = {p for p in parent_of.values() if p is not None}
    chains = []
    for first in (g for g in tables if g not in children):
        order = [first]
        while (nxt := parent_of[order[-1]]) is not None and nxt not in order:
            order.append(nxt)
        chains.append(order)
    if len(chains) == 1 and len(chains[0]) == len(tables):
        return chains[0]
    best = max(chains, key=len) if chains else []
    misfits = [g for g in sorted(tables) if g not in best]

    def named(g: str) -> str:
        return f"{getattr(tables[g], 'name', g)!r}"

    raise ValueError(
        f"granularity tables {sorted(tables)} do not link as one chain: "
        f"{' -> '.join(named(g) for g in best) or '(none)'} is the longest, and "
        + ", ".join(f"table {named(g)} (granularity {g!r}) does not fit it" for g in misfits)
        + ": a granularity removed from the table definition leaves its table behind until the next run "
        "drops it (docs/contract.md section 7); drop it with db.drop_table(NAME)"
    )
