"""The bookkeeping of one partition's run: settings, stored documents, counts, and the token estimate.

Made by ``_begin`` in :mod:`latechunk_dagster.pipeline.partition`; read and updated by the stream
(:mod:`latechunk_dagster.pipeline.stream`) and by the steps after it (systemic check, commit, report).

**Granularities.** A run has one or more granularities (:mod:`latechunk_dagster.core.granularities`),
each with its own table, vector configuration and stored documents. A document is encoded (once)
when any granularity table's stored ``(doc_sha256, vector_config)`` differs from the document's
(:meth:`PartitionRun.admit`: its *needs*), and its rows go only to the tables that need them; in the
others its rows are kept. A document rejected now loses its rows in every table (a document is
chunked in every granularity or none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.pipeline.accounting import PartitionReport, account_results, token_count
from latechunk_dagster.pipeline.progress import ProgressMeter
from latechunk_dagster.sink.rows import rejection_row
from latechunk_dagster.sources.documents import Document, RejectedRow, converted_vector_config
from latechunk_dagster.sources.stamps import UnchangedFile


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
    #: per document being encoded: the granularities whose tables need its rows (until it is counted)
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: per granularity: encoded documents whose rows in that table stay (its table did not need them)
    kept: dict[str, set[str]] = field(default_factory=dict)
    #: files neither fetched nor converted: their source stamp equals their rows' (a subset of ``skipped``)
    unfetched: int = 0
    #: documents skipped by ``doc_sha256`` whose file's source stamp is not their rows' (a touched file,
    #: or one whose stamp was unsure): ``{doc_id: stamp}``, written on their rows at the commit
    restamp: dict[str, str] = field(default_factory=dict)


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
    strategy: ChunkingStrategy | Mapping[str, ChunkingStrategy]
    run_id: str
    force: bool
    budget: int
    #: per granularity (finest first; ``""`` alone for a single strategy): its vector configuration,
    #: its table's stored documents ``{doc_id: (doc_sha256, vector_config)}``, its rows' lineage
    configs: dict[str, str]
    existing: dict[str, dict[str, tuple[str, str | None]]]
    now: datetime
    lineages: dict[str, dict[str, Any]]
    #: per granularity, the next (coarser) one's name (``None``: the last one)
    parents: dict[str, str | None]
    meter: ProgressMeter
    estimator: TokenEstimate
    t_start: float
    report: PartitionReport
    state: RunState = field(default_factory=RunState)

    @property
    def names(self) -> list[str]:
        """The granularities, finest first."""
        return list(self.configs)

    @property
    def context(self) -> tuple[str, dict[str, dict[str, Any]], int, dict[str, str | None]]:
        """What :func:`~latechunk_dagster.pipeline.finish.finish_rows` needs besides the batch."""
        return self.partition, self.lineages, self.chunker.embedding_dim, self.parents

    def stored_ids(self) -> set[str]:
        """doc_ids with rows in any granularity table before the call."""
        return set().union(*self.existing.values())

    def unchanged(self, doc_id: str, stamp: str, lineages: frozenset[str | None]) -> str | None:
        """The stored ``doc_sha256`` of a file whose rows are current in every granularity table (the
        same source stamp, a vector configuration of this run's with one of ``lineages``' converters),
        else ``None``: the store fetches it (:class:`~latechunk_dagster.sources.stamps.ShardItems`).
        Never one with ``force``."""
        if self.force:
            return None
        shas = set()
        for g, config in self.configs.items():
            stored = self.existing[g]
            if getattr(stored, "stamps", {}).get(doc_id) != stamp or doc_id not in stored:
                return None
            sha, vector_config = stored[doc_id]
            if vector_config not in {converted_vector_config(config, lineage) for lineage in lineages}:
                return None
            shas.add(sha)
        return shas.pop() if len(shas) == 1 else None

    def admit(self, item: Document | RejectedRow | UnchangedFile) -> Document | None:
        """Record one item read; the document to encode, or ``None`` (a reader's rejection, a file not
        fetched (:meth:`unchanged`), or a document whose text and vector configuration equal its stored
        rows' in every granularity table)."""
        st = self.state
        st.items_read += 1
        if isinstance(item, UnchangedFile):
            st.fingerprint_pairs.append(Document(item.doc_id, "", item.sha256))
            st.present.add(item.doc_id)
            st.skipped.add(item.doc_id)
            st.unfetched += 1
            self.meter.add(1, 0)
            return None
        st.fingerprint_pairs.append(item)
        if isinstance(item, RejectedRow):
            st.reader_rejections.append(item)
            return None
        st.present.add(item.doc_id)
        needs = tuple(
            g
            for g, config in self.configs.items()
            if self.force or self.existing[g].get(item.doc_id) != (item.sha256, item.vector_config(config))
        )
        if not needs:
            st.skipped.add(item.doc_id)
            stamp = item.source_stamp
            if stamp and any(getattr(self.existing[g], "stamps", {}).get(item.doc_id) != stamp for g in self.configs):
                st.restamp[item.doc_id] = stamp
            self.meter.add(1, 0)
            return None
        st.needs[item.doc_id] = needs
        return item

    def needs_of(self, batch: list[Document]) -> list[tuple[str, ...]]:
        """Per document of ``batch``, the granularities whose tables need its rows (:meth:`admit`; every
        one for a doc_id the iterator gave twice, whose first copy was counted already)."""
        every = tuple(self.configs)
        return [self.state.needs.get(d.doc_id, every) for d in batch]

    def account(self, batch: list[Document], results: list) -> list[tuple[Document, ChunkedDocument]]:
        """Count a finished batch into the report and the bookkeeping; its chunked (document, result) pairs.

        ``results``: per document one granularity's ``ChunkedDocument`` (or its summary: the tokens,
        windows and path are those of every granularity) or the ``DocumentError`` that refused it."""
        good, failed = account_results(self.report, batch, results, self.chunker.window_length)
        self.state.attempted.update(doc.doc_id for doc in batch)
        self.state.chunked.update(doc.doc_id for doc, _ in good)
        for doc, _ in good:
            needs = self.state.needs.pop(doc.doc_id, ())
            for g in self.configs:
                if g not in needs:
                    self.state.kept.setdefault(g, set()).add(doc.doc_id)
        for doc, _ in failed:
            self.state.needs.pop(doc.doc_id, None)
        self.state.rejections.extend(
            rejection_row(doc.doc_id, doc.sha256, self.partition, err.reason, err.detail, self.run_id, self.now)
            for doc, err in failed
        )
        return good
