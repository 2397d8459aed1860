"""A LangChain ``Embeddings`` that embeds queries exactly as the chunk table's model does."""

from __future__ import annotations

import os
from typing import Any

from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.vectors import OwnedChunker, embedder_chunker, query_vectors, text_vectors
from latechunk_dagster.core.chunker import LateChunker

try:
    from langchain_core.embeddings import Embeddings
except ImportError as exc:  # pragma: no cover - the extra is installed where the tests run
    raise missing_extra("langchain-core", exc) from exc


class LangChainEmbeddings(OwnedChunker, Embeddings):
    """Query vectors of ``chunker``'s model for ``langchain_community.vectorstores.LanceDB``.

    ``embed_query`` is :meth:`LateChunker.embed_queries <latechunk_dagster.core.chunker.LateChunker.embed_queries>`
    (query prompt, mean, head and cut as the chunk vectors were made), so a store search over the
    chunk table ranks as ``latechunk search`` does. ``embed_documents`` embeds each text whole as
    a document (not a late-chunk vector; the table's rows come from the pipeline).

    Args:
        chunker, table, model_options: as :func:`~latechunk_dagster.clients.vectors.embedder_chunker`
            (a model directory, or an open chunker whose lifetime is the caller's; the table it must
            reproduce; options for a model directory).

    Returns (both methods): lists of ``embedding_dim`` floats (the float32 values).

    Raises:
        ValueError: a table the model cannot reproduce; ``model_options`` beside a ready chunker.
    """

    def __init__(
        self,
        chunker: LateChunker | str | os.PathLike[str],
        *,
        table: Any = None,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        self._chunker, self._owned = embedder_chunker(chunker, model_options, table)

    @property
    def chunker(self) -> LateChunker:
        """The chunker the vectors come from (the one handed in, or the one loaded from the directory)."""
        return self._chunker

    def embed_query(self, text: str) -> list[float]:
        """The query's vector; ``ValueError`` for a query longer than the model (never windowed)."""
        return query_vectors(self._chunker, [text])[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Each text's whole-document vector, in one engine call."""
        return text_vectors(self._chunker, texts)
