"""The small-to-big links between two granularity tables of one table definition, checked (issue 29).

Each chunk of a finer granularity records in ``parent_chunk_id`` the chunk of the next (coarser)
granularity that holds most of its tokens (:mod:`latechunk_dagster.core.granularities`). The table
checks of :mod:`latechunk_dagster.sink.validation` take one table each; :func:`parents_exist` takes
two consecutive granularities' tables and asserts the links, one partition at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from latechunk_dagster.sink.validation import MAX_LISTED, Outcome, merge, read_partitions

#: The check of a fine granularity's table against the next (coarser) one's (:func:`parents_exist`).
PARENT_CHECK = {
    "parents_exist": "every chunk's parent_chunk_id is a chunk of the same document in the next granularity"
}


def parents_exist(fine: Any, coarse: Any, partitions: Sequence[str]) -> Outcome:
    """:data:`PARENT_CHECK`: in each of ``partitions``, every row of the fine granularity's table has a
    ``parent_chunk_id`` that is a ``chunk_id`` of the coarse (next) granularity's table, in the same
    partition and of the same document.

    Args:
        fine, coarse: open LanceDB tables of two consecutive granularities of one table definition
            (``granularity_table(table, g)``), finest first. One partition of each is read at a time
            (``chunk_id``, ``doc_id``, ``parent_chunk_id`` / ``chunk_id``, ``doc_id``).

    Returns:
        ``(passed, {partition: {rows, no_parent, missing_parent, other_document, examples}})``:
        ``no_parent`` rows whose ``parent_chunk_id`` is NULL, ``missing_parent`` whose parent is not
        in the coarse table's partition, ``other_document`` whose parent belongs to another document;
        ``examples``: the first :data:`MAX_LISTED` offending chunk ids.
    """
    outcomes: dict[str, Outcome] = {}
    for p in dict.fromkeys(partitions):
        rows = read_partitions(fine, [p], ["chunk_id", "doc_id", "parent_chunk_id"]).to_pylist()
        parent_rows = read_partitions(coarse, [p], ["chunk_id", "doc_id"])
        owner = dict(zip(parent_rows.column("chunk_id").to_pylist(), parent_rows.column("doc_id").to_pylist()))
        del parent_rows
        none = [r["chunk_id"] for r in rows if r["parent_chunk_id"] is None]
        missing = [
            r["chunk_id"] for r in rows if r["parent_chunk_id"] is not None and r["parent_chunk_id"] not in owner
        ]
        other = [r["chunk_id"] for r in rows if owner.get(r["parent_chunk_id"], r["doc_id"]) != r["doc_id"]]
        examples = (none + missing + other)[:MAX_LISTED]
        outcomes[p] = (
            not examples,
            {
                "rows": len(rows),
                "no_parent": len(none),
                "missing_parent": len(missing),
                "other_document": len(other),
                "examples": examples,
            },
        )
    return merge(outcomes)
