"""A LlamaIndex ``BaseEmbedding`` that embeds queries exactly as the chunk table's model does."""

from __future__ import annotations

from typing import Any

from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.vectors import query_vectors, text_vectors
from latechunk_dagster.core.chunker import LateChunker

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - the extra is installed where the tests run
    raise missing_extra("llama-index-core", exc) from exc


class LlamaIndexEmbedding(BaseEmbedding):
    """Query vectors of ``chunker``'s model for LlamaIndex's ``LanceDBVectorStore``.

    The query embedding is :meth:`LateChunker.embed_queries
    <latechunk_dagster.core.chunker.LateChunker.embed_queries>` (query prompt, mean, head and cut
    as the chunk vectors were made); a text embedding is the text embedded whole as a document.
    ``model_name`` is the model's name; LlamaIndex batches texts by ``embed_batch_size``.

    Args:
        chunker: an open ``LateChunker`` or ``RemoteLateChunker`` (a vLLM server) of the model that
            wrote the table; its lifetime is the caller's.
        **kwargs: ``BaseEmbedding`` fields (``embed_batch_size``, ``callback_manager``...).
    """

    _chunker: Any = PrivateAttr()

    def __init__(self, chunker: LateChunker, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", chunker.settings.model_name)
        super().__init__(**kwargs)
        self._chunker = chunker

    @classmethod
    def class_name(cls) -> str:
        return "LateChunkLlamaIndexEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return query_vectors(self._chunker, [query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return text_vectors(self._chunker, [text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return text_vectors(self._chunker, texts)
