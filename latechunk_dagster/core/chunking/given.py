"""``GivenChunks``: each document's own chunks (from another splitter, or a store column), late-chunked.

:class:`~latechunk_dagster.core.chunking.char_spans.CharSpans` applies one list of ranges to every
document of a call. ``GivenChunks`` takes the chunks of *each* document, so a whole batch of
documents that were split elsewhere (the jina / voyage API shape: a list of chunks per document)
is encoded in one engine call, as every other strategy is. A document's chunks are either
character ranges or the chunk texts themselves; texts are located in the document in order
(:func:`locate_chunks`), and the ranges are then exactly ``CharSpans``'s (same rules, same
spans), so a batch of ``GivenChunks`` documents gives the vectors of one ``CharSpans`` call per
document.

Where the chunks come from: ``LateChunker.chunk(texts, GivenChunks(), chunks=[...])``, or in
the pipeline a store column (``DocumentStore(chunks_column=...)``, carried on
:attr:`~latechunk_dagster.sources.documents.Document.chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.core.chunking.char_spans import CharSpans
from latechunk_dagster.core.errors import SpanError
from latechunk_dagster.core.tokenization import Tokenization

#: What one document's given chunks may be: ``(start, end)`` character ranges, or the chunk texts.
GivenChunkList = Sequence[tuple[int, int]] | Sequence[Sequence[int]] | Sequence[str]


def locate_chunks(text: str, chunks: Any) -> tuple[tuple[int, int], ...]:
    """The character ranges of a document's given chunks.

    Args:
        text: the document's text as passed (a leading byte order mark is index 0).
        chunks: ``(start, end)`` int pairs (Python ``str`` indices, returned as they are; ``CharSpans``
            checks them against the text and its tokens), or the chunk texts in document order: chunk
            ``k`` is found at its first occurrence that starts after chunk ``k - 1``'s start (so an
            overlapping chunk is found, and then refused by ``CharSpans`` as an overlap).

    Returns:
        ``((start, end), ...)``, one per chunk.

    Raises:
        SpanError: no chunks, a mix of ranges and texts, a value that is neither, an empty chunk
            text, or a chunk text not found in the document in order (naming the first such chunk;
            the chunker fills in the document).
    """
    if isinstance(chunks, str | bytes) or not isinstance(chunks, Sequence) or not chunks:
        got = repr(chunks)[:200]
        raise _fail(f"given chunks must be a non-empty list of (start, end) ranges or of chunk texts, got {got}")
    if all(isinstance(c, str) for c in chunks):
        ranges: list[tuple[int, int]] = []
        after = 0
        for k, c in enumerate(chunks):
            if not c:
                raise _fail(f"chunk {k} is an empty text")
            start = text.find(c, after)
            if start < 0:
                where = f"after chunk {k - 1} {ranges[-1]}" if k else "in the document"
                raise _fail(f"chunk {k} {_show(c)} is not found {where} (given chunks must be in document order)")
            ranges.append((start, start + len(c)))
            after = start + 1
        return tuple(ranges)
    if any(isinstance(c, str) for c in chunks):
        k = next(k for k, c in enumerate(chunks) if not isinstance(c, str))
        raise _fail(f"chunk {k} {chunks[k]!r} is not a text, but other chunks are: give all ranges or all texts")
    try:
        return CharSpans(ranges=chunks).ranges
    except ValueError as exc:
        raise _fail(str(exc)) from None


@dataclass(frozen=True)
class GivenChunks(ChunkingStrategy):
    """One chunk per given chunk of each document (module docstring): the document's own split.

    The chunks of a document are read from the call (``LateChunker.chunk(..., chunks=)``) or from
    the document (:attr:`Document.chunks <latechunk_dagster.sources.documents.Document.chunks>`),
    never from the strategy, so the strategy itself has no parameters; its lineage records
    ``given_chunks()`` and the chunks are part of each document's ``doc_sha256``.

    The rules for the ranges are :class:`CharSpans`'s: sorted, non-overlapping, non-empty, inside the
    text, each holding a token's first character, no boundary inside a token; text between chunks
    joins the following chunk. A document whose chunks break a rule is rejected alone
    (``SpanError``, reason ``bad_spans``) naming the first chunk that does not fit.

    Example:
        >>> GivenChunks().for_document("Berlin. It is big.", ["Berlin.", "It is big."]).ranges
        ((0, 7), (8, 18))
    """

    name: ClassVar[str] = "given_chunks"

    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        raise _fail("given_chunks needs each document's own chunks: pass chunks= to chunk(), or a store chunks_column")

    def for_document(self, text: str, chunks: Any) -> CharSpans:
        """The ``CharSpans`` of one document's given chunks (:func:`locate_chunks`).

        Raises:
            SpanError: as :func:`locate_chunks` (``None``: no chunks were given for the document).
        """
        if chunks is None:
            raise _fail("no chunks were given for this document (given_chunks needs a list per document)")
        return _GivenRanges(ranges=locate_chunks(text, chunks))


@dataclass(frozen=True)
class _GivenRanges(CharSpans):
    """``CharSpans`` of one document's given chunks: the same rules, errors that say "chunk k"."""

    unit: ClassVar[str] = "chunk"


def _show(chunk: str) -> str:
    return repr(chunk if len(chunk) <= 40 else chunk[:37] + "...")


def _fail(detail: str) -> SpanError:
    # The chunker re-raises with the document's real index and id: type(exc)(i, doc_id, exc.detail).
    return SpanError(-1, "?", detail)
