"""A LlamaIndex ``BaseEmbedding`` that embeds queries exactly as the chunk table's model does."""

from __future__ import annotations

import os
from typing import Any

from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.vectors import OwnedChunker, embedder_chunker, query_vectors, text_vectors
from latechunk_dagster.core.chunker import LateChunker

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - the extra is installed where the tests run
    raise missing_extra("llama-index-core", exc) from exc


class LlamaIndexEmbedding(OwnedChunker, BaseEmbedding):
    """Query vectors of ``chunker``'s model for LlamaIndex's ``LanceDBVectorStore``.

    The query embedding is :meth:`LateChunker.embed_queries
    <latechunk_dagster.core.chunker.LateChunker.embed_queries>` (query prompt, mean, head and cut
    as the chunk vectors were made); a text embedding is the text embedded whole as a document.
    ``model_name`` is the model's name; LlamaIndex batches texts by ``embed_batch_size``.

    Args:
        chunker, table, model_options: as :func:`~latechunk_dagster.clients.vectors.embedder_chunker`
            (a model directory, or an open chunker whose lifetime is the caller's; the table it must
            reproduce; options for a model directory).
        **kwargs: ``BaseEmbedding`` fields (``embed_batch_size``, ``callback_manager``...).

    Raises:
        ValueError: a table the model cannot reproduce; ``model_options`` beside a ready chunker.
    """

    _chunker: Any = PrivateAttr()
    _owned: bool = PrivateAttr(default=False)

    def __init__(
        self,
        chunker: LateChunker | str | os.PathLike[str],
        *,
        table: Any = None,
        model_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        live, owned = embedder_chunker(chunker, model_options, table)
        kwargs.setdefault("model_name", live.settings.model_name)
        super().__init__(**kwargs)
        self._chunker, self._owned = live, owned

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
