"""Fingerprints from what a listing says of each file (an object store's: nothing is downloaded),
and the small pieces a store's fingerprints are made of."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePath

from latechunk_dagster.sources.documents import Document, key_of
from latechunk_dagster.sources.layout import Layout
from latechunk_dagster.sources.storage import ObjectStat, version_of


def listing_fingerprints(root: PurePath, tree: Layout) -> dict[str, str]:
    """{shard: fingerprint} of one listing of the directory store at ``root``: hex
    :func:`~latechunk_dagster.sources.documents.key_of` of the shard's sorted (path below ``root``,
    size, modification time in ns) per file (``None`` for what the listing did not say), and its
    gaps (:meth:`~latechunk_dagster.sources.files.DocumentStore.listed_fingerprints`)."""
    out = {}
    for shard, files in sorted(tree.groups.items()):
        stats = [tree.stats.get(f) for f in files]
        entries = [
            [f.relative_to(root).as_posix(), st.size if st else None, st.mtime_ns if st else None]
            for f, st in zip(files, stats)
        ]
        gaps = sorted([g.where, g.sha256] for g in tree.gaps_of.get(shard, ()))
        out[shard] = key_of("listing", shard, sorted(entries), gaps)
    return out


def local_stats(files: Iterable[Path]) -> dict[Path, ObjectStat]:
    """What one ``stat`` says of each local file, in a listing's form: its size and the newer of its
    mtime and ctime in ns (a file replaced by a copy that keeps its mtime, ``cp -p``, has a new ctime);
    ``(None, None)`` for a file that cannot be stat'ed (a read names the error). No file is opened."""
    out = {}
    for file in files:
        try:
            st = os.stat(file)
        except OSError:
            out[file] = ObjectStat(None, None)
            continue
        out[file] = ObjectStat(st.st_size, max(st.st_mtime_ns, st.st_ctime_ns))
    return out


def file_stamp(path: PurePath) -> tuple[object, ...]:
    """The version of a file (:func:`~latechunk_dagster.sources.storage.version_of`: an object's ETag,
    a local file's size, mtime, inode and ctime): whether it changed since an index of it was made.

    Raises:
        OSError: the file cannot be reached.
    """
    return version_of(path)


def without_text(doc: Document) -> Document:
    """``doc`` without its text and chunks (what a fingerprint needs: doc_id and sha256)."""
    return Document(doc.doc_id, "", doc.sha256)
