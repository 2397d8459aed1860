"""What the asset checks assert about written rows. Plain functions over Arrow tables, no Dagster.

Each function returns ``(passed, details)``; ``details`` lists the first offending rows or
documents so a failed check says where to look.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from latechunk_dagster.sink.schema import sql_in
from latechunk_dagster.sources.documents import READ_ERRORS
from latechunk_dagster.sources.files import Document, DocumentStore

Outcome = tuple[bool, dict[str, Any]]
MAX_LISTED = 10

#: The table checks, in the order :func:`check_partitions` runs them: name -> what it asserts.
CHECKS = {
    "vectors_valid": "vectors finite, of the table's dimension, unit norm when the head normalizes",
    "spans_tile": "per document, token ranges tile the tokens; char ranges in order, inside the text, text matches",
    "unique_chunk_ids": "no duplicate chunk_id",
    "documents_accounted": "every document of the shard has chunks or a rejection record",
    "row_count_matches": "rows in the table = rows the last materialization reported",
}


def read_partitions(table: Any, partitions: list[str]) -> pa.Table:
    """Rows of ``partitions`` (all columns) of a LanceDB table; none for an empty list."""
    if not partitions:
        return table.search().limit(0).to_arrow()
    return table.search().where(sql_in("partition", partitions)).limit(None).to_arrow()


def of_partition(rows: pa.Table, partition: str) -> pa.Table:
    """The rows of ``rows`` whose ``partition`` is ``partition``."""
    return rows.filter(pa.compute.equal(rows.column("partition"), partition))


def shards_documents(store: DocumentStore, partitions: list[str]) -> dict[str, dict[str, Document] | str]:
    """Per partition: the shard's documents by id (``{}`` for a shard gone from the store), or the
    read error as text. One pass over a single-file store for all the partitions. A row that made no
    document counts as a document (its rejection record accounts for it)."""
    try:
        read = store.read_shards_with_rejections(partitions)
    except READ_ERRORS as exc:  # bad data fails the checks of these partitions; a bug fails the run
        return dict.fromkeys(partitions, f"shard cannot be read: {exc}")
    out: dict[str, dict[str, Document] | str] = {}
    for p in partitions:
        docs, bad_rows = read.get(p, ([], []))
        by_id = {d.doc_id: d for d in docs}
        by_id.update({r.doc_id: Document(r.doc_id, "", "") for r in bad_rows if r.doc_id not in by_id})
        out[p] = by_id
    return out


def merge(outcomes: list[Outcome], partitions: list[str]) -> Outcome:
    """Per-partition outcomes as one: passed when all passed, details by partition."""
    return all(o[0] for o in outcomes), {p: o[1] for p, o in zip(partitions, outcomes)}


def _unreadable(docs: dict[str, Document] | str) -> Outcome | None:
    return (False, {"reason": docs}) if isinstance(docs, str) else None


def check_partitions(
    rows: pa.Table,
    rejected: pa.Table,
    partitions: list[str],
    *,
    dim: int,
    expected_rows: dict[str, int | None],
    docs: dict[str, dict[str, Document] | str] | None = None,
    accounted: list[Outcome] | None = None,
) -> dict[str, Outcome]:
    """Every check of :data:`CHECKS` over the rows of ``partitions``, in that order.

    Args:
        rows / rejected: the chunk / rejected-document rows of ``partitions``
            (:func:`read_partitions`; ``rejected`` needs ``doc_id`` and ``partition``).
        dim: the vector width the rows must have.
        expected_rows: per partition, the rows its last materialization reported (``None``: unknown, fails).
        docs: per partition, :func:`shards_documents` (the store's current documents), or ``None``
            when documents are not at hand (then ``spans_tile`` skips the text comparison and
            ``accounted`` must be given).
        accounted: per partition, a ready ``documents_accounted`` outcome (used when ``docs`` is ``None``).

    Returns:
        ``{check name: (passed, details)}``; details of the per-partition checks are by partition.
    """
    heads = set(rows.column("head").to_pylist()) if rows.num_rows else set()
    normalized = all(h.endswith("l2") for h in heads)
    rows_of = {p: of_partition(rows, p) for p in partitions}
    if docs is None:
        spans = [spans_tile(rows_of[p], None) for p in partitions]
        accounted = list(accounted or [])
    else:
        spans = [_unreadable(docs[p]) or spans_tile(rows_of[p], docs[p]) for p in partitions]  # type: ignore[arg-type]
        accounted = [
            _unreadable(docs[p]) or documents_accounted(rows_of[p], of_partition(rejected, p), docs[p])  # type: ignore[arg-type]
            for p in partitions
        ]
    return {
        "vectors_valid": vectors_valid(rows, dim, normalized),
        "spans_tile": merge(spans, partitions),
        "unique_chunk_ids": unique_chunk_ids(rows),
        "documents_accounted": merge(accounted, partitions),
        "row_count_matches": merge(
            [row_count_matches(rows_of[p], expected_rows.get(p)) for p in partitions], partitions
        ),
    }


def vectors_valid(rows: pa.Table, dim: int, normalized: bool, atol: float = 1e-3) -> Outcome:
    """Every vector is finite, has ``dim`` values and, when the head normalizes, unit L2 norm (±``atol``)."""
    col = rows.column("vector").combine_chunks() if rows.num_rows else None
    width = col.type.list_size if col is not None else dim
    if width != dim:
        return False, {"reason": f"vector dimension {width} != expected {dim}"}
    if col is None:
        return True, {"rows": 0}
    # shape: [n_rows, dim]
    v = col.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)
    bad_finite = ~np.isfinite(v).all(axis=1)
    norms = np.linalg.norm(np.where(np.isfinite(v), v, 0.0).astype(np.float64), axis=1)
    bad_norm = np.abs(norms - 1.0) > atol if normalized else np.zeros(len(v), bool)
    ids = rows.column("chunk_id").to_pylist()
    bad = [ids[i] for i in np.flatnonzero(bad_finite | bad_norm)[:MAX_LISTED]]
    return not bad, {
        "rows": len(v),
        "non_finite": int(bad_finite.sum()),
        "not_unit_norm": int(bad_norm.sum()),
        "max_norm_error": float(np.abs(norms - 1.0).max()) if normalized else 0.0,
        "examples": bad,
    }


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


def unique_chunk_ids(rows: pa.Table) -> Outcome:
    """No two rows share a ``chunk_id``."""
    ids = rows.column("chunk_id").to_pylist()
    seen: set[str] = set()
    dup = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
    return not dup, {"rows": len(ids), "duplicates": len(dup), "examples": dup[:MAX_LISTED]}


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
