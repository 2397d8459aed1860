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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from latechunk_dagster.core.granularities import GRANULARITY_NAME
from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.schema import granularity_table, sql_in


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


def granularity_tables(db: Any, name: str, *, ordered: bool = True) -> dict[str, Any]:
    """The tables of the table definition ``name`` in the LanceDB connection ``db``.

    ``name`` itself when it is a table (a single strategy: ``{"": table}``); else every table
    ``granularity_table(name, g)`` (:func:`granularity_names`) whose rows say they are granularity
    ``g`` (one row's ``granularity`` read per table; tables without the column are not granularity
    tables). With ``ordered``, finest first by their parent links (:func:`granularity_chain`); else
    by name.

    Returns:
        ``{granularity: open table}``; ``{}`` when there is neither ``name`` nor a granularity table of it.

    Raises:
        ValueError: with ``ordered``, granularity tables whose parent links do not make one chain (names them).
    """
    listed = table_names(db)
    if name in listed:
        return {"": db.open_table(name)}
    found: dict[str, Any] = {}
    for g in granularity_names(listed, name):
        table = db.open_table(granularity_table(name, g))
        if "granularity" not in table.schema.names:
            continue
        row = table.search().select(["granularity"]).limit(1).to_arrow().column("granularity").to_pylist()
        if row == [g]:
            found[g] = table
    if not ordered or not found:
        return found
    return {g: found[g] for g in granularity_chain(found)}


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
        ValueError: the parent links do not make one chain (names the tables), or as :func:`parent_granularity`.
    """
    parent_of = {g: parent_granularity(tables, g) for g in tables}
    children = {p for p in parent_of.values() if p is not None}
    first = [g for g in tables if g not in children]
    if len(first) != 1:
        raise ValueError(f"granularity tables {sorted(tables)} do not link as one chain (finest: {first})")
    order = [first[0]]
    while (nxt := parent_of[order[-1]]) is not None and nxt not in order:
        order.append(nxt)
    if len(order) != len(tables):
        raise ValueError(f"granularity tables {sorted(tables)} do not link as one chain ({' -> '.join(order)})")
    return order
