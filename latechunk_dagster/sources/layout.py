"""Where a directory store's documents are: its files by shard, and the entries it does not read.

The layout rules of :class:`~latechunk_dagster.sources.files.DocumentStore` (a text tree: a shard per
first-level directory; a table store: a shard per file, named by its path without the document
suffixes), with every entry that is not read named (:mod:`latechunk_dagster.sources.listing`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from latechunk_dagster.sources.converters import CONVERTED_SUFFIXES
from latechunk_dagster.sources.documents import RejectedRow, printable
from latechunk_dagster.sources.listing import Walk, key_problem, walk
from latechunk_dagster.sources.storage import ObjectStat

TEXT_SUFFIXES = (".txt", ".md")
#: The files of a text tree: text, and document files converted to Markdown
#: (:mod:`~latechunk_dagster.sources.converters`).
TREE_SUFFIXES = (*TEXT_SUFFIXES, *CONVERTED_SUFFIXES)
ROOT_SHARD = "_root"
TABLE_SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet"}
#: Compressed JSONL, read through its decompressor (:func:`~latechunk_dagster.sources.readers.open_jsonl`).
COMPRESSED_JSONL = (".jsonl.gz", ".jsonl.zst")


def kind_of(file: Path, converted: Collection[str] = ()) -> str | None:
    """``"text"``, ``"jsonl"``, ``"parquet"`` or ``None`` by the file's suffix; ``converted``: more
    suffixes (lower case, with the dot) of a text tree, those a store's own converters read."""
    if file.name.lower().endswith(COMPRESSED_JSONL):
        return "jsonl"
    suffix = file.suffix.lower()
    return "text" if suffix in TREE_SUFFIXES or suffix in converted else TABLE_SUFFIXES.get(suffix)


_DOCUMENT_SUFFIXES = {*TREE_SUFFIXES, *TABLE_SUFFIXES}
#: Suffixes of compressed or half-written copies: ``a.jsonl.gz`` and ``a.jsonl.tmp`` stand for shard ``a``.
_PACKED_SUFFIXES = {".gz", ".bz2", ".xz", ".zst", ".zip", ".tmp", ".part", ".partial"}
_SUFFIXES_OF = {"text": "/".join(TREE_SUFFIXES), "jsonl": ".jsonl (.jsonl.gz, .jsonl.zst)", "parquet": ".parquet"}


def looks_like_a_document(file: Path, converted: Collection[str] = ()) -> bool:
    """A file name with a document suffix among its suffixes (``a.jsonl.gz``, ``README.md``;
    ``converted``: as :func:`kind_of`)."""
    return any(s.lower() in _DOCUMENT_SUFFIXES or s.lower() in converted for s in file.suffixes)


@dataclass
class Layout:
    """A directory store's files by shard (``groups``), the entries not read, and the gaps (``stats``:
    what an object store's listing said of each file, :attr:`~latechunk_dagster.sources.listing.Walk.stats`)."""

    groups: dict[str, list[Path]] = field(default_factory=dict)
    skipped: list[RejectedRow] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    gaps: list[RejectedRow] = field(default_factory=list)
    gaps_of: dict[str, list[RejectedRow]] = field(default_factory=dict)
    stats: dict[Path, ObjectStat] = field(default_factory=dict)

    def skip(self, row: RejectedRow, shard: str | None) -> None:
        self.skipped.append(row)
        if shard is not None:
            self.held.add(shard)


def directory_layout(root: Path, kind: str, found: Walk | None = None, converted: Collection[str] = ()) -> Layout:
    """A directory store's files by shard, with the entries not read (``DocumentStore.listing``).

    Args:
        root: the store's directory; kind: ``"text"``, ``"jsonl"`` or ``"parquet"``; found: a
            :func:`~latechunk_dagster.sources.listing.walk` of ``root`` just made (default: walk it now);
            converted: the suffixes the store's converters read (:func:`kind_of`).
    """
    found = walk(root) if found is None else found
    out = Layout(stats=found.stats)
    for path, row in found.gaps:
        out.gaps.append(row)
        if path != root:  # a run of the shard must not read the part it cannot see as deleted
            out.gaps_of.setdefault(shard_of(root, kind, path), []).append(row)
    for path, row in found.skipped:
        out.skip(row, shard_of(root, kind, path))
    bad: dict[str, list[Path]] = {}
    for file in found.files:
        file_kind = kind_of(file, converted)
        if file_kind != kind:
            if looks_like_a_document(file, converted):
                where = printable(str(file))
                what = "compressed or renamed" if file_kind is None else f"a {file_kind} file in a {kind} store"
                detail = f"{where}: {what}; not read (the store reads {_SUFFIXES_OF[kind]} files)"
                out.skip(RejectedRow("*", where, "other_kind", detail), shard_of(root, kind, file))
                if file_kind == "text":  # were the store read as a text tree, these would be its root shard
                    out.held.add(ROOT_SHARD)
            continue
        shard = shard_of(root, kind, file)
        (bad.setdefault(shard, []) if key_problem(shard) else out.groups.setdefault(shard, [])).append(file)
    for shard, files in sorted(bad.items()):
        name, problem = printable(shard), key_problem(shard)
        hint = ", e.g. convert the name to UTF-8" if problem == "is not valid UTF-8" else ""
        detail = (
            f"{printable(str(files[0]))}: shard name {name!r} {problem}, so it cannot be a partition key; "
            f"its {len(files)} file(s) are not read (rename it{hint})"
        )
        out.skip(RejectedRow("*", printable(str(files[0])), "bad_shard_name", detail), None)
    out.skipped.sort(key=lambda r: r.where)
    return out


def shard_of(root: Path, kind: str, file: Path) -> str:
    """The shard a file under a directory store belongs to (text: its first-level directory;
    tables: its path without the document suffixes, so ``a.jsonl.gz`` stands for ``a``)."""
    rel = file.relative_to(root)
    if kind == "text":
        return rel.parts[0] if len(rel.parts) > 1 else ROOT_SHARD
    name = rel.name
    while Path(name).suffix.lower() in _DOCUMENT_SUFFIXES | _PACKED_SUFFIXES:
        name = name[: -len(Path(name).suffix)]
    return (rel.parent / name).as_posix() if name else rel.as_posix()
