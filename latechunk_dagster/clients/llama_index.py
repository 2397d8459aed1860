"""A LlamaIndex ``BaseEmbedding`` that embeds queries exactly as the chunk table's model does."""

from __future__ import annotations

import os
from typing import Any

from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.vectors import embedder_chunker, query_vectors, text_vectors
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
        chunker: the model directory that wrote the table: loaded on the light transformers engine
            (no vLLM; the same vectors within 1e-6) and closed by :meth:`close` (or the ``with``
            block); or an open ``LateChunker`` or ``RemoteLateChunker`` (a vLLM server) of that model,
            whose lifetime is the caller's.
        table: the LanceDB chunk table the store reads (optional): refused at once, naming the
            difference, when its vectors are of another model fingerprint, head or width.
        model_options: ``LateChunker`` options for a model directory (``dimensions``, ``trust_remote_code``...).
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

    def close(self) -> None:
        """Close the chunker this embedder loaded (a chunker handed to it stays open)."""
        if self._owned:
            self._chunker.close()

    def __enter__(self) -> LlamaIndexEmbedding:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
