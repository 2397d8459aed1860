"""What the asset checks assert about written rows. Plain functions over Arrow tables and a
LanceDB table, no Dagster.

Each check returns ``(passed, details)``; ``details`` lists the first offending rows or
documents so a failed check says where to look.

**Granularities** (issue 29): each granularity of a table definition is a table of its own
(:func:`~latechunk_dagster.sink.schema.granularity_table`), and every check here takes one table, so
a granularity table is checked like any chunk table (its chunk ids are those of its granularity:
:func:`~latechunk_dagster.sink.schema.chunk_id`);
:func:`~latechunk_dagster.sink.parents.parents_exist` checks a fine table's ``parent_chunk_id``
links against the next granularity's table.

Memory: :func:`check_partitions` checks one partition at a time. It reads that partition's rows
(only the columns a check reads), checks its vectors, drops them, then reads that one shard's
documents; across partitions it keeps counts and at most :data:`MAX_LISTED` examples per check.
So the peak is bounded by the largest partition, not by the run (a single-run backfill of a
large store; ``bench/check_memory.py`` measures 12 against 48 partitions).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_id, sql_in
from latechunk_dagster.sources.documents import READ_ERRORS, UnknownShardError
from latechunk_dagster.sources.files import Document, DocumentStore, RejectedRow
from latechunk_dagster.sources.text_files import UnconvertedFile

Outcome = tuple[bool, dict[str, Any]]
#: A shard's documents by doc_id, or why the shard cannot be read (:func:`iter_shard_documents`).
ShardDocuments = dict[str, Document] | str
#: ``(partition, its rows, its rejected rows) -> documents_accounted outcome`` (documents not at hand).
AccountedFn = Callable[[str, pa.Table, pa.Table], Outcome]
MAX_LISTED = 10
#: Rows of a LanceDB table looked up per query (an ``IN`` list of this many ids).
LOOKUP_BATCH = 500

#: The table checks, in the order :func:`check_partitions` runs them: name -> what it asserts.
CHECKS = {
    "vectors_valid": "vectors finite, of the table's dimension, unit norm when the head normalizes",
    "spans_tile": "per document, token ranges tile the tokens; char ranges in order, inside the text, text matches",
    "unique_chunk_ids": "no duplicate chunk_id",
    "documents_accounted": "every document of the shard has chunks or a rejection record",
    "row_count_matches": "rows in the table = rows the last materialization reported",
}

#: The chunk-table columns the checks read (not the lineage, ``headings`` or ``metadata`` copies);
#: ``granularity`` where the table has it (a table written before granularities existed may not).
CHECK_COLUMNS = [
    "chunk_id",
    "doc_id",
    "chunk_index",
    "token_start",
    "token_end",
    "char_start",
    "char_end",
    "text",
    "doc_tokens",
    "doc_sha256",
    "head",
    "vector",
    "granularity",
]


def read_partitions(
    table: Any, partitions: Sequence[str], columns: Sequence[str] | None = None, where: str | None = None
) -> pa.Table:
    """Rows of ``partitions`` of a LanceDB table; none for an empty list.

    Args:
        columns: the columns to read (default: all).
        where: a further SQL filter (``run_id = '...'``), ANDed with the partitions'.
    """
    query = table.search()
    if columns is not None:
        query = query.select(list(columns))
    if not partitions:
        return query.limit(0).to_arrow()
    scope = sql_in("partition", list(partitions)) + (f" AND ({where})" if where else "")
    return query.where(scope).limit(None).to_arrow()


def iter_shard_documents(
    store: DocumentStore, partitions: Sequence[str], keep: Mapping[str, Collection[str]] | None = None
) -> Iterator[tuple[str, ShardDocuments]]:
    """``(partition, documents)`` for each of ``partitions``, in order, one shard held at a time
    (:meth:`DocumentStore.iter_shards`: a single JSONL file is indexed once, not read per shard).

    The documents are the shard's documents by doc_id (``{}`` for a shard gone from the store), or
    why the shard cannot be read (``"shard cannot be read: ..."``; its neighbours are read as usual).
    A row that made no document counts as a document (its rejection record accounts for it).

    Args:
        keep: per partition, the only doc_ids to hold; ``None``: all. The others are read and dropped
            unconverted: a document file (PDF, HTML, ...) is converted only when kept (``parity_sample``
            samples 2 documents of a shard: converting the whole shard was most of its cost).
    """
    partitions = list(partitions)
    done = 0
    try:
        for partition, items in store.iter_shards(partitions, defer_conversion=keep is not None):
            wanted = keep.get(partition, ()) if keep is not None else None
            by_id: dict[str, Document] = {}
            try:
                for item in items:
                    if wanted is not None and item.doc_id not in wanted:
                        continue
                    if isinstance(item, UnconvertedFile):
                        item = item.convert()
                    if isinstance(item, RejectedRow):
                        by_id.setdefault(item.doc_id, Document(item.doc_id, "", ""))
                    else:
                        by_id[item.doc_id] = item  # a document wins over a bad row of its id
                docs: ShardDocuments = by_id
            except UnknownShardError:
                docs = {}
            except READ_ERRORS as exc:  # bad data fails the checks of this partition; a bug fails the run
                docs = f"shard cannot be read: {exc}"
            done += 1
            yield partition, docs
    except READ_ERRORS as exc:  # the store cannot be listed: every partition not yet read
        for partition in partitions[done:]:
            yield partition, f"shard cannot be read: {exc}"


def merge(outcomes: Mapping[str, Outcome]) -> Outcome:
    """Per-partition outcomes as one: passed when all passed, details by partition."""
    return all(o[0] for o in outcomes.values()), {p: o[1] for p, o in outcomes.items()}


def _unreadable(docs: ShardDocuments) -> Outcome | None:
    return (False, {"reason": docs}) if isinstance(docs, str) else None


def check_partitions(
    table: Any,
    rejected_table: Any | None,
    partitions: Sequence[str],
    *,
    dim: int,
    expected_rows: Mapping[str, int | None],
    store: DocumentStore | None = None,
    accounted: AccountedFn | None = None,
) -> dict[str, Outcome]:
    """Every check of :data:`CHECKS` over the rows of ``partitions``, read one partition at a time.

    Args:
        table: the LanceDB chunk table; rows of other partitions are not read.
        rejected_table: the rejected-documents table (``None``: no rejections).
        partitions: the partitions to check (a repeated one is checked once).
        dim: the vector width the rows must have.
        expected_rows: per partition, the rows its last materialization reported (``None``: unknown, fails).
        store: the document store (the shards' current documents), or ``None`` when documents are
            not at hand: then ``spans_tile`` skips the text comparison and ``accounted`` gives
            ``documents_accounted``.
        accounted: ``(partition, rows, rejected rows) -> outcome``, used when ``store`` is ``None``.

    Returns:
        ``{check name: (passed, details)}`` in :data:`CHECKS` order; details of the per-partition
        checks are by partition.

    Raises:
        ValueError: neither ``store`` nor ``accounted`` given.
    """
    if store is None and accounted is None:
        raise ValueError("check_partitions needs the document store or an `accounted` function")
    partitions = list(dict.fromkeys(partitions))
    documents = iter_shard_documents(store, partitions) if store is not None else None
    vectors, ids = VectorTally(dim), ChunkIdTally()
    spans: dict[str, Outcome] = {}
    docs_accounted: dict[str, Outcome] = {}
    counts: dict[str, Outcome] = {}
    docs: ShardDocuments = {}
    columns = [c for c in CHECK_COLUMNS if c in table.schema.names]
    for p in partitions:
        rows = read_partitions(table, [p], columns)
        rejected = read_partitions(rejected_table, [p]) if rejected_table is not None else REJECTED_SCHEMA.empty_table()
        vectors.add(rows)
        ids.add(p, rows)
        rows = rows.drop_columns(["vector"])  # the largest column, read by no other check
        if documents is not None:
            docs = next(documents)[1]
            spans[p] = _unreadable(docs) or spans_tile(rows, docs)  # type: ignore[arg-type]
            docs_accounted[p] = _unreadable(docs) or documents_accounted(rows, rejected, docs)  # type: ignore[arg-type]
        else:
            spans[p] = spans_tile(rows, None)
            docs_accounted[p] = accounted(p, rows, rejected)  # type: ignore[misc]
        counts[p] = row_count_matches(rows, expected_rows.get(p))
        del rows, rejected  # gone before the next partition is read: one partition held at a time
        docs = {}

    def lookup(batch: list[str]) -> pa.Table:
        keys = ["chunk_id", "partition", "doc_id", "chunk_index"] + (
            ["granularity"] if "granularity" in columns else []
        )
        return read_partitions(table, partitions, keys, sql_in("chunk_id", batch))

    return {
        "vectors_valid": vectors.outcome(),
        "spans_tile": merge(spans),
        "unique_chunk_ids": ids.outcome(lookup),
        "documents_accounted": merge(docs_accounted),
        "row_count_matches": merge(counts),
    }


class VectorTally:
    """``vectors_valid`` over rows given a partition at a time: every vector is finite, has ``dim``
    values and, when every row's head normalizes (its name ends in ``l2``), unit L2 norm (±``atol``).
    Keeps counts, the largest norm error and the first :data:`MAX_LISTED` offending chunk_ids."""

    def __init__(self, dim: int, atol: float = 1e-3) -> None:
        self.dim, self.atol = dim, atol
        self.rows = self.non_finite = self.not_unit_norm = 0
        self.max_norm_error = 0.0
        self.heads: set[str] = set()
        self.width_error: str | None = None
        self.not_finite_ids: list[str] = []  # first offenders when the head does not normalize
        self.offending_ids: list[str] = []  # first offenders when it does (not finite or not unit norm)

    def add(self, rows: pa.Table) -> None:
        """Tally ``rows`` (columns ``vector``, ``head``, ``chunk_id``)."""
        if not rows.num_rows:
            return
        col = rows.column("vector").combine_chunks()
        if col.type.list_size != self.dim:
            self.width_error = self.width_error or f"vector dimension {col.type.list_size} != expected {self.dim}"
            return
        self.heads.update(pc.unique(rows.column("head")).to_pylist())
        # shape: [n_rows, dim]
        v = col.flatten().to_numpy(zero_copy_only=False).reshape(-1, self.dim)
        bad_finite = ~np.isfinite(v).all(axis=1)
        errors = np.abs(np.linalg.norm(np.where(np.isfinite(v), v, 0.0).astype(np.float64), axis=1) - 1.0)
        bad_norm = errors > self.atol
        ids = rows.column("chunk_id")
        for listed, bad in ((self.not_finite_ids, bad_finite), (self.offending_ids, bad_finite | bad_norm)):
            room = MAX_LISTED - len(listed)
            if room > 0:
                listed += ids.take(pa.array(np.flatnonzero(bad)[:room])).to_pylist()
        self.rows += len(v)
        self.non_finite += int(bad_finite.sum())
        self.not_unit_norm += int(bad_norm.sum())
        self.max_norm_error = max(self.max_norm_error, float(errors.max()))

    def outcome(self) -> Outcome:
        """``(passed, {rows, non_finite, not_unit_norm, max_norm_error, examples})``, or
        ``(False, {reason})`` for vectors of another width."""
        if self.width_error:
            return False, {"reason": self.width_error}
        if not self.rows:
            return True, {"rows": 0}
        normalized = all(h.endswith("l2") for h in self.heads)
        bad = self.offending_ids if normalized else self.not_finite_ids
        return not bad, {
            "rows": self.rows,
            "non_finite": self.non_finite,
            "not_unit_norm": self.not_unit_norm if normalized else 0,
            "max_norm_error": self.max_norm_error if normalized else 0.0,
            "examples": bad,
        }


class ChunkIdTally:
    """``unique_chunk_ids`` over rows given a partition at a time: no two rows share a ``chunk_id``.

    Without holding every id of the run: a chunk_id is the hash of its row's ``(partition, doc_id,
    chunk_index)`` (:func:`~latechunk_dagster.sink.schema.chunk_id`), so two partitions' rows can
    share one only through a row whose id is not its own key ("foreign": copied, or written by an
    older version). Duplicates inside a partition are found with that partition's ids; the foreign
    ids (none in a table this package wrote) are kept and looked up across the partitions at the
    end. Memory: one partition's ids, plus the foreign ones.
    """

    def __init__(self) -> None:
        self.rows = self.duplicates = 0
        self.examples: list[str] = []
        self.foreign: set[str] = set()

    def add(self, partition: str, rows: pa.Table) -> None:
        """Tally the rows of ``partition`` (columns ``chunk_id``, ``doc_id``, ``chunk_index``, and
        ``granularity`` where the table has it)."""
        ids = rows.column("chunk_id").to_pylist()
        own = zip(rows.column("doc_id").to_pylist(), rows.column("chunk_index").to_pylist(), _granularities(rows))
        foreign = {i for i, (doc, index, g) in zip(ids, own) if i != chunk_id(partition, doc, index, g)}
        self.foreign |= foreign
        self.rows += len(ids)
        seen: set[str] = set()
        self._count({i for i in ids if i in seen or seen.add(i)} - foreign)  # type: ignore[func-returns-value]

    def _count(self, duplicated: Iterable[str]) -> None:
        dup = sorted(duplicated)
        self.duplicates += len(dup)
        self.examples = sorted(set(self.examples) | set(dup[:MAX_LISTED]))[:MAX_LISTED]

    def outcome(self, lookup: Callable[[list[str]], pa.Table]) -> Outcome:
        """``(passed, {rows, duplicates, examples})``.

        Args:
            lookup: the rows (``chunk_id``, ``partition``, ``doc_id``, ``chunk_index``) of the checked
                partitions whose chunk_id is one of a list (at most :data:`LOOKUP_BATCH` ids).
        """
        foreign = sorted(self.foreign)
        for start in range(0, len(foreign), LOOKUP_BATCH):
            found = lookup(foreign[start : start + LOOKUP_BATCH]).to_pylist()
            rows_in: dict[str, Counter[str]] = defaultdict(Counter)
            foreign_in: dict[str, set[str]] = defaultdict(set)
            for r in found:
                rows_in[r["chunk_id"]][r["partition"]] += 1
                if r["chunk_id"] != chunk_id(r["partition"], r["doc_id"], r["chunk_index"], r.get("granularity") or ""):
                    foreign_in[r["chunk_id"]].add(r["partition"])
            # add() counted an id already when it had two rows of its own partition there
            self._count(
                i
                for i, per in rows_in.items()
                if sum(per.values()) > 1 and not any(n > 1 and p not in foreign_in[i] for p, n in per.items())
            )
        return not self.duplicates, {"rows": self.rows, "duplicates": self.duplicates, "examples": self.examples}


def _granularities(rows: pa.Table) -> list[str]:
    """Each row's granularity (``""`` where the column is missing or NULL: a single-strategy row)."""
    if "granularity" not in rows.column_names:
        return [""] * rows.num_rows
    return [g or "" for g in rows.column("granularity").to_pylist()]


def spans_tile(rows: pa.Table, docs: dict[str, Document] | None) -> Outcome:
    """Per document: chunk_index 0..n-1, token ranges tile ``[0, doc_tokens)``, char ranges in
    order, inside the text, and ``text == document[char_start:char_end]``.

    ``docs=None`` (documents not at hand): everything but the comparison with the document text;
    char ranges are then only checked to be in order and of the stored text's length."""
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for r in rows.select(
        ["doc_id", "chunk_index", "token_start", "token_end", "char_start", "char_end", "text", "doc_tokens"]
    ).to_pylist():
        by_doc[r["doc_id"]].append(r)
    problems: list[str] = []
    for doc_id, chunks in by_doc.items():
        chunks.sort(key=lambda r: r["chunk_index"])
        problem = _span_problem(chunks, docs.get(doc_id) if docs is not None else None, docs is None)
        if problem:
            problems.append(f"{doc_id}: {problem}")
    return not problems, {"documents": len(by_doc), "failing": len(problems), "examples": problems[:MAX_LISTED]}


def _span_problem(chunks: list[dict], doc: Document | None, without_text: bool = False) -> str | None:
    if doc is None and not without_text:
        return "document no longer in the store"
    if [c["chunk_index"] for c in chunks] != list(range(len(chunks))):
        return "chunk_index is not 0..n-1"
    pos, last_char = 0, 0
    for c in chunks:
        if c["token_start"] != pos or c["token_end"] <= c["token_start"]:
            return f"token range ({c['token_start']}, {c['token_end']}) leaves a gap or overlap at token {pos}"
        pos = c["token_end"]
        if c["char_start"] is None:
            continue
        end = len(doc.text) if doc is not None else c["char_end"]
        if not last_char <= c["char_start"] < c["char_end"] <= end:
            return f"char range ({c['char_start']}, {c['char_end']}) out of order or outside the text"
        if doc is None:
            if c["text"] is None or len(c["text"]) != c["char_end"] - c["char_start"]:
                return f"chunk {c['chunk_index']} text does not have the length of its char range"
        elif c["text"] != doc.text[c["char_start"] : c["char_end"]]:
            return f"chunk {c['chunk_index']} text differs from the document"
        last_char = c["char_end"]
    if pos != chunks[-1]["doc_tokens"]:
        return f"token ranges end at {pos}, document has {chunks[-1]['doc_tokens']} tokens"
    return None


def documents_accounted(rows: pa.Table, rejected: pa.Table, docs: dict[str, Document]) -> Outcome:
    """Every document of the shard has chunks (of its current text) or a rejection record, not both.

    A ``duplicate_id`` rejection (a later row repeating a kept document's id) does not count as
    a rejection of the kept document."""
    chunked = set(rows.column("doc_id").to_pylist())
    refused = set(rejected.column("doc_id").to_pylist())
    if "reason" in rejected.column_names:
        duplicates = pa.compute.equal(rejected.column("reason"), "duplicate_id")
        refused -= set(rejected.filter(duplicates).column("doc_id").to_pylist()) & chunked
    shas = dict(zip(rows.column("doc_id").to_pylist(), rows.column("doc_sha256").to_pylist()))
    missing = sorted(set(docs) - chunked - refused)
    both = sorted(chunked & refused)
    stale = sorted(d for d in chunked if d in docs and shas[d] != docs[d].sha256)
    orphans = sorted((chunked | refused) - set(docs))
    ok = not (missing or both or stale or orphans)
    return ok, {
        "documents": len(docs),
        "chunked": len(chunked),
        "rejected": len(refused),
        "missing": missing[:MAX_LISTED],
        "chunked_and_rejected": both[:MAX_LISTED],
        "stale_text": stale[:MAX_LISTED],
        "not_in_store": orphans[:MAX_LISTED],
    }


def row_count_matches(rows: pa.Table, expected: int | None) -> Outcome:
    """The partition holds as many rows as its last materialization reported writing."""
    if expected is None:
        return False, {"reason": "no materialization recorded for this partition"}
    return rows.num_rows == expected, {"rows": rows.num_rows, "expected": expected}


def vectors_match(stored: np.ndarray, fresh: np.ndarray, atol: float = 1e-4) -> Outcome:
    """Stored vectors of a re-embedded document equal the fresh ones within ``atol``."""
    if stored.shape != fresh.shape:
        return False, {"reason": f"shape {stored.shape} != {fresh.shape}"}
    dev = float(np.abs(stored - fresh).max()) if stored.size else 0.0
    return dev <= atol, {"max_abs_deviation": dev, "atol": atol}
