"""A document store's files: where the store is, its kind, its directory layout and a single file's rows,
item by item (:class:`StoreFiles`). :class:`~latechunk_dagster.sources.files.DocumentStore` builds its public
reads (shards, listings, fingerprints, counts) on them; the store's rules are in that module's docstring."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePath

from latechunk_dagster.sources.chunk_column import check_chunks_column
from latechunk_dagster.sources.converters import ConversionLimits, Converter, Converters
from latechunk_dagster.sources.converters.registry import store_converters
from latechunk_dagster.sources.documents import RejectedRow, UnknownShardError, printable
from latechunk_dagster.sources.layout import Layout, directory_layout, shard_of
from latechunk_dagster.sources.listing import Walk
from latechunk_dagster.sources.prefetch import read_concurrency as read_concurrency_of
from latechunk_dagster.sources.readers import Row, jsonl_rows, parquet_rows, shard_of_row
from latechunk_dagster.sources.stamps import UnchangedCheck
from latechunk_dagster.sources.storage import ObjectPath, ObjectStat, kind_of_location
from latechunk_dagster.sources.store_rows import Item, document_columns, located_document, tree_items

__all__ = ["StoreFiles"]


class StoreFiles:
    """The files of one document store and their items (the constructor's arguments, attributes and errors:
    :class:`~latechunk_dagster.sources.files.DocumentStore`, which is this class with its public reads)."""

    def __init__(
        self,
        path: PurePath,
        kind: str,
        chunks_column: str | None = None,
        limits: ConversionLimits | None = None,
        *,
        single_file: bool | None = None,
        converters: Converters | Mapping[str, Converter | str] | None = None,
        ocr: bool = False,
        read_concurrency: int | None = None,
    ) -> None:
        check_chunks_column(chunks_column)
        if chunks_column is not None and kind == "text":
            why = "has no columns (JSONL and Parquet stores do)"
            raise ValueError(f"chunks_column {chunks_column!r}: the text tree {path} {why}")
        self.path = path
        self.kind = kind
        self.uri = str(path)
        self.chunks_column = chunks_column
        self.limits = ConversionLimits.from_env() if limits is None else limits
        self.converters = store_converters(converters, ocr=ocr)
        where = "object" if isinstance(path, ObjectPath) else "local"
        self.read_concurrency = read_concurrency_of(where, read_concurrency)
        self._sizes: Mapping[PurePath, ObjectStat] = {}
        self._single = single_file
        self._opened: Walk | None = None

    def _is_file(self) -> bool:
        """A single-file store (a local one is looked at each time: it may be replaced by a directory)."""
        if isinstance(self.path, ObjectPath):
            if self._single is None:
                self._single = kind_of_location(self.path) == "file"
            return self._single
        return Path(self.path).is_file()

    def __repr__(self) -> str:
        chunks = f", chunks_column={self.chunks_column!r}" if self.chunks_column is not None else ""
        return f"DocumentStore(kind={self.kind!r}, uri={self.uri!r}{chunks})"

    # -- layout ----------------------------------------------------------------------------------

    def _raw_shard(
        self, shard: str, defer_conversion: bool = False, unchanged: UnchangedCheck | None = None
    ) -> Iterator[Item]:
        if self._is_file():
            matched = False
            for row_shard, item in self._single_file_rows():
                if row_shard == shard:
                    matched = True
                    yield item
            if not matched and shard not in self.shards():
                raise UnknownShardError(f"unknown shard {shard!r} in document store {self.uri}")
            return
        layout = self._layout()
        files = layout.groups.get(shard)
        if files is None:
            raise UnknownShardError(f"unknown shard {shard!r} in document store {self.uri}")
        yield from self._files_items(files, layout.gaps_of.get(shard, ()), defer_conversion, unchanged)

    def _files_items(
        self,
        files: list[Path],
        gaps: Iterable[RejectedRow] = (),
        defer_conversion: bool = False,
        unchanged: UnchangedCheck | None = None,
    ) -> Iterator[Item]:
        """Directory stores: :func:`~latechunk_dagster.sources.store_rows.tree_items` of ``files``."""
        return tree_items(
            self.path, self.kind, files, gaps, limits=self.limits, chunks_column=self.chunks_column,
            defer_conversion=defer_conversion, converters=self.converters, workers=self.read_concurrency,
            sizes=self._sizes, unchanged=unchanged,
        )  # fmt: skip

    @property
    def _stem(self) -> str:
        """A single-file store's default shard: its name without the document suffixes (``a.jsonl.gz``: ``a``)."""
        return shard_of(self.path.parent, "jsonl", self.path)

    def _scope(self, shard: str) -> str:
        return f" in shard {shard!r} of document store {printable(self.uri)}"

    def _layout(self) -> Layout:
        """A directory store's files by shard, with the entries not read (:meth:`listing`)."""
        found, self._opened = self._opened, None
        if not isinstance(self.path, ObjectPath):
            found = None  # a local walk is cheap: every call sees the current files
        layout = directory_layout(self.path, self.kind, found, self.converters.suffixes)
        self._sizes = layout.stats  # the listing's sizes bound the bytes a shard's reads hold
        return layout

    def _single_file_rows(
        self, columns: tuple[str, ...] | None = None, rows: Iterable[Row | RejectedRow] | None = None
    ) -> Iterator[tuple[str, Item]]:
        """Single-file store: (shard, document or rejection) per row (of ``rows``, default the file's;
        ``columns``, default the document's and ``shard``)."""
        stem = self._stem
        columns = (*document_columns(self.chunks_column), "shard") if columns is None else columns
        if rows is None:
            rows = jsonl_rows(self.path) if self.kind == "jsonl" else parquet_rows(self.path, columns)
        for row in rows:
            if isinstance(row, RejectedRow):
                yield stem, row
                continue
            shard, bad = shard_of_row(row, stem)
            if bad is not None:
                yield shard, bad
            elif "text" not in columns:
                yield shard, row  # type: ignore[misc]  # shards(): only the shard matters
            else:
                yield shard, located_document(row, self.chunks_column)
