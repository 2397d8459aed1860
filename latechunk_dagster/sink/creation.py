"""Opening a table this package writes, creating it when missing, without ever overwriting rows.

**Creating cannot overwrite (issue 39 C8).** In lance a create is an ``Overwrite`` transaction.
LanceDB 0.40 (lance 13) checks whether the table exists when a create starts; when another writer
creates the table and commits rows before the create commits, the create still lands, as an
``Overwrite`` at the next version, and the table reads empty (measured: 1 table in 100 raced by 4
threads, three writers' rows gone). LanceDB OSS cannot rename a table ("rename_table is not
supported in LanceDB OSS"), so creating under a unique name and renaming is not available. What
:func:`open_or_create` does instead:

* it creates with ``exist_ok=False``: a create that finds the table (the usual loser of a race)
  raises "already exists", or is refused as a commit conflict ("This Overwrite transaction was
  preempted by concurrent transaction"), and the table is opened (retried while it is not yet readable: its
  directory exists before its first version is committed, and opening it then fails with "was not
  found");
* a create that succeeded knows its version ``v``. ``v == 1``: it was the first, nothing was
  before it. ``v > 1``: it was an Overwrite of versions ``1..v-1``; when version ``v - 1`` held
  rows, they are put back (:func:`_restore_overwritten`): the rows of version ``v - 1`` of every
  partition that holds no row now, in one insert-only ``merge_insert`` on the key column (a
  partition a writer committed after the create keeps that writer's rows whole). A warning names
  the table, the versions and the rows put back.

The window that remains: a writer that committed a partition's rows *incrementally* (keeping some
documents' stored rows) between the Overwrite and the repair keeps only its new rows for that
partition; its next run re-encodes the documents it lost (they read as changed).

**Schemas.** A table written by an earlier version gains the columns it lacks (:func:`migrate`).
Columns a user added are kept when they are nullable (the write path is a ``merge_insert`` whose
source carries only the pipeline's columns: matched rows keep the user's values, new rows get
NULL); anything else that differs is refused by :func:`schema_difference`, naming the columns.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow as pa

from latechunk_dagster.sink.catalog import has_table
from latechunk_dagster.sink.retry import PRIMARY_KEY_METADATA, is_commit_conflict, retry_commit
from latechunk_dagster.sink.schema import DERIVED_COLUMNS, sql_in
from latechunk_dagster.sink.writes import table_partitions

log = logging.getLogger(__name__)

#: Seconds to keep trying to open a table whose create another writer has started but not committed.
OPEN_WAIT_S = 30.0


def open_or_create(db: Any, name: str, schema: pa.Schema) -> Any:
    """Open table ``name``, creating it empty with ``schema``; never overwrites rows (module docstring).

    A table created before its key column was marked as lance's unenforced primary key (the field
    metadata of ``schema``'s first field) gains the mark (one metadata commit). A table written by
    an earlier version gains the columns it lacks (:func:`migrate`): nothing else about it changes,
    its vectors are not rewritten. Nullable columns a user added are kept.

    Raises:
        ValueError: the table exists with a schema the pipeline cannot write
            (:func:`schema_difference`: names the missing, retyped and extra non-nullable columns).
    """
    table = _open(db, name) if has_table(db, name) else _create(db, name, schema)
    migrate(table, schema)
    _mark_primary_key(table, schema)
    difference = schema_difference(table.schema, schema)
    if difference:
        raise ValueError(f"LanceDB table {name!r} at {db.uri} cannot take this pipeline's rows: {difference}")
    return table


def schema_difference(have: pa.Schema, want: pa.Schema) -> str | None:
    """How the existing table schema ``have`` differs from the pipeline's ``want`` in ways the
    pipeline cannot write, or ``None``. Field metadata and column order are not compared; extra
    nullable columns are allowed (module docstring).

    Example:
        >>> want = pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("v", pa.list_(pa.float32(), 2))])
        >>> schema_difference(pa.schema([pa.field("k", pa.string(), nullable=False), ("note", pa.string())]), want)
        "missing column 'v' (fixed_size_list<item: float>[2])"
    """
    parts: list[str] = []
    missing = [f for f in want if f.name not in have.names]
    if missing:
        cols = ", ".join(f"{f.name!r} ({f.type})" for f in missing)
        parts.append(
            f"missing column{'s' if len(missing) > 1 else ''} {cols}, which the pipeline writes "
            "(add it back with table.add_columns, or materialize into another table name)"
        )
    for field in want:
        if field.name not in have.names:
            continue
        got = have.field(field.name)
        if got.type != field.type:
            hint = (
                "vectors of another width: another model or head, give it another table name"
                if field.name == "vector"
                else f"cast it back with table.alter_columns({{'path': {field.name!r}, 'data_type': ...}})"
            )
            parts.append(f"column {field.name!r} is {got.type}, the pipeline writes {field.type} ({hint})")
        elif got.nullable and not field.nullable:
            parts.append(f"column {field.name!r} is nullable, the pipeline writes it NOT NULL")
    extra = [f.name for f in have if f.name not in want.names and not f.nullable]
    if extra:
        parts.append(
            f"column{'s' if len(extra) > 1 else ''} {extra} not written by the pipeline and NOT NULL "
            "(new rows could not be inserted): make them nullable with "
            "table.alter_columns({'path': NAME, 'nullable': True}) or drop them with table.drop_columns([...])"
        )
    return "; ".join(parts) or None


def _open(db: Any, name: str, wait_s: float = OPEN_WAIT_S) -> Any:
    """``db.open_table(name)``, retried while the table's first version is not yet committed."""
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            return db.open_table(name)
        except (ValueError, FileNotFoundError) as exc:
            if "not found" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(1.0, delay * 2)


def _create(db: Any, name: str, schema: pa.Schema) -> Any:
    """Create table ``name`` empty; open it when another writer created it first; put back the rows a
    create that landed as an Overwrite of a written table dropped (module docstring)."""
    try:
        table = db.create_table(name, schema=schema)
    except (ValueError, OSError, RuntimeError) as exc:
        if "already exists" not in str(exc) and not is_commit_conflict(exc):
            raise
        return _open(db, name)  # another writer's create won (a create refused by a conflict did not land)
    if table.version > 1:
        _restore_overwritten(db, table, name, table.version)
    return table


def _restore_overwritten(db: Any, table: Any, name: str, version: int) -> int:
    """Our create landed as ``version`` > 1, an Overwrite of versions ``1..version-1``: insert the rows
    of version ``version - 1`` of the partitions that hold no row now (insert-only ``merge_insert`` on
    the first column, the key; retried on conflicts). Returns the rows put back."""
    before = db.open_table(name)
    before.checkout(version - 1)
    if before.count_rows() == 0:
        return 0  # two creates of an empty table: nothing was overwritten
    key = table.schema.names[0]
    has_partition = "partition" in table.schema.names
    table.checkout_latest()
    where = None
    if has_partition:
        now = table_partitions(table)
        where = sql_in("partition", now, negate=True) if now else None
    query = before.search().limit(None)
    rows = (query.where(where) if where else query).to_arrow()
    if rows.num_rows:
        retry_commit(
            lambda: table.merge_insert(key).when_not_matched_insert_all().execute(rows),
            what=f"put back the rows the create of {name!r} overwrote",
            refresh=table.checkout_latest,
        )
    table.checkout_latest()
    log.warning(
        "LanceDB table %r: a concurrent create landed as version %d over version %d (lance commits a create "
        "as an Overwrite); put back %d rows of version %d",
        name,
        version,
        version - 1,
        rows.num_rows,
        version - 1,
    )
    return rows.num_rows


def _mark_primary_key(table: Any, schema: pa.Schema) -> None:
    key = schema.field(0)
    if not key.metadata or key.metadata.get(b"lance-schema:unenforced-primary-key") is None:
        return
    have = table.schema.field(key.name).metadata or {}
    if have.get(b"lance-schema:unenforced-primary-key") != b"true":
        retry_commit(
            lambda: table.update_field_metadata({"path": key.name, "metadata": dict(PRIMARY_KEY_METADATA)}),
            what=f"mark {key.name} as primary key",
            refresh=table.checkout_latest,
        )


def migrate(table: Any, schema: pa.Schema) -> list[str]:
    """Add to ``table`` the trailing columns of ``schema`` it lacks; returns their names (``[]``: none).

    A table written by an earlier version has a prefix of ``schema``'s columns (and maybe columns a user
    added, not counted). Nullable string and int32 columns (``vector_config``, ``granularity``,
    ``parent_chunk_id``, ``converter``, ``page_start``, ``page_end``, ``source_stamp``) are added as nulls, and a
    nullable list column (``boxes``) as nulls by its Arrow type in a commit of its own, in order; the derived
    ones (``id``, ``metadata``: :data:`~latechunk_dagster.sink.schema.DERIVED_COLUMNS`) are computed
    from each row's other columns. Each run of them between list columns goes in ONE LanceDB ``add_columns``
    with SQL expressions (``CAST(NULL AS STRING)`` for a null column), in the schema's order: a commit that writes new
    column files beside the existing ones (the vectors and other columns are not rewritten); a
    concurrent writer that migrates the same table first makes it a no-op. A table whose pipeline
    columns are not such a prefix (a user dropped one) is left alone: :func:`open_or_create` refuses it,
    naming the column.
    """
    ours = [n for n in table.schema.names if n in schema.names]
    if ours != schema.names[: len(ours)]:
        return []
    missing = schema.names[len(ours) :]
    # consecutive runs of SQL columns, each list column (``boxes``: SQL cannot cast NULL to it) a commit
    # of its own by its Arrow type, in the schema's order (``source_stamp`` after ``boxes``)
    steps: list[dict[str, str] | list[pa.Field]] = []
    for name in missing:
        field = schema.field(name)
        if name in DERIVED_COLUMNS:
            expression = DERIVED_COLUMNS[name]
        elif field.nullable and field.type == pa.string():
            expression = "CAST(NULL AS STRING)"
        elif field.nullable and field.type == pa.int32():
            expression = "CAST(NULL AS INT)"
        elif field.nullable and pa.types.is_list(field.type):
            steps.append([field])
            continue
        else:
            return []  # not an earlier layout of this schema: refused by the schema comparison
        if not steps or not isinstance(steps[-1], dict):
            steps.append({})
        steps[-1][name] = expression  # type: ignore[index]
    for step in steps:
        names = list(step) if isinstance(step, dict) else [f.name for f in step]
        _add_columns(table, step, f"add columns {names} to {table.name!r}")
    return list(missing)


def _add_columns(table: Any, columns: dict[str, str] | list[pa.Field], what: str) -> None:
    """``table.add_columns(columns)`` (one commit; SQL expressions, or all-null Arrow fields) unless another
    writer added them first; retried on conflicts."""
    names = list(columns) if isinstance(columns, dict) else [f.name for f in columns]

    def commit() -> None:
        if all(n in table.schema.names for n in names):
            return
        try:
            table.add_columns(columns)
        except Exception:
            table.checkout_latest()  # lost the race to a writer that added them: nothing left to do
            if not all(n in table.schema.names for n in names):
                raise

    retry_commit(commit, what=what, refresh=table.checkout_latest)
