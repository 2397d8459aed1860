"""A LangChain ``Embeddings`` that embeds queries exactly as the chunk table's model does."""

from __future__ import annotations

import os
from typing import Any

from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.vectors import embedder_chunker, query_vectors, text_vectors
from latechunk_dagster.core.chunker import LateChunker

try:
    from langchain_core.embeddings import Embeddings
except ImportError as exc:  # pragma: no cover - the extra is installed where the tests run
    raise missing_extra("langchain-core", exc) from exc


class LangChainEmbeddings(Embeddings):
    """Query vectors of ``chunker``'s model for ``langchain_community.vectorstores.LanceDB``.

    ``embed_query`` is :meth:`LateChunker.embed_queries <latechunk_dagster.core.chunker.LateChunker.embed_queries>`
    (query prompt, mean, head and cut as the chunk vectors were made), so a store search over the
    chunk table ranks as ``latechunk search`` does. ``embed_documents`` embeds each text whole as
    a document (not a late-chunk vector; the table's rows come from the pipeline).

    Args:
        chunker: the model directory that wrote the table: loaded on the light transformers engine
            (no vLLM; the same vectors within 1e-6) and closed by :meth:`close` (or the ``with``
            block); or an open ``LateChunker`` or ``RemoteLateChunker`` (a vLLM server) of that model,
            whose lifetime is the caller's.
        table: the LanceDB chunk table the store reads (optional): refused at once, naming the
            difference, when its vectors are of another model fingerprint, head or width.
        model_options: ``LateChunker`` options for a model directory (``dimensions``, ``trust_remote_code``...).

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
        self.chunker, self._owned = embedder_chunker(chunker, model_options, table)

    def close(self) -> None:
        """Close the chunker this embedder loaded (a chunker handed to it stays open)."""
        if self._owned:
            self.chunker.close()

    def __enter__(self) -> LangChainEmbeddings:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embed_query(self, text: str) -> list[float]:
        """The query's vector; ``ValueError`` for a query longer than the model (never windowed)."""
        return query_vectors(self.chunker, [text])[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Each text's whole-document vector, in one engine call."""
        return text_vectors(self.chunker, texts)
