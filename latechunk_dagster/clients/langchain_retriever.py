"""A LangChain retriever over one granularity's chunk table, or small-to-big (the parents of the matches)."""

from __future__ import annotations

from typing import Any

from latechunk_dagster import sink
from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.hit_metadata import hit_metadata
from latechunk_dagster.sink.search import search

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - the extra is installed where the tests run
    raise missing_extra("langchain-core", exc) from exc


class LangChainRetriever(BaseRetriever):
    """A LangChain ``BaseRetriever`` whose documents are :func:`~latechunk_dagster.sink.search.search`'s hits.

    The stock ``LanceDB`` store already reads one granularity (``table_name="chunks_small"``);
    this retriever adds what it cannot do: small-to-big (``return_parent=True``: the query matched
    on the fine chunks, their parents returned, each once) and the package's hybrid search. Fields
    are keywords (pydantic); an unknown one is refused.

    Attributes:
        chunker: an open ``LateChunker`` or ``RemoteLateChunker`` of the table's model (the caller's).
        uri: the LanceDB directory or URI; ``connect_kwargs``: options for ``lancedb.connect``.
        table_name: the table definition (default ``chunks``); ``granularity``: the granularity whose
            table is searched (``None``: ``table_name`` itself).
        return_parent: return the parents of the matching chunks (small-to-big).
        k, where, exact, mode: as :func:`~latechunk_dagster.sink.search.search` (``k`` documents,
            distinct parents with ``return_parent``).

    Returns (``invoke``): ``Document`` objects, best first: ``page_content`` the chunk's (or the
    parent's) text, ``id`` its ``chunk_id``, ``metadata``
    :func:`~latechunk_dagster.clients.hit_metadata.hit_metadata` (``cosine_distance``,
    ``matched_chunk_ids``...).

    Raises:
        ValueError: as :func:`~latechunk_dagster.sink.search.search` (a missing table, a table the
            chunker cannot query, ``return_parent`` on a table without parents...).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    chunker: Any
    uri: str
    table_name: str = sink.CHUNK_TABLE
    granularity: str | None = None
    return_parent: bool = False
    k: int = 5
    where: str | None = None
    exact: bool = False
    mode: str = "vector"
    connect_kwargs: dict[str, Any] | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits = search(
            query,
            chunker=self.chunker,
            uri=self.uri,
            table_name=self.table_name,
            granularity=self.granularity,
            return_parent=self.return_parent,
            k=self.k,
            where=self.where,
            exact=self.exact,
            mode=self.mode,
            connect_kwargs=self.connect_kwargs,
        )
        return [Document(page_content=h.text or "", id=h.chunk_id, metadata=hit_metadata(h)) for h in hits]
