"""What the client retrievers hand LangChain and LlamaIndex for a search hit: its metadata.

One home for both retrievers (:mod:`~latechunk_dagster.clients.langchain_retriever`,
:mod:`~latechunk_dagster.clients.llama_index_retriever`), so a chunk and a parent carry the same
keys whichever library reads them.
"""

from __future__ import annotations

from typing import Any

from latechunk_dagster.sink.search import Hit, ParentHit


def hit_metadata(hit: Hit | ParentHit) -> dict[str, Any]:
    """The metadata of a hit: scalars, and for a parent the list of its matched chunks' ids.

    Returns:
        ``chunk_id``, ``doc_id``, ``partition``, ``chunk_index``, ``char_start``, ``char_end`` (``None``
        where the text has no position; the stock stores' ``metadata`` struct holds the same keys),
        ``cosine_distance`` (float, to the query: a parent's is its best matched chunk's) and, in hybrid
        mode, ``relevance`` (the reranker's score); a PDF chunk's ``boxes`` (``[[page from 1, x0, y0,
        x1, y1], ...]`` in PDF points, one per line it is on). A :class:`ParentHit` adds ``token_start``,
        ``token_end``, ``granularity`` (the parent's), ``headings`` (list of str) and
        ``matched_chunk_ids`` (the fine chunks that matched, best first).
    """
    start, end = hit.char_range if hit.char_range is not None else (None, None)
    out: dict[str, Any] = {
        "chunk_id": hit.chunk_id,
        "doc_id": hit.doc_id,
        "partition": hit.partition,
        "chunk_index": hit.chunk_index,
        "char_start": start,
        "char_end": end,
        "cosine_distance": hit.distance,
    }
    if hit.relevance is not None:
        out["relevance"] = hit.relevance
    boxes = getattr(hit, "boxes", None)  # a PDF chunk's place on its pages (a parent has none)
    if boxes is not None:
        out["boxes"] = [list(box) for box in boxes]
    if isinstance(hit, ParentHit):
        out |= {
            "token_start": hit.token_range[0],
            "token_end": hit.token_range[1],
            "granularity": hit.granularity,
            "headings": list(hit.headings),
            "matched_chunk_ids": [m.chunk_id for m in hit.matched],
        }
    return out
