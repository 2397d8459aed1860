"""Typed errors: one class per reason a document or a model is refused.

Every document error names the document (its index in the call and its id)
and the reason, so a rejected row in the pipeline says what went wrong.
Source of the rules: ``docs/contract.md`` sections 4 and 6.
"""

from __future__ import annotations


class LateChunkError(Exception):
    """Base class of every error raised by latechunk_dagster."""


class DocumentError(LateChunkError):
    """A single document cannot be late-chunked. The other documents of the call are unaffected.

    Attributes:
        index: position of the document in the ``chunk()`` call.
        doc_id: the caller's id for the document (defaults to ``str(index)``).
        reason: a short machine-friendly name of the reason (the subclass's ``reason``).
    """

    reason = "invalid_document"

    def __init__(self, index: int, doc_id: str, detail: str) -> None:
        self.index = index
        self.doc_id = doc_id
        self.detail = detail
        super().__init__(f"document {doc_id!r} (index {index}): {detail}")

    def __reduce__(self) -> tuple:
        # pickled with its fields (a host worker process sends it back), not the formatted message
        return (type(self), (self.index, self.doc_id, self.detail))


class EmptyDocumentError(DocumentError):
    """The text is empty or whitespace only."""

    reason = "empty_text"


class InvalidUnicodeError(DocumentError):
    """The text is not valid Unicode (e.g. a lone surrogate), so it cannot be encoded as UTF-8, or it
    is UTF-16 / UTF-32 bytes read as UTF-8 (a NUL between its characters)."""

    reason = "invalid_unicode"


class NoContentTokensError(DocumentError):
    """The tokenizer produced no token with a source range (only special tokens)."""

    reason = "no_content_tokens"


class OffsetsError(DocumentError):
    """The tokenizer's offsets are missing, out of order or outside the text."""

    reason = "bad_offsets"


class DocumentTooLongError(DocumentError):
    """The document has more tokens than the model takes and windowing is switched off, or its windows
    cannot be planned with the chunker's window settings (its own special and prefix tokens leave no
    room for the overlap)."""

    reason = "too_long"


class NonFiniteVectorError(DocumentError):
    """The encoder produced NaN or infinite states for the document (e.g. fp16 overflow)."""

    reason = "non_finite_vector"


class SpanError(DocumentError):
    """Caller-given spans overlap, fall outside the text or split a token."""

    reason = "bad_spans"


class StrategyFailedError(DocumentError):
    """The chunking strategy raised on this document (e.g. the sentence segmenter failed)."""

    reason = "strategy_failed"


class StrategyTimeoutError(DocumentError):
    """The chunking strategy took longer than the per-document time bound on this document.

    The strategy was stopped (see :mod:`latechunk_dagster.core.timebound`); only this document
    is rejected, the rest of the call goes on.
    """

    reason = "strategy_timeout"


class InvalidQueryError(LateChunkError, ValueError):
    """A search query cannot be embedded: not a ``str``, or not valid Unicode (a lone surrogate,
    e.g. a byte that is not UTF-8 on a command line, or half an emoji from a JavaScript client).

    A ``ValueError`` as well, like the other refusals of a query (longer than the model, nothing
    after the prompt).

    Attributes:
        query: the query as given; index: its position in a batch call (``None`` for one query);
        detail: why it is refused (names the character and its position).
    """

    def __init__(self, query: object, detail: str, index: int | None = None) -> None:
        self.query, self.detail, self.index = query, detail, index
        where = "query" if index is None else f"query {index}"
        super().__init__(f"{where} {query!r}: {detail}")

    def __reduce__(self) -> tuple:
        return (type(self), (self.query, self.detail, self.index))


class TokenizationMismatchError(LateChunkError):
    """vLLM tokenized a document differently from our one tokenization pass (contract section 1)."""


class EngineAnswerError(LateChunkError):
    """The engine (or a server) answered a request with another number or shape of results than
    asked for: its answers cannot be matched to the documents, so none is used."""


class ModelNotSupportedError(LateChunkError):
    """The model is refused for late chunking (contract section 4) unless the caller opts in."""


class HeadNotSupportedError(LateChunkError):
    """The model's embedding head cannot be applied after a span mean on this engine path."""


class DocumentBatchError(LateChunkError):
    """Some documents of a ``chunk()`` call failed and ``errors="raise"`` was asked for.

    Attributes:
        results: one entry per input document, in input order: a ``ChunkedDocument``
            for each document that succeeded, the ``DocumentError`` for each that failed.
        failures: the ``DocumentError`` instances only.
    """

    def __init__(self, results: list, failures: list[DocumentError]) -> None:
        self.results = results
        self.failures = failures
        lines = "; ".join(str(f) for f in failures[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} of {len(results)} documents failed: {lines}{more}")
