"""latechunk_dagster: late chunking on vLLM, orchestrated by Dagster, stored in LanceDB."""

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import (
    CharSpans,
    ChunkingStrategy,
    FixedTokens,
    MarkdownSections,
    Paragraphs,
    Sentences,
    Span,
)
from latechunk_dagster.core.engines.vllm_server import RemoteLateChunker
from latechunk_dagster.core.errors import (
    DocumentBatchError,
    DocumentError,
    DocumentTooLongError,
    EmptyDocumentError,
    HeadNotSupportedError,
    InvalidUnicodeError,
    LateChunkError,
    ModelNotSupportedError,
    NoContentTokensError,
    NonFiniteVectorError,
    OffsetsError,
    SpanError,
    StrategyFailedError,
    TokenizationMismatchError,
)
from latechunk_dagster.core.results import Chunk, ChunkedDocument

__version__ = "0.1.0"

__all__ = [
    "CharSpans",
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
    "MarkdownSections",
    "ModelNotSupportedError",
    "NoContentTokensError",
    "NonFiniteVectorError",
    "OffsetsError",
    "Paragraphs",
    "RemoteLateChunker",
    "Sentences",
    "Span",
    "SpanError",
    "StrategyFailedError",
    "TokenizationMismatchError",
    "__version__",
]
