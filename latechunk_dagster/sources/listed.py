"""Fingerprints from what a listing says of each file (an object store's: nothing is downloaded),
and the small pieces a store's fingerprints are made of."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePath

from latechunk_dagster.sources.documents import Document, RejectedRow, key_of, printable
from latechunk_dagster.sources.layout import Layout
from latechunk_dagster.sources.storage import version_of
from latechunk_dagster.sources.text_files import UnconvertedFile


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


def stamped_items(
    root: PurePath, read: Iterable[object], documents: Iterable[Path]
) -> Iterator[tuple[Document, str] | RejectedRow]:
    """A local text tree's shard as a fingerprint sees it, converting nothing: ``read`` (its text files'
    items, read with ``defer_conversion``) as they are, a text file whose content is a binary format (an
    :class:`~latechunk_dagster.sources.text_files.UnconvertedFile`) by the sha256 of its bytes, and each
    of ``documents`` (files a converter reads) by one ``stat``: size and the newer of mtime and ctime
    (a copy that keeps the mtime, ``cp -p``, has a new ctime). A shard of text files alone keeps the
    fingerprint it had before document files were fingerprinted by stats."""
    for item in read:
        if isinstance(item, tuple) and isinstance(item[0], UnconvertedFile):
            doc, where = item
            yield Document(doc.doc_id, "", key_of("bytes", hashlib.sha256(doc.data).hexdigest())), where
        else:
            yield item  # type: ignore[misc]
    for file in documents:
        try:
            st = os.stat(file)
            stat: list[int | None] = [st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)]
        except OSError:
            stat = [None, None]  # a read names the error
        yield Document(file.relative_to(root).as_posix(), "", key_of("stat", *stat)), printable(str(file))


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
