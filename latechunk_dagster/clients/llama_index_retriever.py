"""A LlamaIndex retriever over one granularity's chunk table, or small-to-big (the parents of the matches)."""

from __future__ import annotations

from typing import Any

from latechunk_dagster import sink
from latechunk_dagster.clients import missing_extra
from latechunk_dagster.clients.hit_metadata import hit_metadata
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.sink.search import search

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
except ImportError as exc:  # pragma: no cover - the extra is installed where the tests run
    raise missing_extra("llama-index-core", exc) from exc


class LlamaIndexRetriever(BaseRetriever):
    """A LlamaIndex ``BaseRetriever`` whose nodes are :func:`~latechunk_dagster.sink.search.search`'s hits.

    The stock ``LanceDBVectorStore`` already reads one granularity (``table_name="chunks_small"``);
    this retriever adds small-to-big (``return_parent=True``: the query matched on the fine
    chunks, their parents returned, each once, as LlamaIndex's ``AutoMergingRetriever`` does with
    nodes embedded separately) and the package's hybrid search. Usable wherever LlamaIndex takes a
    retriever (``RetrieverQueryEngine``...).

    Args:
        chunker: an open ``LateChunker`` or ``RemoteLateChunker`` of the table's model (the caller's).
        uri: the LanceDB directory or URI; ``connect_kwargs``: options for ``lancedb.connect``.
        table_name: the table definition (default ``chunks``); ``granularity``: the granularity whose
            table is searched (``None``: ``table_name`` itself).
        return_parent: return the parents of the matching chunks (small-to-big).
        k, where, exact, mode: as :func:`~latechunk_dagster.sink.search.search`.
        **kwargs: ``BaseRetriever``'s (``callback_manager``, ``verbose``...).

    Returns (``retrieve``): ``NodeWithScore`` objects, best first: a ``TextNode`` whose ``node_id``
    is the ``chunk_id``, ``ref_doc_id`` the ``doc_id``, metadata
    :func:`~latechunk_dagster.clients.hit_metadata.hit_metadata`; the score is the cosine similarity
    ``1 - cosine_distance`` (a parent's: its best matched chunk's), or the reranker's score in
    hybrid mode.

    Raises:
        ValueError: as :func:`~latechunk_dagster.sink.search.search`.
    """

    def __init__(
        self,
        chunker: LateChunker,
        *,
        uri: str,
        table_name: str = sink.CHUNK_TABLE,
        granularity: str | None = None,
        return_parent: bool = False,
        k: int = 5,
        where: str | None = None,
        exact: bool = False,
        mode: str = "vector",
        connect_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._chunker = chunker
        self._options: dict[str, Any] = {
            "uri": uri,
            "table_name": table_name,
            "granularity": granularity,
            "return_parent": return_parent,
            "k": k,
            "where": where,
            "exact": exact,
            "mode": mode,
            "connect_kwargs": connect_kwargs,
        }

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = search(query_bundle.query_str, chunker=self._chunker, **self._options)
        return [
            NodeWithScore(
                node=TextNode(
                    id_=h.chunk_id,
                    text=h.text or "",
                    metadata=hit_metadata(h),
                    relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=h.doc_id)},
                ),
                score=h.relevance if h.relevance is not None else 1.0 - h.distance,
            )
            for h in hits
        ]
