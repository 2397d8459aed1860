"""What a store path holds: its kind (text tree, JSONL, Parquet), detected from the file suffix or
the files in the directory (:meth:`~latechunk_dagster.sources.files.DocumentStore.from_path`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import PurePath

from latechunk_dagster.sources.documents import printable
from latechunk_dagster.sources.layout import TABLE_SUFFIXES, TREE_SUFFIXES, kind_of
from latechunk_dagster.sources.listing import IncompleteListingError, Walk, is_regular, walk
from latechunk_dagster.sources.storage import first_line, kind_of_location, location, public_uri


@dataclass(frozen=True)
class DetectedStore:
    """A store path and what it holds.

    Attributes:
        path: the local path or :class:`~latechunk_dagster.sources.storage.ObjectPath`.
        kind: ``"text"``, ``"jsonl"`` or ``"parquet"``.
        single_file: one ``.jsonl`` / ``.parquet`` file (not a directory).
        found: a directory's listing made to detect the kind (``None`` for a single file).
    """

    path: PurePath
    kind: str
    single_file: bool
    found: Walk | None = None


def detect_store(
    path: str | PurePath, storage_options: Mapping[str, str] | None = None, converted: Collection[str] = ()
) -> DetectedStore:
    """The store at ``path`` (local, or an object-store URI) and its kind (``converted``: the suffixes
    the store's converters read, text-tree files as ``.pdf`` is: :func:`~latechunk_dagster.sources.layout.kind_of`).

    A directory of one table kind (``.jsonl`` or ``.parquet``) may also hold ``.txt``/``.md`` files
    at its top level (a dataset card, a README): the store is of the table kind.

    Raises:
        FileNotFoundError: ``path`` does not exist (nothing under an object-store prefix).
        IncompleteListingError: an object store that cannot be listed, so its kind cannot be told.
        ValueError: a file that is not a regular ``.jsonl``/``.parquet`` file, or a directory
            holding no supported file or more than one kind of them (naming a file of each);
            bad ``storage_options`` (naming the key).
    """
    try:
        path = location(path, storage_options)
        what = kind_of_location(path)
    except OSError as exc:  # e.g. the bucket's region could not be resolved: named without credentials
        where = path if isinstance(path, PurePath) else public_uri(str(path))
        raise IncompleteListingError(f"{where}: cannot be reached: {first_line(exc)}") from None
    if what == "missing":
        raise FileNotFoundError(f"document store not found: {path}")
    if what == "file":
        kind = kind_of(path) if kind_of(path) in TABLE_SUFFIXES.values() else None
        what = is_regular(path)
        if kind is None or what is not None:
            why = f"it is {what}" if what else "expected a .jsonl (.jsonl.gz, .jsonl.zst) or .parquet file"
            raise ValueError(f"unknown document store kind for file {path}: {why}")
        return DetectedStore(path, kind, single_file=True)
    found = walk(path)
    unseen = [row.detail for where, row in found.gaps if where == path]
    if unseen and not found.files:
        raise IncompleteListingError(unseen[0])
    kinds = {file: kind for file in found.files if (kind := kind_of(file, converted))}
    tables = set(kinds.values()) - {"text"}
    if len(tables) == 1 and all(f.parent == path for f, k in kinds.items() if k == "text"):
        return DetectedStore(path, tables.pop(), False, found)  # text at the top: a dataset card
    if len(set(kinds.values())) != 1:
        # a file of each kind; of the text files, one below the top (the one a table store cannot hold)
        order = sorted(kinds, key=lambda f: (kinds[f] == "text" and f.parent == path,))
        examples = {k: f for f in reversed(order) for k in (kinds[f],)}
        found_kinds = ", ".join(f"{k} ({printable(str(examples[k]))})" for k in sorted(examples)) or "none"
        raise ValueError(
            f"unknown document store kind for directory {path}: expected only text and document files "
            f"({'/'.join(TREE_SUFFIXES)}), only .jsonl or only .parquet files (a table store may hold "
            f"text and document files at its top level), "
            f"found kinds: {found_kinds}"
        )
    return DetectedStore(path, kinds.popitem()[1], False, found)
