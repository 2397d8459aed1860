"""latechunk_dagster: late chunking on vLLM, orchestrated by Dagster, stored in LanceDB."""

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import (
    CharSpans,
    ChunkingStrategy,
    FixedTokens,
    GivenChunks,
    MarkdownSections,
    Paragraphs,
    Sentences,
    Span,
)
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
    StrategyTimeoutError,
    TokenizationMismatchError,
)
from latechunk_dagster.core.results import Chunk, ChunkedDocument

__version__ = "0.1.0"

#: Names imported on first use: the Dagster side, so that ``import latechunk_dagster`` (the core)
#: does not import Dagster; the server chunker, so that it does not import httpx (``latechunk search``
#: never uses it).
_INTEGRATION = {
    "RemoteLateChunker": "latechunk_dagster.core.remote",
    "late_chunk_assets": "latechunk_dagster.integration.factory",
    "LateChunkDefinitions": "latechunk_dagster.integration.factory",
    "LateChunkTranslator": "latechunk_dagster.integration.translator",
    "LateChunkTableProps": "latechunk_dagster.integration.translator",
    "VLLMEngineResource": "latechunk_dagster.integration.resources",
    "TransformersEngineResource": "latechunk_dagster.integration.resources",
    "LanceDBResource": "latechunk_dagster.integration.resources",
    "DocumentStoreResource": "latechunk_dagster.integration.resources",
    "sync_partitions": "latechunk_dagster.integration.sensors",
    "load_definitions": "latechunk_dagster.integration.sync_definitions",
    "sync_definitions": "latechunk_dagster.integration.sync_definitions",
    "DocumentStore": "latechunk_dagster.sources.files",
    "TooManyRemovalsError": "latechunk_dagster.pipeline.removals",
}


def __getattr__(name: str) -> object:
    if name in _INTEGRATION:
        import importlib

        return getattr(importlib.import_module(_INTEGRATION[name]), name)
    raise AttributeError(f"module 'latechunk_dagster' has no attribute {name!r}")


__all__ = [
    "CharSpans",
    "Chunk",
    "ChunkedDocument",
    "ChunkingStrategy",
    "DocumentBatchError",
    "DocumentStore",
    "DocumentStoreResource",
    "DocumentError",
    "DocumentTooLongError",
    "EmptyDocumentError",
    "FixedTokens",
    "GivenChunks",
    "HeadNotSupportedError",
    "InvalidUnicodeError",
    "LateChunkError",
    "LateChunkDefinitions",
    "LateChunkTableProps",
    "LateChunkTranslator",
    "LateChunker",
    "LanceDBResource",
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
    "StrategyTimeoutError",
    "TokenizationMismatchError",
    "TooManyRemovalsError",
    "TransformersEngineResource",
    "VLLMEngineResource",
    "__version__",
    "late_chunk_assets",
    "load_definitions",
    "sync_definitions",
    "sync_partitions",
]
