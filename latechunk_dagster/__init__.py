"""latechunk_dagster: late chunking on vLLM, orchestrated by Dagster, stored in LanceDB.

Every public name is imported on first use (PEP 562 ``__getattr__``): ``import latechunk_dagster``
imports nothing of the package but this module, so the vLLM plugin
(:mod:`latechunk_dagster.vllm_plugin`, loaded by every vLLM process) imports only its own modules,
``latechunk search`` does not import Dagster or httpx, and ``from latechunk_dagster import
LateChunker`` imports the core alone. ``__all__`` and ``dir()`` list the same names as before; a
subpackage (``latechunk_dagster.core``, ``.sink``...) is also imported on first attribute access.

Raises (on attribute access):
    AttributeError: a name that is neither a public name nor a subpackage or module of the package.
"""

from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

_CHUNKING = "latechunk_dagster.core.chunking"
_ERRORS = "latechunk_dagster.core.errors"
_RESOURCES = "latechunk_dagster.integration.resources"

#: Each public name and the module that defines it, imported on the name's first use.
_LAZY: dict[str, str] = {
    "LateChunker": "latechunk_dagster.core.chunker",
    **dict.fromkeys(
        ["CharSpans", "ChunkingStrategy", "FixedTokens", "GivenChunks", "MarkdownSections", "Paragraphs", "Sentences"],
        _CHUNKING,
    ),
    "Span": _CHUNKING,
    **dict.fromkeys(
        [
            "DocumentBatchError",
            "DocumentError",
            "DocumentTooLongError",
            "EmptyDocumentError",
            "HeadNotSupportedError",
            "InvalidUnicodeError",
            "LateChunkError",
            "ModelNotSupportedError",
            "NoContentTokensError",
            "NonFiniteVectorError",
            "OffsetsError",
            "SpanError",
            "StrategyFailedError",
            "StrategyTimeoutError",
            "TokenizationMismatchError",
        ],
        _ERRORS,
    ),
    "Chunk": "latechunk_dagster.core.results",
    "ChunkedDocument": "latechunk_dagster.core.results",
    "RemoteLateChunker": "latechunk_dagster.core.server_chunker",
    "late_chunk_assets": "latechunk_dagster.integration.factory",
    "LateChunkDefinitions": "latechunk_dagster.integration.factory",
    "LateChunkTranslator": "latechunk_dagster.integration.translator",
    "LateChunkTableProps": "latechunk_dagster.integration.translator",
    **dict.fromkeys(
        ["VLLMEngineResource", "TransformersEngineResource", "LanceDBResource", "DocumentStoreResource"], _RESOURCES
    ),
    "sync_partitions": "latechunk_dagster.integration.sensors",
    "load_definitions": "latechunk_dagster.integration.sync_definitions",
    "sync_definitions": "latechunk_dagster.integration.sync_definitions",
    "DocumentStore": "latechunk_dagster.sources.files",
    "TooManyRemovalsError": "latechunk_dagster.pipeline.removals",
}


def __getattr__(name: str) -> object:
    """A public name from its module (:data:`_LAZY`), or a subpackage/module of the package, imported now.

    Raises:
        AttributeError: ``name`` is neither.
    """
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'latechunk_dagster' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and every public name, imported or not."""
    return sorted(set(globals()) | set(__all__))


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
