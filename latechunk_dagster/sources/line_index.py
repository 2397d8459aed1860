"""Where each shard's lines are in a single JSONL file: one scan, so a run over many partitions
reads each shard's lines only (:meth:`~latechunk_dagster.sources.files.DocumentStore.iter_shards`)."""

from __future__ import annotations

from pathlib import Path

from latechunk_dagster.sources.documents import RejectedRow
from latechunk_dagster.sources.listed import file_stamp
from latechunk_dagster.sources.readers import jsonl_lines, shard_of_row

#: {shard: [(line number from 1, byte offset), ...]} of a JSONL file, in file order.
LineIndex = dict[str, list[tuple[int, int]]]


def shard_lines(path: Path, stem: str) -> tuple[LineIndex, tuple[object, ...]]:
    """The lines of each shard of the JSONL file ``path`` (a row without a good ``shard``, and a line
    that is not a row, belong to ``stem``), and the file's version when the scan began
    (:func:`~latechunk_dagster.sources.listed.file_stamp`). No text is kept.

    A file that cannot be read (or is replaced while it is scanned): ``({}, ())`` (each shard then
    reads the file itself and records why it cannot).
    """
    index: LineIndex = {}
    try:
        stamp = file_stamp(path)
        for number, offset, row in jsonl_lines(path):
            shard = stem if isinstance(row, RejectedRow) else shard_of_row(row, stem)[0]
            index.setdefault(shard, []).append((number, offset))
    except OSError:
        return {}, ()
    return index, stamp
