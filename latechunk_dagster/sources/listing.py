"""What a listing of a store saw: its shards, the entries it did not read, and whether it saw everything.

The deletion rule (rclone's sync rule, applied to partitions): a shard is read as *removed* only by a
listing that saw the whole store. :class:`Listing` carries three things besides the shards:

* ``skipped``: entries that are not read, each named with a reason (a shard name that cannot be a
  partition key, a compressed or other-kind document file, a symbolic-link loop). Each one *holds*
  the shard names it could stand for (:attr:`Listing.held`): a held shard is never removed.
* ``gaps``: what the listing could not see (a directory it could not list, a link whose target is
  gone, a single-file store cut off or unreadable while it was being rewritten). With any gap,
  :meth:`Listing.removed` removes nothing.
* ``shards``: the partition keys. A single-file store with a gap lists none: the shards of half a
  file are not the store's (a cut inside shard ``b`` would list ``a`` and the file stem).

Every path that deletes partitions or their rows asks :meth:`Listing.removed`: Dagster's partition
sync and store sensor, and Airflow's ``ListShardsOperator``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from latechunk_dagster.sources.documents import RejectedRow, is_valid_unicode, printable
from latechunk_dagster.sources.storage import ObjectPath, ObjectStat, list_files

#: Substrings a partition key cannot hold: Dagster's own list (``INVALID_PARTITION_SUBSTRINGS`` in
#: ``dagster._core.definitions.partitions.utils.base``, checked by a test); NUL also stops
#: PostgreSQL, the run storage ``deploy/`` configures.
INVALID_KEY_SUBSTRINGS: tuple[str, ...] = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")

#: Rejections that mean part of a shard was not read (an I/O error, not the format its name says, a
#: JSONL file cut off mid-line, a directory that cannot be listed, a link to nowhere): the rows
#: not read would read as deleted documents, so the partition keeps its old rows.
INCOMPLETE_READS: tuple[str, ...] = ("unreadable_file", "truncated_file", "unlistable", "dangling_link")


def key_problem(name: str) -> str | None:
    """Why ``name`` cannot be a partition key (``None``: it can): empty, not valid UTF-8, or holding a
    substring of :data:`INVALID_KEY_SUBSTRINGS` (named as an escape, e.g. ``'\\x00'``)."""
    if not name:
        return "is empty"
    if not is_valid_unicode(name):
        return "is not valid UTF-8"
    bad = [s for s in INVALID_KEY_SUBSTRINGS if s in name]
    return f"holds {', '.join(repr(s) for s in bad)}" if bad else None


class IncompleteListingError(OSError):
    """The store could not be listed whole, so nothing can be read as removed (:class:`Listing`).

    An ``OSError``: the error of a store that cannot be read, caught where shard errors are."""


@dataclass(frozen=True)
class Listing:
    """One listing of a store (module docstring).

    Attributes:
        shards: the partition keys, sorted.
        skipped: one :class:`RejectedRow` (doc_id ``"*"``) per entry not read, naming it and why.
        held: shard names that a skipped entry stands for; never read as removed.
        gaps: one :class:`RejectedRow` per part of the store the listing could not see.
        fingerprints: an object store's ``{shard: fingerprint}`` from this same listing (keys,
            sizes, modification times: ``DocumentStore.listed_fingerprints``), so a sensor tick
            needs no second listing; ``None`` for a local store (read to fingerprint) or a gap.
    """

    shards: tuple[str, ...]
    skipped: tuple[RejectedRow, ...] = ()
    held: frozenset[str] = field(default_factory=frozenset)
    gaps: tuple[RejectedRow, ...] = ()
    fingerprints: Mapping[str, str] | None = None

    @property
    def complete(self) -> bool:
        """True when the listing saw the whole store."""
        return not self.gaps

    def removed(self, *known: Iterable[str]) -> list[str]:
        """The keys of ``known`` (Dagster's partitions, a table's ``partition`` values...) whose shard
        left the store, sorted: none at all when the listing has a gap, and never a listed or
        held shard."""
        if self.gaps:
            return []
        return sorted(set().union(*(set(k) for k in known)) - set(self.shards) - self.held)

    def incomplete_reason(self) -> str:
        """One line naming every gap (empty when complete)."""
        if not self.gaps:
            return ""
        named = "; ".join(g.detail for g in self.gaps[:5])
        more = f" (and {len(self.gaps) - 5} more)" if len(self.gaps) > 5 else ""
        return f"the store could not be listed whole, so no shard is read as removed: {named}{more}"

    def warnings(self) -> list[str]:
        """One line per skipped entry and per gap, for a log."""
        return [f"skipped: {row.detail}" for row in self.skipped] + [f"not listed: {row.detail}" for row in self.gaps]


@dataclass
class Walk:
    """The regular and other files under a directory store (:func:`walk`), with what was not read.

    ``stats``: what an object store's listing said of each file (size, modification time), the
    fingerprint of an object without reading it; empty for a local directory (read to fingerprint)."""

    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, RejectedRow]] = field(default_factory=list)
    gaps: list[tuple[Path, RejectedRow]] = field(default_factory=list)
    stats: dict[Path, ObjectStat] = field(default_factory=dict)


def walk(root: Path) -> Walk:
    """Every non-hidden file under ``root`` in sorted order, following symbolic links to directories
    (a shard moved to another disk and linked back is read where it is) with a guard against loops.

    An object-store prefix (:class:`~latechunk_dagster.sources.storage.ObjectPath`) is listed in one
    paginated listing (:func:`~latechunk_dagster.sources.storage.list_files`): a listing that fails
    at any page is one gap at ``root`` and lists no file.

    ``files`` holds every entry that is not a directory, special files (a FIFO, a socket) included:
    the reader names those (:func:`is_regular`) instead of opening them, which would block.
    A directory that cannot be listed, and a link whose target is gone, are ``gaps``; a link back to
    a directory on the current path (a loop) is ``skipped``.
    """
    if isinstance(root, ObjectPath):
        files, stats, gaps, skipped = list_files(root)
        return Walk(files, skipped, [(root, row) for row in gaps], stats)  # type: ignore[arg-type]
    out = Walk()
    seen: set[tuple[int, int]] = set()

    def onerror(exc: OSError) -> None:
        path = Path(exc.filename or root)
        where = printable(str(path))
        row = RejectedRow("*", where, "unlistable", f"{where}: cannot be listed: {exc.strerror or exc}")
        out.gaps.append((path, row))

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=True):
        here = os.stat(dirpath)
        seen.add((here.st_dev, here.st_ino))
        keep = []
        for name in sorted(d for d in dirnames if not d.startswith(".")):
            path = Path(dirpath, name)
            try:
                st = os.stat(path)
            except OSError as exc:
                onerror(exc)
                continue
            if (st.st_dev, st.st_ino) in seen or _on_path(path, st):
                where = printable(str(path))
                detail = f"{where}: a symbolic link back to a directory above it (a loop); not read"
                out.skipped.append((path, RejectedRow("*", where, "symlink_loop", detail)))
                continue
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath, name)
            if path.is_symlink() and not path.exists():
                where = printable(str(path))
                target = printable(os.readlink(path))
                detail = f"{where}: a symbolic link whose target {target!r} does not exist (an unmounted disk?)"
                out.gaps.append((path, RejectedRow("*", where, "dangling_link", detail)))
                continue
            out.files.append(path)
    return out


def _on_path(path: Path, st: os.stat_result) -> bool:
    """True when ``path`` is a link to one of its own ancestors (a loop os.walk would descend forever)."""
    if not path.is_symlink():
        return False
    for parent in path.parents:
        try:
            p = os.stat(parent)
        except OSError:
            return False
        if (p.st_dev, p.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def is_regular(path: Path) -> str | None:
    """``None`` for a regular file (after links); else what it is (``"a FIFO"``, ``"a socket"``...)
    for a message: reading a FIFO blocks until a writer comes, so only regular files are opened.
    An object in an object store is a regular file."""
    if isinstance(path, ObjectPath):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # the reader reports the error itself
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device")):
        if test(mode):
            return what
    return "not a regular file"


def not_regular_row(path: Path, doc_id: str, what: str, reason: str) -> RejectedRow:
    """The rejection of a document file that is not a regular file (never opened)."""
    where = printable(str(path))
    return RejectedRow(doc_id, where, reason, f"{where}: {what}, not a regular file; not read")
