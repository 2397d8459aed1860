"""A cheap estimate of a store's rows, for progress: Parquet footers, JSONL newlines, text files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from latechunk_dagster.sources.listing import is_regular
from latechunk_dagster.sources.readers import open_jsonl
from latechunk_dagster.sources.storage import open_input


def count_rows(kind: str, files: Sequence[Path]) -> int:
    """The rows of ``files`` of a store of ``kind`` (``"text"``: one per file; ``"parquet"``: the
    footers' row counts; ``"jsonl"``: newlines, read 1 MiB at a time). A file that is not regular or
    cannot be read counts 0 (the run names it)."""
    if kind == "text":
        return len(files)
    total = 0
    for file in files:
        if is_regular(file) is not None:
            continue
        try:
            if kind == "parquet":
                import pyarrow.parquet as pq

                with open_input(file, random_access=True) as handle:
                    total += pq.ParquetFile(handle).metadata.num_rows
            else:
                with open_jsonl(file) as handle:
                    total += sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
        except (OSError, ValueError):
            continue
    return total
