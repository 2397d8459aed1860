"""The bookkeeping of one partition's run: settings, stored documents, counts, and the token estimate.

Made by ``_begin`` in :mod:`latechunk_dagster.pipeline.partition`; read and updated by the stream
(:mod:`latechunk_dagster.pipeline.stream`) and by the steps after it (systemic check, commit, report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.pipeline.accounting import PartitionReport, account_results, token_count
from latechunk_dagster.pipeline.progress import ProgressMeter
from latechunk_dagster.sink.rows import rejection_row
from latechunk_dagster.sources.documents import Document, RejectedRow


class LightList(list):
    """Keeps (doc_id, sha256) stand-ins instead of whole documents (memory stays per document, not per text)."""

    def append(self, item: Document | RejectedRow) -> None:  # type: ignore[override]
        super().append(Document(item.doc_id, "", item.sha256) if isinstance(item, Document) else item)


@dataclass
class RunState:
    """Bookkeeping of the documents of one call (ids and hashes only, never texts)."""

    items_read: int = 0
    present: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    attempted: set[str] = field(default_factory=set)
    chunked: set[str] = field(default_factory=set)
    reader_rejections: list[RejectedRow] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    fingerprint_pairs: list[Document | RejectedRow] = field(default_factory=LightList)


class TokenEstimate:
    """Document tokens of a text before tokenizing it: ``chars * ratio + specials`` (ratio 1.0, a
    bound for WordPiece/BPE, until a batch has been encoded; then 1.25 x the observed tokens per
    char, at most 1.0)."""

    def __init__(self, specials: int) -> None:
        self.specials = specials
        self.ratio = 1.0
        self._chars = 0
        self._tokens = 0

    def estimate(self, text: str) -> int:
        return int(len(text) * self.ratio) + self.specials

    def observe(self, good: list[tuple[Document, ChunkedDocument]]) -> None:
        self._chars += sum(len(doc.text) for doc, _ in good)
        self._tokens += sum(max(token_count(res) - self.specials, 0) for _, res in good)
        if self._chars:
            self.ratio = min(1.0, 1.25 * self._tokens / self._chars)


def special_tokens(chunker: LateChunker) -> int:
    """Special and prefix tokens every document gets."""
    prefix = len(chunker.tokenizer(chunker.prefix, add_special_tokens=False)["input_ids"]) if chunker.prefix else 0
    return prefix + chunker.tokenizer.num_special_tokens_to_add(pair=False)


@dataclass
class PartitionRun:
    """One call: its settings, the partition's stored documents, the report and the bookkeeping."""

    chunker: LateChunker
    partition: str
    strategy: ChunkingStrategy
    run_id: str
    force: bool
    budget: int
    config: str
    existing: dict[str, tuple[str, str | None]]
    now: datetime
    row_lineage: dict[str, Any]
    meter: ProgressMeter
    estimator: TokenEstimate
    t_start: float
    report: PartitionReport
    state: RunState = field(default_factory=RunState)

    def admit(self, item: Document | RejectedRow) -> Document | None:
        """Record one item read; the document to encode, or ``None`` (a reader's rejection, or a
        document whose text and vector configuration equal its stored rows')."""
        st = self.state
        st.items_read += 1
        st.fingerprint_pairs.append(item)
        if isinstance(item, RejectedRow):
            st.reader_rejections.append(item)
            return None
        st.present.add(item.doc_id)
        if not self.force and self.existing.get(item.doc_id) == (item.sha256, self.config):
            st.skipped.add(item.doc_id)
            self.meter.add(1, 0)
            return None
        return item

    def account(self, batch: list[Document], results: list) -> list[tuple[Document, ChunkedDocument]]:
        """Count a finished batch into the report and the bookkeeping; its chunked (document, result) pairs."""
        good, failed = account_results(self.report, batch, results, self.chunker.window_length)
        self.state.attempted.update(doc.doc_id for doc in batch)
        self.state.chunked.update(doc.doc_id for doc, _ in good)
        self.state.rejections.extend(
            rejection_row(doc.doc_id, doc.sha256, self.partition, err.reason, err.detail, self.run_id, self.now)
            for doc, err in failed
        )
        return good
