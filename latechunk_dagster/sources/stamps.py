"""Source stamps: what a listing says of a text tree's file, recorded on its rows, so that a run neither
fetches nor converts a file whose stamp is unchanged (issue 49 item 2).

A stamp is a string made from what the store gives without reading the file:

* an object store (``s3://``, ``gs://``, ``az://``, listed through ``pyarrow.fs``): ``object:<size>:<mtime_ns>``
  from the listing itself (no request per file). pyarrow's listings carry no ETag or generation, and
  S3's modification times are whole seconds;
* a local file: ``local:<size>:<mtime_ns>:<ctime_ns>:<inode>`` from one ``stat`` (no read). The
  ``ctime`` is set by the kernel at every write and rename and cannot be set back by a user (``touch -d``,
  ``cp -p``, ``rsync -t`` keep or set the mtime, not the ctime), the inode changes when a file is
  replaced by a rename.

**When a stamp is not trusted** (:func:`trusted`): a file replaced within its timestamp's resolution,
with the same size, has the same stamp. A stamp is therefore recorded only when the file's newest
time (``mtime``; ``ctime`` too for a local file) is older than the start of the shard's reads by
more than :data:`STAMP_MARGIN_S` (2 s: S3's whole seconds, FAT's 2 s, HFS+'s 1 s, and up to a
second of clock skew between the store and this machine). A file written later than that is *unsure*:
its rows get no stamp (``NULL``), so the next run fetches it and ``doc_sha256`` decides, as before
stamps (and records its stamp then, once it is old enough). Every reader (``iter_shard``'s other
callers, single-file stores, tables of JSONL/Parquet files) is unchanged: only a run asks to skip.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

from latechunk_dagster.sources.storage import ObjectPath, ObjectStat

#: Seconds a file's newest time must lie before the shard's reads began for its stamp to be trusted
#: (module docstring); ``LATECHUNK_STAMP_MARGIN_S`` overrides it.
STAMP_MARGIN_S = 2.0

#: What a run answers for a file: ``(doc_id, stamp, lineages)`` -> the stored ``doc_sha256`` when the
#: file's rows are current (same stamp, made by one of ``lineages``' converters in every table), else
#: ``None`` (fetch it). ``lineages``: the converter lineages (``"pdf/1 pypdfium2 5.15.0"``) whose rows
#: stand, ``None`` among them for text read as it is.
UnchangedCheck = Callable[[str, str, frozenset[str | None]], str | None]


def stamp_margin_ns() -> int:
    """:data:`STAMP_MARGIN_S` (or ``LATECHUNK_STAMP_MARGIN_S``) in ns.

    Raises:
        ValueError: a setting that is not a number >= 0 (naming it)."""
    text = os.environ.get("LATECHUNK_STAMP_MARGIN_S", "").strip()
    try:
        seconds = float(text) if text else STAMP_MARGIN_S
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"LATECHUNK_STAMP_MARGIN_S={text!r}: expected seconds >= 0")
    return int(seconds * 1e9)


def trusted(newest_ns: int | None, reads_start_ns: int, margin_ns: int) -> bool:
    """Whether a stamp whose newest time is ``newest_ns`` tells a change (module docstring): known, and
    older than ``reads_start_ns`` by more than ``margin_ns``."""
    return newest_ns is not None and newest_ns < reads_start_ns - margin_ns


def source_stamp(file: PurePath, listed: ObjectStat | None, reads_start_ns: int, margin_ns: int) -> str | None:
    """The stamp of ``file`` (module docstring), or ``None`` when it is unsure or unknown.

    Args:
        file: a text tree's file (an :class:`~latechunk_dagster.sources.storage.ObjectPath` or a local path).
        listed: what the object store's listing said of it (``None``: not listed; local files are stat'ed).
        reads_start_ns: when the shard's reads began (``time.time_ns()``), before any of them.
        margin_ns: :func:`stamp_margin_ns`.
    """
    if isinstance(file, ObjectPath):
        if listed is None or listed.size is None or not trusted(listed.mtime_ns, reads_start_ns, margin_ns):
            return None
        return f"object:{listed.size}:{listed.mtime_ns}"
    try:
        st = os.stat(Path(file))
    except OSError:
        return None  # the read names the error
    if not trusted(max(st.st_mtime_ns, st.st_ctime_ns), reads_start_ns, margin_ns):
        return None
    return f"local:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


@dataclass(frozen=True)
class UnchangedFile:
    """A text tree's file not fetched: its stamp equals its rows' (their ``doc_sha256`` is ``sha256``).

    What :class:`ShardItems` yields in place of the document once a run asked it to
    (:meth:`ShardItems.skip_unchanged`); the run counts it as skipped and keeps its rows."""

    doc_id: str
    sha256: str
    where: str


class ShardItems:
    """A shard's items (:meth:`~latechunk_dagster.sources.files.DocumentStore.iter_shard`), read lazily.

    Iterating it without a call of :meth:`skip_unchanged` reads every file, as before stamps.

    Args:
        make: builds the items' iterator, given the run's check (``None``: fetch every file).
    """

    def __init__(self, make: Callable[[UnchangedCheck | None], Iterator]) -> None:
        self._make = make
        self._check: UnchangedCheck | None = None
        self._items: Iterator | None = None

    def skip_unchanged(self, check: UnchangedCheck) -> None:
        """Yield an :class:`UnchangedFile` (neither fetched nor converted) for each file ``check`` finds current.

        Raises:
            RuntimeError: called after the first item was read."""
        if self._items is not None:
            raise RuntimeError("skip_unchanged: the shard is being read already; call it before the first item")
        self._check = check

    def __iter__(self) -> ShardItems:
        return self

    def __next__(self) -> object:
        if self._items is None:
            self._items = self._make(self._check)
        return next(self._items)

    def close(self) -> None:
        """Stop the reads (the generator's ``close``: fetches in flight finish)."""
        if self._items is not None and hasattr(self._items, "close"):
            self._items.close()  # type: ignore[union-attr]


def reads_start_ns() -> int:
    """Now, in ns since the epoch: when a shard's reads begin (:func:`source_stamp`)."""
    return time.time_ns()
