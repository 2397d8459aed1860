"""Small-to-big search: match the query on a fine granularity's chunk vectors, return their parents.

A table definition written with several granularities is one LanceDB table per granularity
(:func:`~latechunk_dagster.sink.schema.granularity_table`: ``f"{table}_{name}"``, finest first). Each chunk row of a
granularity but the last records in ``parent_chunk_id`` the ``chunk_id`` of its parent: the chunk
of the next granularity holding most of its tokens
(:func:`~latechunk_dagster.core.granularities.parent_indices`). :func:`parent_hits` ranks the fine
chunks (the same query as :func:`~latechunk_dagster.sink.search.search`, more than ``k`` rows as
needed), merges the hits that share a parent, and reads the ``k`` best parents in one query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from latechunk_dagster.sink.granularity_tables import granularity_tables, parent_holders
from latechunk_dagster.sink.hits import Hit, ranked_hits
from latechunk_dagster.sink.schema import granularity_table, sql_in

#: Fine hits read per parent wanted at first; while fewer than ``k`` distinct parents are found
#: and the table holds more rows, the read grows by :data:`FETCH_GROWTH` (a parent of many
#: matching chunks takes several hits).
FETCH_FACTOR = 4
FETCH_GROWTH = 4

#: The parent row's columns that a :class:`ParentHit` carries.
PARENT_COLUMNS = (
    "chunk_id", "doc_id", "partition", "chunk_index", "char_start", "char_end",
    "token_start", "token_end", "text", "headings", "granularity",
)  # fmt: skip


@dataclass(frozen=True)
class ParentHit:
    """One small-to-big result: a parent chunk, and the fine chunks of it that matched the query.

    Attributes:
        doc_id, partition, chunk_id, chunk_index: the parent chunk's (its own table's ``chunk_id``).
        char_range: the parent's ``(char_start, char_end)``, ``None`` where the text has no position.
        token_range: the parent's ``(token_start, token_end)`` in the document's one tokenization.
        text, headings: the parent's text and Markdown headings (``()`` where none).
        granularity, table: the parent's granularity name and the table it was read from.
        distance: the smallest cosine distance of the query to a matched fine chunk's vector (the
            parent's own vector is not compared).
        matched: the fine hits whose parent this is, in the search's order (best first); only the
            fine hits read (:data:`FETCH_FACTOR`), not every child of the parent.
        relevance: hybrid mode: the best matched fine chunk's reranker score; else ``None``.
    """

    doc_id: str
    partition: str
    chunk_id: str
    chunk_index: int
    char_range: tuple[int, int] | None
    token_range: tuple[int, int]
    text: str | None
    headings: tuple[str, ...]
    granularity: str
    table: str
    distance: float
    matched: tuple[Hit, ...]
    relevance: float | None = None


def parent_hits(
    db: Any,
    table: Any,
    table_name: str,
    vector: np.ndarray,
    query: str,
    k: int,
    *,
    where: str | None,
    exact: bool,
    mode: str,
    reranker: Any,
) -> list[ParentHit]:
    """The ``k`` best distinct parents of the fine chunks of ``table`` that match the query.

    Parents are ranked by their best matched fine chunk (the search's order: cosine distance, or
    the reranker's score in hybrid mode); hits sharing a parent are merged into one
    :class:`ParentHit`. Fewer than ``k`` only when the (filtered) table has fewer parents.

    Args:
        db: the LanceDB connection holding ``table`` and its sibling granularity tables.
        table, table_name: the fine granularity's open table (its lineage already checked) and name.
        vector, query, where, exact, mode, reranker: as :func:`~latechunk_dagster.hits.ranked_hits`.

    Raises:
        ValueError: ``table`` holds no parent links (no ``parent_chunk_id`` column, or a matched row
            without one: a single strategy's table or the coarsest granularity), naming the table;
            parents missing from the next granularity's table (written by another run; naming both).
    """
    check_parent_links(table, table_name)
    total = table.count_rows()
    n = min(FETCH_FACTOR * k, total)
    while n:
        hits, extra = ranked_hits(
            table, vector, query, n, where=where, exact=exact, mode=mode, reranker=reranker,
            extra=("parent_chunk_id", "granularity"),
        )  # fmt: skip
        groups: dict[str, list[Hit]] = {}
        for hit, parent in zip(hits, extra["parent_chunk_id"]):
            if parent is None:
                raise ValueError(_no_parents(table_name, f"its chunk {hit.chunk_index} of {hit.doc_id!r} has none"))
            groups.setdefault(parent, []).append(hit)
        if len(groups) >= k or len(hits) < n or n >= total:
            break
        n = min(n * FETCH_GROWTH, total)
    if not n or not groups:
        return []
    best = dict(list(groups.items())[:k])
    rows, parent_table = read_parents(db, table_name, extra["granularity"][0], list(best))
    return [_parent_hit(rows[pid], parent_table, matched) for pid, matched in best.items()]


def check_parent_links(table: Any, table_name: str) -> None:
    """Refuse a table whose chunks have no parents, naming it: a single strategy's table or the
    coarsest granularity's (``parent_chunk_id`` NULL in every row), or one written before the
    column existed. One filtered read of one row (no vectors).

    Raises:
        ValueError: ``table {name!r} has no parent chunks (...)``.
    """
    if "parent_chunk_id" not in table.schema.names:
        raise ValueError(_no_parents(table_name, "it has no parent_chunk_id column"))
    if not table.search().where("parent_chunk_id IS NOT NULL").select(["chunk_id"]).limit(1).to_list():
        raise ValueError(_no_parents(table_name, "parent_chunk_id is NULL in every row"))


def read_parents(db: Any, table_name: str, granularity: str | None, ids: Sequence[str]) -> tuple[dict[str, dict], str]:
    """The parent rows ``ids`` that chunks of ``table_name`` (granularity ``granularity``) link to.

    The parents live in the next granularity's table, a sibling ``{table}_{name}`` of ``table_name``
    (whose own name is ``{table}_{granularity}``): the one granularity table of the definition that
    holds the ids (:func:`~latechunk_dagster.sink.granularity_tables.parent_holders`: one count per
    sibling), read with ONE query (``chunk_id IN (...)``); it must hold all of them.

    Returns:
        ``{chunk_id: row}`` (:data:`PARENT_COLUMNS`) and the name of the table they were read from.

    Raises:
        ValueError: no sibling table holds them, or the one that does lacks some (naming the tables).
    """
    if not granularity or not table_name.endswith(f"_{granularity}"):
        raise ValueError(f"table {table_name!r} (granularity {granularity!r}) is not a granularity's table")
    base = table_name[: -len(granularity) - 1]
    tables = granularity_tables(db, base, ordered=False)
    holders = parent_holders(tables, granularity, ids)
    if not holders:
        siblings = [granularity_table(base, g) for g in tables if g != granularity]
        raise ValueError(
            f"the parent chunks that table {table_name!r} links to are in none of the tables of its table definition "
            f"{base!r} ({', '.join(siblings) or 'none besides it'}): materialize all its granularities"
        )
    name = granularity_table(base, holders[0])
    found = tables[holders[0]].search().where(sql_in("chunk_id", ids)).select(list(PARENT_COLUMNS)).limit(len(ids))
    rows = {r["chunk_id"]: r for r in found.to_list()}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise ValueError(
            f"table {name!r} lacks {len(missing)} of the {len(ids)} parent chunks that table {table_name!r} "
            f"links to (e.g. {missing[0]}): the two were written by different runs; materialize the partition again"
        )
    return rows, name


def _parent_hit(row: dict, table: str, matched: list[Hit]) -> ParentHit:
    relevance = [h.relevance for h in matched if h.relevance is not None]
    return ParentHit(
        doc_id=row["doc_id"],
        partition=row["partition"],
        chunk_id=row["chunk_id"],
        chunk_index=row["chunk_index"],
        char_range=(row["char_start"], row["char_end"]) if row["char_start"] is not None else None,
        token_range=(row["token_start"], row["token_end"]),
        text=row["text"],
        headings=tuple(row["headings"] or ()),
        granularity=row["granularity"],
        table=table,
        distance=min(h.distance for h in matched),
        matched=tuple(matched),
        relevance=max(relevance) if relevance else None,
    )


def _no_parents(table_name: str, why: str) -> str:
    return (
        f"table {table_name!r} has no parent chunks ({why}): it is a single strategy's table or the coarsest "
        "granularity; small-to-big search (return_parent=True) queries a finer granularity's table"
    )
