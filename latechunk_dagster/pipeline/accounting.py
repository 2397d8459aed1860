"""What a partition's materialization did: :class:`PartitionReport`, and the one rule that counts results into it.

Both ways of chunking a partition, the bounded stream
(:func:`~latechunk_dagster.pipeline.materialize_partition`) and the one-shot call
(:func:`~latechunk_dagster.pipeline.oneshot.chunk_partition`), count their results with
:func:`account_results`; the sink only turns the good results into rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.sink.writes import WriteResult
from latechunk_dagster.sources.documents import Document


@dataclass
class GranularityReport:
    """What one partition's materialization did in one granularity's table.

    Attributes:
        table: the table's name (:func:`~latechunk_dagster.sink.schema.granularity_table`).
        chunks_written: chunk rows made and committed to it this run; partition_rows: rows of the
            partition in it afterwards; write: its commit (``None``: nothing changed there, no commit);
        version: its version afterwards.
    """

    table: str = ""
    chunks_written: int = 0
    partition_rows: int = 0
    write: WriteResult | None = None
    version: int = 0


@dataclass
class PartitionReport:
    """What one partition's materialization did.

    Attributes:
        documents: documents of the partition (good ones, skipped included) plus rejected rows.
        documents_skipped / documents_reencoded / documents_deleted: unchanged (rows kept) /
            encoded this run (new or changed, rejected ones included) / removed from the store.
        documents_new: encoded documents that had no rows before.
        rejected: rejection rows written; rejected_reasons: {reason: count}.
        tokens_encoded: document tokens pooled this run (each document token once);
            window_tokens: tokens in the encoder windows, i.e. what the encoder read (more than
            ``tokens_encoded`` when windows overlap); windows, windowed_documents: encoder inputs,
            documents longer than the model.
        chunks_written: chunk rows made (and, by the stream, committed) this run; word_cuts: those of
            them that end inside a word (a word longer than the budget, issue 46); partition_rows:
            rows of the partition in the table afterwards (with several granularities: the sums over
            their tables).
        engine_seconds: time inside ``chunker.encode`` (the engine thread); prepare_seconds: time
            inside ``chunker.prepare`` (the calling thread); finish_seconds: ``chunker.pool_results`` and
            the Arrow rows (the writer thread); seconds: wall time of the whole call. With the
            overlap, ``seconds`` approaches the largest of the three, not their sum.
        batches: engine calls; paths: documents per engine path.
        write: the chunk table commit (``None``: nothing changed, no commit); with several
            granularities, the first (finest) table's.
        granularities: per granularity (``""`` alone for a single strategy), finest first, its
            table's :class:`GranularityReport`.
        fingerprint: :func:`~latechunk_dagster.sources.documents.fingerprint_of` the items read.
        chunked_doc_ids: sorted doc_ids that have rows after the call.
    """

    partition: str
    documents: int = 0
    documents_skipped: int = 0
    documents_reencoded: int = 0
    documents_deleted: int = 0
    documents_new: int = 0
    rejected: int = 0
    rejected_reasons: dict[str, int] = field(default_factory=dict)
    tokens_encoded: int = 0
    window_tokens: int = 0
    windows: int = 0
    windowed_documents: int = 0
    chunks_written: int = 0
    word_cuts: int = 0
    partition_rows: int = 0
    engine_seconds: float = 0.0
    prepare_seconds: float = 0.0
    finish_seconds: float = 0.0
    seconds: float = 0.0
    batches: int = 0
    paths: dict[str, int] = field(default_factory=dict)
    write: WriteResult | None = None
    fingerprint: str = ""
    chunked_doc_ids: list[str] = field(default_factory=list)
    granularities: dict[str, GranularityReport] = field(default_factory=dict)

    def count_rejection(self, reason: str) -> None:
        """One more document rejected for ``reason``."""
        self.rejected_reasons[reason] = self.rejected_reasons.get(reason, 0) + 1

    def count_rows(self, granularity: str, rows: int) -> None:
        """``rows`` more chunk rows made for ``granularity``'s table (and in the total)."""
        self.chunks_written += rows
        self.granularities.setdefault(granularity, GranularityReport()).chunks_written += rows


@dataclass(frozen=True)
class DocumentSummary:
    """What the accounting reads of a chunked document, without its chunks and vectors: what a host
    worker process (:mod:`latechunk_dagster.pipeline.hostpool`) sends back beside the Arrow rows.

    Attributes:
        n_tokens: ``len(token_ids)``; windows: encoder inputs; path: the engine path; word_cuts: its
            chunks that end inside a word (:func:`word_cuts`).
    """

    n_tokens: int
    windows: int
    path: str
    word_cuts: int = 0


def word_cuts(res: ChunkedDocument | DocumentSummary) -> int:
    """Chunks of a chunked document (or of its summary) that end inside a word: cuts in a word longer
    than the budget, the only ones a boundary strategy makes (issue 46, ``Chunk.word_cut``)."""
    return res.word_cuts if isinstance(res, DocumentSummary) else sum(c.word_cut for c in res.chunks)


def token_count(res: ChunkedDocument | DocumentSummary) -> int:
    """Document tokens of a chunked document (or of its summary)."""
    return res.n_tokens if isinstance(res, DocumentSummary) else len(res.token_ids)


def account_results(
    report: PartitionReport, batch: list[Document], results: list, window_length: int
) -> tuple[list[tuple[Document, ChunkedDocument]], list[tuple[Document, DocumentError]]]:
    """Count one batch's results (``chunker.pool_results`` / ``chunker.chunk``, ``errors="return"``) into ``report``.

    Args:
        batch: the documents, in the order of ``results``.
        results: per document a ``ChunkedDocument`` (or its :class:`DocumentSummary`) or a ``DocumentError``.
        window_length: the chunker's encoder window (for :func:`window_tokens`).

    Returns:
        ``(good, failed)``: (document, result) of the chunked documents and (document, error) of
        the rejected ones, each in batch order.
    """
    good: list[tuple[Document, ChunkedDocument]] = []
    failed: list[tuple[Document, DocumentError]] = []
    for doc, res in zip(batch, results):
        if isinstance(res, DocumentError):
            report.count_rejection(res.reason)
            failed.append((doc, res))
            continue
        report.tokens_encoded += token_count(res)
        report.word_cuts += word_cuts(res)
        report.window_tokens += window_tokens(res, window_length)
        report.windows += res.windows
        report.windowed_documents += res.windows > 1
        report.paths[res.path] = report.paths.get(res.path, 0) + 1
        good.append((doc, res))
    return good, failed


def window_tokens(res: ChunkedDocument | DocumentSummary, window_length: int) -> int:
    """Tokens the encoder read for one document: its tokens, or ``windows x window`` when windowed."""
    n = token_count(res)
    return n if res.windows == 1 else min(n, window_length) * res.windows
