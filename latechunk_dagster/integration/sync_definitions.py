"""Sync the partitions of every late-chunked table of a user's ``Definitions`` from a shell.

``latechunk sync-partitions -f definitions.py`` (or ``-m my_project.definitions``) loads the
definitions the way ``dagster`` does for ``-f``/``-m`` and runs :func:`sync_partitions
<latechunk_dagster.integration.sensors.sync_partitions>` for each table whose store sensor it
holds (the sensor's metadata names the partitions, resource keys and tables:
:func:`~latechunk_dagster.integration.sensors.sync_target`), with the resources the definitions
bind. Then ``dagster asset materialize -f definitions.py --select ... --partition KEY`` finds the
partition (before the sync it fails with ``DagsterUnknownPartitionError``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from latechunk_dagster.integration.sensors import SYNC_METADATA, sync_partitions


@dataclass(frozen=True)
class TableSync:
    """What one table's sync did: its dynamic partitions' name, its tables, the keys added and removed."""

    partitions: str
    table_names: list[str]
    added: list[str]
    removed: list[str]


def load_definitions(module: str | None = None, python_file: str | None = None) -> dg.Definitions:
    """The ``Definitions`` of a module (``-m``) or a Python file (``-f``), found by Dagster's own
    loader (``dagster._core.workspace.autodiscovery``, what ``dagster dev -m/-f`` uses): the one
    ``Definitions`` object at module scope, or the one named ``defs``; a ``@dg.definitions`` function
    (a ``dg`` project's ``definitions.py``, loading its ``defs/`` folder of components) is called.

    Raises:
        ValueError: neither or both given; no ``Definitions`` there, or several (naming them).
        FileNotFoundError: no such file. ModuleNotFoundError: no such module.
    """
    from dagster._core.workspace import autodiscovery

    if (module is None) == (python_file is None):
        raise ValueError("give the definitions as a module (-m) or a Python file (-f), one of the two")
    where = str(python_file or module)
    if python_file is not None and not Path(python_file).is_file():
        raise FileNotFoundError(f"no definitions file {python_file!r}")
    cwd = str(Path.cwd())
    try:
        if python_file is not None:
            targets = autodiscovery.loadable_targets_from_python_file(str(Path(python_file).resolve()), cwd)
        else:
            targets = autodiscovery.loadable_targets_from_python_module(str(module), cwd)
    except (ImportError, dg.DagsterInvariantViolationError) as exc:
        raise ValueError(f"cannot load the definitions of {where}: {exc}") from exc
    from dagster.components.definitions import LazyDefinitions

    found = [t for t in targets if isinstance(t.target_definition, dg.Definitions | LazyDefinitions)]
    if len(found) > 1:
        found = [t for t in found if t.attribute == "defs"] or found
    if len(found) != 1:
        names = [t.attribute for t in found] or [t.attribute for t in targets]
        raise ValueError(f"{where}: expected one dagster.Definitions at module scope (or one named defs): {names}")
    target = found[0].target_definition
    # a `dg` project's `@dg.definitions` function (e.g. load_from_defs_folder): built as Dagster does
    defs = target() if isinstance(target, LazyDefinitions) else target
    if not isinstance(defs, dg.Definitions):
        raise ValueError(f"{where}: {found[0].attribute} gives a {type(defs).__name__}, not a dagster.Definitions")
    return defs


def sync_definitions(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    max_delete: float | str | None = None,
    how: str = "--max-delete 100%",
    warn: Callable[[str], None] | None = None,
) -> list[TableSync]:
    """:func:`~latechunk_dagster.integration.sensors.sync_partitions` for every late-chunked table of
    ``defs`` that has a store sensor (``late_chunk_assets`` over a store with dynamic partitions),
    with the store and LanceDB resources ``defs`` binds (initialized as in a run: ``dg.EnvVar``
    values are read).

    Returns:
        One :class:`TableSync` per table, in the order of ``defs.sensors``.

    Raises:
        ValueError: ``defs`` holds no late-chunk store sensor (a table with ``sensor=False`` or
            documents from an upstream asset has no store to sync), or lacks a resource it names.
        TooManyRemovalsError, IncompleteListingError: as ``sync_partitions`` (tables synced
            before are kept synced; the refused one and those after it are unchanged).
    """
    targets = [s.metadata[SYNC_METADATA].value for s in defs.sensors or () if SYNC_METADATA in (s.metadata or {})]
    if not targets:
        raise ValueError(
            "these definitions hold no late-chunk store sensor: late_chunk_assets(...) over a store builds "
            "one (not with sensor=False, nor with documents= from an upstream asset)"
        )
    bound = dict(defs.resources or {})
    out = []
    for t in targets:
        keys = {"store": t["store_key"], "lancedb": t["lancedb_key"]}
        missing = [k for k in keys.values() if k not in bound]
        if missing:
            table = t["table_names"][0]
            raise ValueError(f"the table {table!r} needs resources {missing}; these definitions bind none")
        with dg.build_resources({k: bound[v] for k, v in keys.items()}) as res:
            added, removed = sync_partitions(
                instance,
                res.store.get_store(),
                dg.DynamicPartitionsDefinition(name=t["partitions"]),
                res.lancedb,
                list(t["table_names"]),
                warn=warn,
                max_delete=max_delete,
                how=how,
            )
        out.append(TableSync(t["partitions"], list(t["table_names"]), added, removed))
    return out
