"""latechunk_dagster: late chunking on vLLM, orchestrated by Dagster, stored in LanceDB."""

from latechunk_dagster.chunking import ChunkingStrategy, FixedTokens, Sentences, Span
from latechunk_dagster.engine import LateChunker
from latechunk_dagster.errors import (
    DocumentBatchError,
    DocumentError,
    DocumentTooLongError,
    EmptyDocumentError,
    HeadNotSupportedError,
    InvalidUnicodeError,
    LateChunkError,
    ModelNotSupportedError,
    NoContentTokensError,
    OffsetsError,
    SpanError,
    TokenizationMismatchError,
)
from latechunk_dagster.results import Chunk, ChunkedDocument

__version__ = "0.1.0"

__all__ = [
    "Chunk",
    "ChunkedDocument",
    "ChunkingStrategy",
    "DocumentBatchError",
    "DocumentError",
    "DocumentTooLongError",
    "EmptyDocumentError",
    "FixedTokens",
    "HeadNotSupportedError",
    "InvalidUnicodeError",
    "LateChunkError",
    "LateChunker",
    "ModelNotSupportedError",
    "NoContentTokensError",
    "OffsetsError",
    "Sentences",
    "Span",
    "SpanError",
    "TokenizationMismatchError",
    "__version__",
]
