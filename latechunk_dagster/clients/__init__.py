"""Query embedders for the stock LangChain and LlamaIndex LanceDB stores (extra ``clients``).

The chunk table is read by ``langchain_community.vectorstores.LanceDB`` and LlamaIndex's
``LanceDBVectorStore`` as they are (its ``id`` and ``metadata`` columns, :mod:`latechunk_dagster.sink.schema`);
what they need from this package is the query vector, embedded exactly as the chunk vectors'
model expects (its query prompt, pooling, head and Matryoshka cut): :meth:`LateChunker.embed_queries
<latechunk_dagster.core.chunker.LateChunker.embed_queries>`. Given a model directory, an embedder
loads it on the light transformers engine (no vLLM: a second to start, the same vectors within 1e-6,
:func:`~latechunk_dagster.core.chunker.query_chunker`); given a chunker (in process, or a vLLM server's
:class:`~latechunk_dagster.core.server_chunker.RemoteLateChunker`) it uses that one. Given the table too, it
refuses one whose vectors its model cannot reproduce, naming the difference.

* :class:`LangChainEmbeddings`: a ``langchain_core.embeddings.Embeddings``.
* :class:`LlamaIndexEmbedding`: a ``llama_index.core.base.embeddings.base.BaseEmbedding``.

The stock stores read one granularity's table by its name (``chunks_small``). What they cannot do,
small-to-big (match the fine chunks, return their parents) and the package's hybrid search, the
retrievers do, on :func:`~latechunk_dagster.sink.search.search`:

* :class:`LangChainRetriever`: a ``langchain_core.retrievers.BaseRetriever``.
* :class:`LlamaIndexRetriever`: a ``llama_index.core.retrievers.BaseRetriever``.

Each is imported on first use, so that ``import latechunk_dagster.clients`` needs neither library.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "LangChainEmbeddings": "latechunk_dagster.clients.langchain",
    "LlamaIndexEmbedding": "latechunk_dagster.clients.llama_index",
    "LangChainRetriever": "latechunk_dagster.clients.langchain_retriever",
    "LlamaIndexRetriever": "latechunk_dagster.clients.llama_index_retriever",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def missing_extra(library: str, exc: ImportError) -> ImportError:
    """The error for a client library that is not installed: names the extra that installs it."""
    return ImportError(f"{library} is not installed: pip install 'latechunk-dagster[clients]' ({exc})")
