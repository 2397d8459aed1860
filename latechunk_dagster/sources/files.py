"""Document stores: a text tree, JSONL or Parquet, split into shards (the partition keys), read as streams.

Store kinds (:attr:`DocumentStore.kind`), detected by :meth:`DocumentStore.from_path`, on a local
disk or in an object store (``s3://``, ``gs://``, ``az://``: :mod:`latechunk_dagster.sources.storage`,
where every file is opened):

* ``"text"``: a directory tree of ``.txt`` / ``.md`` files and document files (``.pdf``, ``.docx``,
  ``.pptx``, ``.html`` / ``.htm``, converted to Markdown: :mod:`latechunk_dagster.sources.converters`).
  Shard = first-level subdirectory name (files directly in the root: shard ``"_root"``); doc_id =
  path relative to the root, ``/``-separated. A document file the converters refuse is a
  ``RejectedRow`` of its reason (``encrypted``, ``no_text_layer``, ``unreadable_file``,
  ``too_large``) naming the file; the shard's other documents are read as usual.
* ``"jsonl"``: one ``.jsonl`` (or ``.jsonl.gz``, ``.jsonl.zst``) file, or a directory of them
  (searched recursively).
* ``"parquet"``: one ``.parquet`` file, or a directory of them (searched recursively).

JSONL / Parquet rows have an ``id`` (string; integers are turned into strings) and a ``text``
(string) column. In a directory the shard is the file's path relative to the directory without
its suffix (``"2024/jan"``); in a single file the shard is the row's ``shard`` column if the file
has one (a row with a null ``shard``, or one that is not valid JSON, belongs to the file stem's
shard), else the file stem.

:meth:`DocumentStore.iter_shard` yields a shard's documents one at a time (text trees file by
file, JSONL line by line, Parquet by record batches: :mod:`latechunk_dagster.sources.readers`),
so memory is bounded by one file, line or batch, not by the shard.

Rules, the same for every store kind:

* **One bad row does not take its neighbours down.** A row that does not make a document
  (invalid JSON, missing/null/bad ``id``, ``text`` null or not a string, bad ``shard``) is yielded
  as a :class:`RejectedRow` naming the file, the row (from 1) and the reason; every other row of
  the shard, and every other shard, is read as usual. ``shards()`` never raises for bad rows.
* **Duplicate ids**: the first row with a doc_id (in file order) is the document; every later
  row with the same doc_id in the same shard is a ``RejectedRow`` (reason ``duplicate_id``, naming
  its row and the first one's). The shard is not sunk.
* **Byte order marks**: a leading U+FEFF of a file, a JSONL line or a text value is not text and is
  removed (like ``utf-8-sig``); ``text``, ``sha256`` and char ranges refer to the text without it.
* Files are read as UTF-8. Text that is not valid Unicode is kept, not dropped: undecodable bytes
  become lone surrogates (``errors="surrogateescape"``), JSON ``"\\ud800"`` stays as it is, so the
  pipeline can reject the document with a reason (``text.encode("utf-8")`` fails on it).
* Hidden files and directories (name starting with ``.``) are ignored.
* **Names that are not valid UTF-8** (a Latin-1 ``caf\\xe9`` from an old archive): a shard whose
  name is not valid Unicode cannot be a partition key, so it is not one of :meth:`~DocumentStore.shards`;
  :meth:`~DocumentStore.bad_shards` names each (escaped by
  :func:`~latechunk_dagster.sources.documents.printable`) with the reason, and ``sync_partitions``,
  the CLI and the sensor report them while adding every other shard. A file of a good shard whose
  path (doc_id) is not valid UTF-8, or a JSONL / Parquet ``id`` that is not valid Unicode, is a ``RejectedRow``
  (reason ``bad_id``) naming the file / row and the escaped id; its neighbours are read as usual.
* **Repeated JSON keys**: a JSONL object that gives a key twice is a ``RejectedRow`` (reason
  ``duplicate_key``), never read with one of its values.
* **A document's own chunks** (``chunks_column``, JSONL / Parquet only): each row's value of that
  column becomes :attr:`Document.chunks` (shape rule: :mod:`latechunk_dagster.sources.chunk_column`),
  and the document's ``sha256`` covers them, so editing a row's chunks re-encodes it. A value of the
  wrong shape (null or missing included) is a ``bad_chunks`` row; a Parquet file without the column
  is ``unreadable_file``, as one without ``text`` (the partition keeps its old rows). Without
  ``chunks_column`` every ``Document.chunks`` is ``None`` and a column named so is not read.
* **One pass per store**: :meth:`DocumentStore.fingerprints` reads a single-file store once for all
  of its shards (a sensor tick is linear in rows, not shards x rows); directory stores list their
  files once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePath

from latechunk_dagster.sources.converters import ConversionLimits, Converter, Converters
from latechunk_dagster.sources.converters.registry import store_converters
from latechunk_dagster.sources.counting import count_rows
from latechunk_dagster.sources.detection import detect_store
from latechunk_dagster.sources.documents import (
    Document,
    RejectedRow,
    UnknownShardError,
    fingerprint_of,
    first_of_each_id,
    key_of,
    printable,
    text_sha256,
)
from latechunk_dagster.sources.layout import ROOT_SHARD, TEXT_SUFFIXES
from latechunk_dagster.sources.line_index import shard_lines
from latechunk_dagster.sources.listed import file_stamp, listing_fingerprints, stamped_items, without_text
from latechunk_dagster.sources.listing import INCOMPLETE_READS, IncompleteListingError, Listing
from latechunk_dagster.sources.readers import (
    Row,
    is_compressed,
    jsonl_rows,
)
from latechunk_dagster.sources.stamps import ShardItems, UnchangedFile
from latechunk_dagster.sources.storage import ObjectPath, stat_of
from latechunk_dagster.sources.store_files import StoreFiles
from latechunk_dagster.sources.text_files import UnconvertedFile

__all__ = [
    "ROOT_SHARD",
    "TEXT_SUFFIXES",
    "Document",
    "DocumentStore",
    "IncompleteListingError",
    "Listing",
    "RejectedRow",
    "fingerprint_of",
    "text_sha256",
]


class DocumentStore(StoreFiles):
    """Reads the documents of one store, shard by shard. Nothing is cached: every call sees the
    current files, so new or changed documents show up (e.g. in a sensor). (One exception: the
    listing :meth:`from_path` makes of an object store serves the first call that lists.)

    Attributes:
        kind: ``"text"``, ``"jsonl"`` or ``"parquet"``.
        uri: absolute path of the store (file or directory) as a string, or its URI
            (``s3://bucket/prefix``, never with credentials).
        path: the same as a :class:`~pathlib.Path` (an
            :class:`~latechunk_dagster.sources.storage.ObjectPath` in an object store).
        chunks_column: the column (JSONL key) holding each document's own chunks, or ``None``
            (module docstring).
        converters: which converter reads which file suffix of a text tree
            (:func:`~latechunk_dagster.sources.converters.registry.store_converters` of the
            ``converters`` and ``ocr`` given: the built-ins, the entry point group's, these; docs/documents.md).

    Raises:
        ValueError: ``chunks_column`` on a text tree (it has no columns), or naming ``id``,
            ``text`` or ``shard``; ``ocr`` with ``.pdf`` read by a converter of one's own.
        TypeError: a ``converters`` value that is not a converter.
        RuntimeError: ``ocr`` without Tesseract installed (naming what to install).
    """

    @classmethod
    def from_path(
        cls,
        path: str | PurePath,
        chunks_column: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        limits: ConversionLimits | None = None,
        *,
        converters: Converters | Mapping[str, Converter | str] | None = None,
        ocr: bool = False,
        read_concurrency: int | None = None,
    ) -> DocumentStore:
        """Open a store, detecting its kind from the file suffix or the files in the directory.

        ``path``: a local path, or an ``s3://``, ``gs://``, ``az://`` / ``abfs://`` URI (a prefix of
        objects is a directory): :func:`~latechunk_dagster.sources.storage.location`.
        ``storage_options``: the object store's settings in LanceDB's form (keys, endpoint, region;
        :data:`~latechunk_dagster.sources.storage.OPTION_KEYS`); none: each cloud's standard chain
        (``AWS_*`` variables including ``AWS_ENDPOINT_URL``, instance roles). They are held by the
        store's filesystem only: never in :attr:`uri`, a message or a row.

        A directory of one table kind (``.jsonl`` or ``.parquet``) may also hold ``.txt``/``.md``
        files at its top level (a dataset card, a README): they are not documents, and
        :meth:`listing` names them as skipped.

        ``chunks_column``: the column holding each document's own chunks (see the class).
        ``limits``: what a text tree's file may cost to read (size, unpacked size of a DOCX/PPTX;
        default :meth:`~latechunk_dagster.sources.converters.ConversionLimits.from_env`).
        ``converters``, ``ocr``: a text tree's own converters by suffix (``{".epub": MyEpub()}``), and
        OCR of scanned PDF pages (see the class); a suffix they read makes a file a text-tree document.
        ``read_concurrency``: a text tree's files fetched at once (default by where the store is:
        :func:`~latechunk_dagster.sources.prefetch.read_concurrency`; 1: one at a time).

        Raises:
            FileNotFoundError: ``path`` does not exist (nothing under an object-store prefix).
            IncompleteListingError: an object store that cannot be listed (unreachable, refused,
                throttled, a listing cut short), so its kind cannot be told.
            ValueError: a file that is not a regular ``.jsonl``/``.parquet`` file, or a directory
                holding no supported file or more than one kind of them (naming a file of each);
                a ``chunks_column`` the store cannot have (see the class); ``storage_options``
                that are not known or not for this cloud (naming the key); and as the class.
            TypeError, RuntimeError: as the class (``converters``, ``ocr``).
        """
        own = store_converters(converters, ocr=ocr)
        found = detect_store(path, storage_options, own.suffixes)
        store = cls(
            found.path, found.kind, chunks_column, limits, single_file=found.single_file, converters=own,
            read_concurrency=read_concurrency,
        )  # fmt: skip
        store._opened = found.found  # an object store's first listing serves the first call that lists
        return store

    # -- shards ----------------------------------------------------------------------------------

    def shards(self) -> list[str]:
        """Sorted shard names (partition keys): :attr:`Listing.shards` of :meth:`listing`. Bad rows
        do not raise (see the module docstring)."""
        return list(self.listing().shards)

    def listing(self) -> Listing:
        """The store's shards with what was not read and what could not be seen
        (:class:`~latechunk_dagster.sources.listing.Listing`: the rule that decides what is removed).

        * a directory store: files listed once, links to directories followed; a shard whose name
          cannot be a partition key (not valid UTF-8, a NUL, a newline, ``...``: Dagster's list) is
          skipped and named; so is a file that looks like a document but is not of the store's kind
          (``a.jsonl.gz``, a ``README.md`` beside JSONL files), which holds the shard it stands for;
          a directory that cannot be listed or a link to nowhere is a gap.
        * a single-file store: scanned row by row (only its ``shard`` column); a file that is cut off
          or unreadable (half written) is a gap, and then no shard is listed. A ``shard`` value that
          cannot be a partition key puts its row into the file stem's shard as a ``bad_shard`` row.
        """
        if self._is_file():
            shards: set[str] = set()
            gaps = []
            for shard, item in self._single_file_rows(columns=("shard",)):
                if isinstance(item, RejectedRow) and item.reason in INCOMPLETE_READS:
                    gaps.append(item)
                shards.add(shard)
            if gaps:
                return Listing((), gaps=tuple(gaps))
            return Listing(tuple(sorted(shards or {self._stem})))
        layout = self._layout()
        listed = (
            listing_fingerprints(self.path, layout) if isinstance(self.path, ObjectPath) and not layout.gaps else None
        )
        return Listing(
            tuple(sorted(layout.groups)), tuple(layout.skipped), frozenset(layout.held), tuple(layout.gaps), listed
        )

    def bad_shards(self) -> list[RejectedRow]:
        """Every entry :meth:`listing` skipped (``doc_id`` ``"*"``), in path order: shards whose name
        cannot be a partition key (reason ``bad_shard_name``), other-kind document files
        (``other_kind``), links that loop (``symlink_loop``). ``where`` is the entry, escaped with
        :func:`~latechunk_dagster.sources.documents.printable`. Single-file stores: ``[]`` (a bad
        ``shard`` value is a ``bad_shard`` row of the file stem's shard)."""
        return list(self.listing().skipped)

    def iter_shard(self, shard: str, *, defer_conversion: bool = False) -> ShardItems:
        """The shard's documents one at a time, in file / row order, with a :class:`RejectedRow` in
        place of each row that does not make a document (later duplicates of a doc_id included).

        Args:
            defer_conversion: a PDF, DOCX, PPTX or HTML file comes as its
                :class:`~latechunk_dagster.sources.text_files.UnconvertedFile` (its bytes, read once),
                for a consumer that converts elsewhere (:func:`~latechunk_dagster.pipeline.materialize_partition`
                converts in its host worker processes). Default: converted here, in the calling thread.

        Returns:
            A :class:`~latechunk_dagster.sources.stamps.ShardItems`: a run may first ask it to skip the
            text-tree files whose source stamps equal their rows' (``skip_unchanged``: neither fetched
            nor converted, each an :class:`~latechunk_dagster.sources.stamps.UnchangedFile`).

        Raises:
            KeyError: no shard of that name (raised on the first ``next()`` for directory stores,
                after the scan for a single-file store).
        """
        scope = self._scope(shard)
        return ShardItems(lambda check: first_of_each_id(self._raw_shard(shard, defer_conversion, check), scope))

    def read_shard_with_rejections(self, shard: str) -> tuple[list[Document], list[RejectedRow]]:
        """All of :meth:`iter_shard` at once: the documents sorted by doc_id, and the rejected rows."""
        docs: list[Document] = []
        rejected: list[RejectedRow] = []
        for item in self.iter_shard(shard):
            (docs if isinstance(item, Document) else rejected).append(item)  # type: ignore[arg-type]
        return sorted(docs, key=lambda d: d.doc_id), rejected

    def iter_shards(
        self, shards: Sequence[str], *, defer_conversion: bool = False
    ) -> Iterator[tuple[str, Iterator[Document | RejectedRow | UnconvertedFile | UnchangedFile]]]:
        """``(shard, iter_shard(shard))`` for each of ``shards``, in order, without reading a
        single-file store once per shard (shards x rows in a run over many partitions): a single
        JSONL file is scanned once for where each shard's lines are (line numbers and byte offsets,
        no text kept), then each shard reads only its lines. A file changed since that scan is
        read whole for the shard, as :meth:`iter_shard` does. A directory store is listed once and
        each shard reads only its files; a single Parquet file is still read once per shard.

        A file that cannot be read is one ``unreadable_file`` row per shard, as with :meth:`iter_shard`;
        ``defer_conversion`` as there.
        """
        if not self._is_file():
            tree = self._layout()  # the tree is listed once, not once per shard
            for shard in shards:
                if shard in tree.groups:
                    files, gaps, scope = tree.groups[shard], tree.gaps_of.get(shard, ()), self._scope(shard)
                    yield (
                        shard,
                        ShardItems(
                            lambda check, f=files, g=gaps, s=scope: first_of_each_id(
                                self._files_items(f, g, defer_conversion, check), s
                            )
                        ),
                    )
                else:
                    yield shard, self.iter_shard(shard, defer_conversion=defer_conversion)  # KeyError on next()
            return
        if self.kind != "jsonl" or len(shards) < 2 or is_compressed(self.path):  # no byte offsets in a stream
            for shard in shards:
                yield shard, self.iter_shard(shard, defer_conversion=defer_conversion)
            return
        index, stamp = shard_lines(self.path, self._stem)
        for shard in shards:
            if shard in index:
                yield shard, self._indexed_shard(shard, index[shard], stamp)
            else:
                yield shard, self.iter_shard(shard, defer_conversion=defer_conversion)  # unknown, or an empty file's

    def read_shard(self, shard: str) -> list[Document]:
        """The documents of one shard, sorted by doc_id (rejected rows left out: see
        :meth:`iter_shard` / :meth:`read_shard_with_rejections` for them).

        Raises:
            KeyError: no shard of that name.
        """
        return self.read_shard_with_rejections(shard)[0]

    def count_documents(self, shard: str) -> int | None:
        """A cheap estimate of the shard's rows, for progress: Parquet footers, JSONL newlines,
        text files; ``None`` for a single-file store with a ``shard`` column (unknown without a scan)."""
        return self.count_shards([shard])[shard]

    def count_shards(self, shards: Sequence[str]) -> dict[str, int | None]:
        """:meth:`count_documents` of each of ``shards``, listing a directory store once (not once
        per shard, as a run over many partitions would). JSONL in an object store: ``None`` (its
        newlines cannot be counted without downloading the object a run then reads)."""
        if isinstance(self.path, ObjectPath) and self.kind == "jsonl":
            return dict.fromkeys(shards)
        if self._is_file():
            first = next(iter(self._single_file_rows(("shard",))), None)
            if first is None or (isinstance(first[1], Row) and "shard" in first[1].values):
                return dict.fromkeys(shards)
            return dict.fromkeys(shards, count_rows(self.kind, [self.path]))
        groups = self._layout().groups
        return {shard: count_rows(self.kind, groups.get(shard, [])) for shard in shards}

    def shard_fingerprint(self, shard: str) -> str:
        """Hex sha256 over the sorted (doc_id, sha256) pairs of a shard (rejected rows included):
        changes iff a document of the shard is added, removed, renamed or edited, or a bad row
        appears, changes or is fixed. Streams (only) that shard's files (a whole single file).

        In an object store nothing is read: the fingerprint is :meth:`listed_fingerprints`'; nor in a
        local text tree: its files' stamps (:meth:`fingerprints`)."""
        if isinstance(self.path, ObjectPath) or (self.kind == "text" and not self._is_file()):
            every = self.listed_fingerprints() if isinstance(self.path, ObjectPath) else self._tree_fingerprints(shard)
            if shard not in every:
                raise UnknownShardError(f"unknown shard {shard!r} in document store {self.uri}")
            return every[shard]
        return fingerprint_of(self.iter_shard(shard))

    def fingerprints(self) -> dict[str, str]:
        """{shard: :meth:`shard_fingerprint`} for every shard of :meth:`shards`, in one pass: a
        single-file store is read once for all its shards (memory: a doc_id and a hash per row, no
        text), a directory store's files are listed once and each read once. Time is linear in rows.
        In an object store: :meth:`listed_fingerprints` (one listing, no object read). A local text
        tree: its text files by content, as above, and its document files (PDF, DOCX, PPTX, HTML, a
        converter's own suffixes) by one ``stat`` each (size; the newer of mtime and ctime, so a copy
        that keeps the mtime is a change), never converted: a sensor tick opens no PDF (issue 47 kind 1,
        issue 49 item 2). A touched document file is a new fingerprint; its run skips it by ``doc_sha256``.

        Raises:
            OSError: the store's files cannot be listed.
        """
        if isinstance(self.path, ObjectPath):
            return self.listed_fingerprints()
        if not self._is_file() and self.kind == "text":
            return self._tree_fingerprints()
        if not self._is_file():
            tree = self._layout()
            return {
                shard: fingerprint_of(
                    first_of_each_id(self._files_items(files, tree.gaps_of.get(shard, ())), self._scope(shard))
                )
                for shard, files in sorted(tree.groups.items())
            }
        groups: dict[str, list[tuple[Document, str] | RejectedRow]] = {}
        for shard, item in self._single_file_rows():
            # only (doc_id, sha256, where) are needed: drop the text
            groups.setdefault(shard, []).append(
                item if isinstance(item, RejectedRow) else (without_text(item[0]), item[1])
            )
        if not groups:
            groups[self._stem] = []
        return {shard: fingerprint_of(first_of_each_id(rows, self._scope(shard))) for shard, rows in groups.items()}

    def listed_fingerprints(self) -> dict[str, str]:
        """{shard: fingerprint} from what one listing says of each file, reading no object: hex
        :func:`~latechunk_dagster.sources.documents.key_of` of the shard's sorted (path below the
        root, size, modification time in ns) per file, and its gaps. Changes iff a file of the
        shard is added, removed, renamed or rewritten (every PUT sets a new modification time; a
        rewrite of the same size in the same second as the last is seen at the next change:
        S3 times are whole seconds and pyarrow's listing has no ETag). A single-file store: its
        (size, mtime) for each of its shards (listed by a scan of the ``shard`` column).

        Raises:
            IncompleteListingError: the listing failed (an error, throttling, a listing cut short).
            OSError: the store's file cannot be reached.
        """
        if self._is_file():
            st = stat_of(self.path)
            return {shard: key_of("file", shard, st.size, st.mtime_ns) for shard in self.shards()}
        tree = self._layout()
        if tree.gaps:  # an object store's listing failed: no shard can be told unchanged (or gone)
            raise IncompleteListingError(Listing((), gaps=tuple(tree.gaps)).incomplete_reason())
        return listing_fingerprints(self.path, tree)

    def _tree_fingerprints(self, shard: str | None = None) -> dict[str, str]:
        """A local text tree's :meth:`fingerprints` (of ``shard`` alone, when given): text files by
        content, document files (a converter reads the suffix) by their stats, none converted
        (:func:`~latechunk_dagster.sources.listed.stamped_items`)."""
        tree = self._layout()
        groups = tree.groups if shard is None else {k: v for k, v in tree.groups.items() if k == shard}
        out = {}
        for name, files in sorted(groups.items()):
            documents = [f for f in files if self.converters.for_name(f.name) is not None]
            texts = [f for f in files if self.converters.for_name(f.name) is None]
            read = self._files_items(texts, tree.gaps_of.get(name, ()), defer_conversion=True)
            items = stamped_items(self.path, read, documents)
            out[name] = fingerprint_of(first_of_each_id(items, self._scope(name)))
        return out

    def _indexed_shard(
        self, shard: str, lines: list[tuple[int, int]], stamp: tuple[object, ...]
    ) -> Iterator[Document | RejectedRow]:
        """A single JSONL file's shard read from its indexed lines; the whole-file scan of
        :meth:`iter_shard` if the file changed since the index was made. A file replaced while its
        lines are read (after the check) ends in an ``unreadable_file`` row: the lines at the
        index's offsets are not the version indexed."""
        if file_stamp(self.path) != stamp:
            yield from self.iter_shard(shard)
            return
        rows = self._single_file_rows(rows=jsonl_rows(self.path, lines))
        yield from first_of_each_id((item for _, item in rows), self._scope(shard))
        if _stamp_or_none(self.path) != stamp:
            where = printable(str(self.path))
            detail = f"{where}: replaced while shard {shard!r} was read from the lines indexed before; not used"
            yield RejectedRow("*", where, "unreadable_file", detail)


def _stamp_or_none(path: PurePath) -> tuple[object, ...] | None:
    """:func:`~latechunk_dagster.sources.listed.file_stamp`, or ``None`` for a file that cannot be reached."""
    try:
        return file_stamp(path)
    except OSError:
        return None
