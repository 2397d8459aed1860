"""Document store readers: a text tree, JSONL or Parquet, split into shards (the partition keys).

Store kinds (:attr:`DocumentStore.kind`), detected by :meth:`DocumentStore.from_path`:

* ``"text"``: a directory tree of ``.txt`` / ``.md`` files. Shard = first-level subdirectory name
  (files directly in the root: shard ``"_root"``); doc_id = path relative to the root, ``/``-separated.
* ``"jsonl"``: one ``.jsonl`` file, or a directory of them (searched recursively).
* ``"parquet"``: one ``.parquet`` file, or a directory of them (searched recursively).

JSONL / Parquet rows have an ``id`` (string; integers are turned into strings) and a ``text``
(string) column. In a directory the shard is the file's path relative to the directory without
its suffix (``"2024/jan"``); in a single file the shard is the row's ``shard`` column if the file
has one, else the file stem.

Files are read as UTF-8. Text that is not valid Unicode is kept, not dropped: undecodable bytes
become lone surrogates (``errors="surrogateescape"``), JSON ``"\\ud800"`` stays as it is, so the
pipeline can reject the document with a reason (``text.encode("utf-8")`` fails on it).
Hidden files and directories (name starting with ``.``) are ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

TEXT_SUFFIXES = (".txt", ".md")
ROOT_SHARD = "_root"
_TABLE_SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet"}


def text_sha256(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of ``text`` (lone surrogates encoded with ``surrogatepass``)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Document:
    """One document of a store.

    Attributes:
        doc_id: unique id within its shard.
        text: the text; may hold lone surrogates if the source was not valid Unicode.
        sha256: :func:`text_sha256` of ``text`` (64 hex characters).
    """

    doc_id: str
    text: str
    sha256: str

    @classmethod
    def from_text(cls, doc_id: str, text: str) -> Document:
        return cls(doc_id, text, text_sha256(text))


class DocumentStore:
    """Reads the documents of one store, shard by shard. Nothing is cached: every call sees the
    current files, so new or changed documents show up (e.g. in a sensor).

    Attributes:
        kind: ``"text"``, ``"jsonl"`` or ``"parquet"``.
        uri: absolute path of the store (file or directory) as a string.
        path: the same as a :class:`~pathlib.Path`.
    """

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind
        self.uri = str(path)

    def __repr__(self) -> str:
        return f"DocumentStore(kind={self.kind!r}, uri={self.uri!r})"

    @classmethod
    def from_path(cls, path: str | Path) -> DocumentStore:
        """Open a store, detecting its kind from the file suffix or the files in the directory.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: a file that is not ``.jsonl``/``.parquet``, or a directory holding no
                supported file or more than one kind of them.
        """
        path = Path(path).expanduser().resolve()
        if not path.exists():
            raise FileNotFoundError(f"document store not found: {path}")
        if path.is_file():
            kind = _TABLE_SUFFIXES.get(path.suffix.lower())
            if kind is None:
                raise ValueError(f"unknown document store kind for file {path}: expected a .jsonl or .parquet file")
            return cls(path, kind)
        kinds = {_kind_of(file) for file in _walk(path)} - {None}
        if len(kinds) != 1:
            found = ", ".join(sorted(kinds)) if kinds else "none"
            raise ValueError(
                f"unknown document store kind for directory {path}: expected only .txt/.md, only .jsonl "
                f"or only .parquet files, found kinds: {found}"
            )
        return cls(path, kinds.pop())

    def shards(self) -> list[str]:
        """Sorted shard names (partition keys). Lists files; a single-file store with a ``shard``
        column is read in full."""
        if self.path.is_file():
            return sorted(self._read_single_file())
        return sorted(self._shard_files())

    def read_shard(self, shard: str) -> list[Document]:
        """The documents of one shard, sorted by doc_id.

        Raises:
            KeyError: no shard of that name.
            ValueError: a bad row (missing/null id, non-string text) or a duplicate doc_id.
        """
        if self.path.is_file():
            groups = self._read_single_file()
            if shard not in groups:
                raise KeyError(f"unknown shard {shard!r} in document store {self.uri}")
            return groups[shard]
        files = self._shard_files().get(shard)
        if files is None:
            raise KeyError(f"unknown shard {shard!r} in document store {self.uri}")
        if self.kind == "text":
            docs = [Document.from_text(self._text_doc_id(file), _read_text(file)) for file in files]
        else:
            docs = [doc for _, doc in self._read_table(files[0])]
        return _sorted_unique(docs, shard, self.uri)

    def shard_fingerprint(self, shard: str) -> str:
        """Hex sha256 over the sorted (doc_id, sha256) pairs of a shard: changes iff a document
        of the shard is added, removed, renamed or edited. Reads (only) that shard's files."""
        return fingerprint_of(self.read_shard(shard))

    def fingerprints(self) -> dict[str, str]:
        """{shard: :meth:`shard_fingerprint`} for every shard, reading each file once."""
        if self.path.is_file():
            return {shard: fingerprint_of(docs) for shard, docs in sorted(self._read_single_file().items())}
        return {shard: self.shard_fingerprint(shard) for shard in self.shards()}

    # -- layout ----------------------------------------------------------------------------------

    def _shard_files(self) -> dict[str, list[Path]]:
        """Directory stores: {shard: its files}, sorted. Text: shard = first-level subdirectory;
        tables: shard = relative path without suffix (one file per shard)."""
        groups: dict[str, list[Path]] = {}
        for file in _walk(self.path):
            if _kind_of(file) != self.kind:
                continue
            rel = file.relative_to(self.path)
            if self.kind == "text":
                shard = rel.parts[0] if len(rel.parts) > 1 else ROOT_SHARD
            else:
                shard = rel.with_suffix("").as_posix()
            groups.setdefault(shard, []).append(file)
        return groups

    def _text_doc_id(self, file: Path) -> str:
        return file.relative_to(self.path).as_posix()

    # -- tables ----------------------------------------------------------------------------------

    def _read_single_file(self) -> dict[str, list[Document]]:
        """Single-file store: {shard: sorted documents}, shard from the ``shard`` column or the stem."""
        groups: dict[str, list[Document]] = {}
        for shard, doc in self._read_table(self.path, shard_column=True):
            groups.setdefault(shard, []).append(doc)
        if not groups:
            groups[self.path.stem] = []
        return {shard: _sorted_unique(docs, shard, self.uri) for shard, docs in groups.items()}

    def _read_table(self, file: Path, *, shard_column: bool = False) -> Iterator[tuple[str, Document]]:
        """(shard, document) per row of a JSONL or Parquet file; shard = the row's ``shard`` value
        if ``shard_column`` and the file has one, else the file stem."""
        rows = _jsonl_rows(file) if self.kind == "jsonl" else _parquet_rows(file)
        for row_number, row in rows:
            where = f"{file}: row {row_number}"
            shard = file.stem
            if shard_column and "shard" in row:
                shard = row["shard"]
                if not isinstance(shard, str) or not shard:
                    raise ValueError(f"{where}: 'shard' must be a non-empty string, got {shard!r}")
            yield shard, _document_from_row(row, where)


def _walk(root: Path) -> Iterator[Path]:
    """Every non-hidden file under ``root``, in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath, name)


def _kind_of(file: Path) -> str | None:
    suffix = file.suffix.lower()
    return "text" if suffix in TEXT_SUFFIXES else _TABLE_SUFFIXES.get(suffix)


def _read_text(file: Path) -> str:
    return file.read_bytes().decode("utf-8", errors="surrogateescape")


def _jsonl_rows(file: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, object) per non-blank line. Splits on ``\\n`` only: U+2028 and
    friends may occur raw inside JSON strings."""
    for number, line in enumerate(_read_text(file).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{file}: row {number}: invalid JSON: {exc}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{file}: row {number}: expected a JSON object, got {type(row).__name__}")
        yield number, row


def _parquet_rows(file: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, {column: value}) per row, reading only ``id``, ``text`` and ``shard``."""
    names = pq.read_schema(file).names
    missing = [column for column in ("id", "text") if column not in names]
    if missing:
        raise ValueError(f"{file}: missing column(s) {missing} (columns: {names})")
    table = pq.read_table(file, columns=[c for c in ("id", "text", "shard") if c in names])
    yield from enumerate(table.to_pylist(), start=1)


def _document_from_row(row: dict[str, Any], where: str) -> Document:
    doc_id = row.get("id")
    if doc_id is None:
        raise ValueError(f"{where}: missing or null 'id'")
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        raise ValueError(f"{where}: 'id' must be a string or an integer, got {type(doc_id).__name__}")
    if doc_id == "":
        raise ValueError(f"{where}: empty 'id'")
    text = row.get("text")
    if not isinstance(text, str):
        got = "missing" if "text" not in row else type(text).__name__
        raise ValueError(f"{where}: 'text' must be a string, got {got} (id {doc_id!r})")
    return Document.from_text(str(doc_id), text)


def _sorted_unique(docs: Iterable[Document], shard: str, uri: str) -> list[Document]:
    docs = sorted(docs, key=lambda doc: doc.doc_id)
    for previous, doc in zip(docs, docs[1:]):
        if previous.doc_id == doc.doc_id:
            raise ValueError(f"duplicate doc_id {doc.doc_id!r} in shard {shard!r} of document store {uri}")
    return docs


def fingerprint_of(docs: Iterable[Document]) -> str:
    """Hex sha256 over the sorted (doc_id, sha256) pairs: what :meth:`DocumentStore.shard_fingerprint`
    returns for a shard holding ``docs``, without reading the shard again."""
    pairs = sorted((doc.doc_id, doc.sha256) for doc in docs)
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode("ascii")).hexdigest()
