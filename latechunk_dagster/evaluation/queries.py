"""Labeled queries: the JSONL query file, read and written.

One JSON object per line::

    {"query": "Who is the largest customer of Velmora Pumps?", "doc_id": "company-velmora",
     "char_start": 120, "char_end": 164}

* ``query`` (non-empty string) and ``doc_id`` (non-empty string or integer) are required.
* ``char_start`` / ``char_end`` (code points, half-open, ``0 <= char_start < char_end``) give the
  relevant passage; both or neither. Without them the whole document is relevant.
* Several lines with the same ``query`` text are one query with several relevant passages.
* Other keys are refused (a misspelt ``char-start`` would otherwise quietly make the label
  document-level), and so is a key given twice in one line (JSON readers silently keep the last
  value). Blank lines are skipped. Lines split on ``\\n`` only.
* ``query`` and ``doc_id`` must be valid Unicode (a JSON ``"\\ud800"`` escape is a lone surrogate).

Every error is a :class:`QueryFileError` naming the file and the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from latechunk_dagster.core.encoding import foreign_encoding
from latechunk_dagster.core.tokenization import unicode_problem
from latechunk_dagster.sources.documents import printable, strip_bom
from latechunk_dagster.sources.readers import DuplicateKeyError, JSONLimitError, loads_strict

KEYS = frozenset({"query", "doc_id", "char_start", "char_end"})


class QueryFileError(ValueError):
    """A query file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class Passage:
    """One relevant passage: a document, and optionally a half-open char range in it (code points).

    Attributes:
        doc_id: the relevant document.
        char_range: ``(char_start, char_end)``, or ``None`` for the whole document.
        line: line of the query file it came from (0 when built in code), for error messages.
    """

    doc_id: str
    char_range: tuple[int, int] | None = None
    line: int = 0


@dataclass(frozen=True)
class LabeledQuery:
    """A query and its relevant passages (at least one), in file order."""

    query: str
    passages: tuple[Passage, ...]


def read_queries(path: str | Path) -> list[LabeledQuery]:
    """Read a query file (module docstring) into queries, in order of first appearance.

    Raises:
        QueryFileError: missing file, a file in UTF-16 / UTF-32 or otherwise not UTF-8, invalid
            JSON (or JSON Python's parser cannot read: nested too deeply, an integer of too many
            digits), a missing / wrongly typed / unknown / repeated key, text that is not valid
            Unicode, a bad char range, a repeated (query, passage) line, or no query at all; names
            file and line.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise QueryFileError(f"{path}: query file not found") from None
    encoding = foreign_encoding(data)
    if encoding is not None:
        raise QueryFileError(encoding.file_detail(str(path)))
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QueryFileError(f"{path}: not UTF-8 ({exc})") from None
    groups: dict[str, list[Passage]] = {}
    seen: dict[tuple[str, str, tuple[int, int] | None], int] = {}
    for number, line in enumerate(raw.split("\n"), start=1):
        line = strip_bom(line)  # the package's BOM rule (sources.documents): not part of the text
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            row = loads_strict(line)
        except json.JSONDecodeError as exc:
            raise QueryFileError(f"{where}: invalid JSON: {exc}") from None
        except JSONLimitError as exc:
            raise QueryFileError(f"{where}: JSON that cannot be read: {exc}") from None
        except DuplicateKeyError as exc:
            raise QueryFileError(f"{where}: {exc}: which value is meant is ambiguous; give each key once") from None
        query, passage = parse_row(row, where, number)
        key = (query, passage.doc_id, passage.char_range)
        if key in seen:
            raise QueryFileError(f"{where}: repeats line {seen[key]} (same query, doc_id and range)")
        seen[key] = number
        groups.setdefault(query, []).append(passage)
    if not groups:
        raise QueryFileError(f"{path}: no queries (empty file)")
    return [LabeledQuery(q, tuple(ps)) for q, ps in groups.items()]


def parse_row(row: object, where: str, line: int = 0) -> tuple[str, Passage]:
    """Check one decoded line and return ``(query, passage)``; ``where`` prefixes every error."""
    if not isinstance(row, dict):
        raise QueryFileError(f"{where}: expected a JSON object, got {type(row).__name__}")
    unknown = sorted(set(row) - KEYS)
    if unknown:
        raise QueryFileError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(KEYS)}")
    query = row.get("query")
    if not isinstance(query, str) or not query.strip():
        raise QueryFileError(f"{where}: 'query' must be a non-empty string, got {query!r}")
    doc_id = row.get("doc_id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or doc_id == "":
        raise QueryFileError(f"{where}: 'doc_id' must be a non-empty string or an integer, got {doc_id!r}")
    for name, value in (("query", query), ("doc_id", doc_id)):
        problem = unicode_problem(value) if isinstance(value, str) else None  # the rule of documents and queries
        if problem:
            raise QueryFileError(f"{where}: {name!r} {printable(value)!r} is {problem}")
    has_start, has_end = "char_start" in row, "char_end" in row
    if has_start != has_end:
        raise QueryFileError(f"{where}: give both 'char_start' and 'char_end', or neither (document-level)")
    char_range = None
    if has_start:
        start, end = row["char_start"], row["char_end"]
        for name, value in (("char_start", start), ("char_end", end)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise QueryFileError(f"{where}: '{name}' must be an integer, got {value!r}")
        if not 0 <= start < end:
            raise QueryFileError(f"{where}: need 0 <= char_start < char_end, got [{start}, {end})")
        char_range = (start, end)
    return query, Passage(str(doc_id), char_range, line)


def write_queries(path: str | Path, queries: Iterable[LabeledQuery]) -> Path:
    """Write queries as a query file (one line per passage); returns ``path``. Parent dirs are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for q in queries:
        for p in q.passages:
            row: dict[str, object] = {"query": q.query, "doc_id": p.doc_id}
            if p.char_range is not None:
                row["char_start"], row["char_end"] = p.char_range
            lines.append(json.dumps(row, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
