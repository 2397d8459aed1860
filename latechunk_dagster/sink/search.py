"""Search the chunk table with a query embedded by the same model and head: by vector, or hybrid."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from latechunk_dagster import sink
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.tokenization import check_query
from latechunk_dagster.sink.indexing import has_fts_index, hybrid_query, vector_query

#: ``vector``: nearest chunks by cosine distance; ``hybrid``: LanceDB's full-text search on ``text``
#: and the vector search fused by a reranker (LanceDB's ``RRFReranker`` unless one is given).
SEARCH_MODES = ("vector", "hybrid")


@dataclass(frozen=True)
class Hit:
    """One search result: where the chunk lies, its text, its cosine ``distance`` to the query
    (0 = same direction, 1 = orthogonal) and, in hybrid mode, the reranker's ``relevance``
    (higher is better; for RRF the sum of ``1 / (60 + rank)`` over the two result lists)."""

    doc_id: str
    partition: str
    chunk_index: int
    char_range: tuple[int, int] | None
    text: str | None
    distance: float
    chunk_id: str = ""
    relevance: float | None = None


def search(
    query: str,
    *,
    chunker: LateChunker | None = None,
    model: str | os.PathLike[str] | None = None,
    model_options: dict[str, Any] | None = None,
    uri: str,
    table_name: str = sink.CHUNK_TABLE,
    k: int = 5,
    where: str | None = None,
    exact: bool = False,
    mode: str = "vector",
    reranker: Any = None,
    connect_kwargs: dict[str, Any] | None = None,
) -> list[Hit]:
    """Top-``k`` chunks for ``query``: by cosine distance (``mode="vector"``) or hybrid.

    The query is embedded whole (mean of all its tokens, then the model's head, with the
    model's query prefix), the space the chunk vectors live in.

    Once :func:`~latechunk_dagster.sink.indexing.refresh_indexes` has built the vector index
    (tables of ``ANN_MIN_ROWS`` rows or more) the vector search is approximate, with the settings
    of :func:`~latechunk_dagster.sink.indexing.vector_query` (recall@10 >= 0.95 measured on hard
    synthetic data; ``chunk_index``'s metadata holds the recall measured on your table).

    ``mode="hybrid"`` runs LanceDB's hybrid query (:func:`~latechunk_dagster.sink.indexing.hybrid_query`):
    the full-text index on ``text`` (BM25) and the vector search each return ``k`` rows, the
    reranker fuses them and the best ``k`` are returned in its order; ``distance`` is then the
    cosine distance of each hit's stored vector to the query vector (float64), also for a hit
    that only the full-text search found.

    The table's lineage is checked first (:func:`check_table_lineage`): a table whose vectors the
    query's model cannot reproduce (another model fingerprint, head or width) is refused, naming the
    difference.

    Args:
        chunker: embeds the query (its lifetime is the caller's); or give ``model``.
        model: a model directory, loaded for this call on the light transformers engine
            (:func:`query_chunker`, with ``model_options``: ``dimensions``, the opt-ins...) and closed after it.
        connect_kwargs: options for ``lancedb.connect`` (``storage_options`` for an object store,
            ``api_key`` for LanceDB Cloud: what ``LanceDBResource.connect_kwargs()`` returns).
        where: optional LanceDB SQL filter (e.g. ``"partition = 'a'"``; quote with
            :func:`latechunk_dagster.sink.sql_string`); applied before the search (prefilter).
        exact: bypass the vector index and scan every row: the exact top ``k`` (cost linear in rows).
        mode: one of :data:`SEARCH_MODES`.
        reranker: hybrid only: a ``lancedb.rerankers.Reranker`` (default LanceDB's ``RRFReranker()``).

    Raises:
        InvalidQueryError: ``query`` is not a ``str`` or not valid Unicode (a lone surrogate: a
            byte that is not UTF-8 on the command line, half an emoji); a ``ValueError`` too.
        ValueError: the table's vectors are not the query model's (another model fingerprint, head
            or width: :func:`check_table_lineage`), or it does not exist; an unknown ``mode``; hybrid on
            a table without the full-text index (built by ``refresh_indexes``, the index asset);
            neither or both of ``chunker`` and ``model``.
    """
    check_query(query)  # before the table is opened and the tokenizer sees it
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
    if (chunker is None) == (model is None):
        raise ValueError("search() takes a chunker or a model directory (model=...), one of the two")
    db = sink.connect(uri, **(connect_kwargs or {}))
    if table_name not in db.list_tables().tables:
        raise ValueError(f"no table {table_name!r} at {uri}: materialize chunk_vectors first")
    table = db.open_table(table_name)
    if mode == "hybrid" and not has_fts_index(table):
        raise ValueError(
            f"table {table_name!r} has no full-text index on text, which hybrid search needs: "
            "materialize the index asset (chunk_vectors_index) or call sink.indexing.refresh_indexes"
        )
    if chunker is None:
        with query_chunker(model, **(model_options or {})) as own:  # type: ignore[arg-type]
            return _search(own, table, table_name, query, k, where, exact, mode, reranker)
    return _search(chunker, table, table_name, query, k, where, exact, mode, reranker)


def query_chunker(model: str | os.PathLike[str], **options: Any) -> LateChunker:
    """The chunker that embeds queries where the documents' engine is not needed: ``model`` on the
    light transformers engine (:class:`~latechunk_dagster.core.engines.transformers_engine.TransformersEngine`;
    the same vectors as vLLM's within 1e-6, started in about a second). ``latechunk search``/``eval``,
    :func:`search` with ``model=`` and the client embedders given a model directory use it.

    Args:
        model: the model directory that wrote the table.
        **options: ``LateChunker`` options (``dimensions``, ``trust_remote_code``, ``query_prefix``...).

    Raises:
        as :class:`~latechunk_dagster.LateChunker` (a model refused without its opt-in, ...).
    """
    return LateChunker(model, engine="transformers", **options)


def lineage_difference(chunker: LateChunker, row: Mapping[str, Any]) -> str | None:
    """How a chunk row's lineage differs from what ``chunker`` makes, or ``None`` when its queries
    can be compared with the row's vector.

    Args:
        row: the row's ``model_sha256``, ``model_name`` and ``head`` columns (``head`` may be absent:
            not compared).

    The model's fingerprint (its weights and config files, the prompts of
    ``config_sentence_transformers.json`` included) and the head (projection, Matryoshka cut,
    normalization) must be the chunker's; the engine may differ (the transformers engine reproduces
    vLLM's vectors within 1e-6).
    """
    model_sha256, model_name, head = row["model_sha256"], row.get("model_name", "?"), row.get("head")
    if model_sha256 != chunker.card.fingerprint:
        return (
            f"vectors of model {model_sha256[:12]} ({model_name}), the query model is "
            f"{chunker.card.fingerprint[:12]} ({chunker.card.name}): embed queries with the model that wrote the table"
        )
    if head is not None and head != chunker.head.describe():
        return (
            f"vectors of model {model_sha256[:12]} ({model_name}) with the head {head}, the query model's head is "
            f"{chunker.head.describe()}: give the dimensions the table was written with"
        )
    return None


def check_table_lineage(chunker: LateChunker, table: Any, table_name: str) -> None:
    """Refuse a chunk table whose vectors ``chunker``'s queries cannot reproduce, naming the difference:
    another vector width, or a row of another model fingerprint or head (:func:`lineage_difference`).
    One filtered read of the lineage columns (no vectors).

    Raises:
        ValueError: ``table {name!r} holds ...`` naming the table's and the query model's values.
    """
    width = table.schema.field("vector").type.list_size
    if width != chunker.embedding_dim:
        raise ValueError(
            f"table {table_name!r} holds {width}-dimensional vectors, the query model {chunker.card.name} makes "
            f"{chunker.embedding_dim} (head {chunker.head.describe()}): embed queries as the table was written"
        )
    fingerprint, head = sink.sql_string(chunker.card.fingerprint), sink.sql_string(chunker.head.describe())
    other = (
        table.search()
        .where(f"model_sha256 != {fingerprint} OR head != {head}")
        .select(["model_sha256", "model_name", "head"])
        .limit(1)
        .to_list()
    )
    if other:
        raise ValueError(f"table {table_name!r} holds {lineage_difference(chunker, other[0])}")


def _search(
    chunker: LateChunker,
    table: Any,
    table_name: str,
    query: str,
    k: int,
    where: str | None,
    exact: bool,
    mode: str,
    reranker: Any,
) -> list[Hit]:
    """:func:`search` once the table is open and the query's chunker is known."""
    check_table_lineage(chunker, table, table_name)
    [vec] = chunker.embed_queries([query])
    columns = ["chunk_id", "doc_id", "partition", "chunk_index", "char_start", "char_end", "text"]
    q: Any
    if mode == "hybrid":
        q = hybrid_query(table, vec, query, k, exact=exact, reranker=reranker)
        columns.append("vector")
    else:
        q = vector_query(table, vec, k, exact=exact)
        columns.append("_distance")
    if where:
        q = q.where(where, prefilter=True)
    rows = q.select(columns).to_arrow()
    if mode == "hybrid":
        distances = cosine_distances(vec, rows.column("vector").combine_chunks())
        relevance = rows.column("_relevance_score").to_pylist()
    else:
        distances = np.asarray(rows.column("_distance").to_pylist(), dtype=np.float64)
        relevance = [None] * rows.num_rows
    return [
        Hit(
            r["doc_id"],
            r["partition"],
            r["chunk_index"],
            (r["char_start"], r["char_end"]) if r["char_start"] is not None else None,
            r["text"],
            float(d),
            r["chunk_id"],
            None if s is None else float(s),
        )
        for r, d, s in zip(rows.select(columns[:7]).to_pylist(), distances, relevance)
    ]


def cosine_distances(query: np.ndarray, vectors: Any) -> np.ndarray:
    """``1 - cos`` between ``query`` (float ``[dim]``) and each row of ``vectors`` (an Arrow
    ``fixed_size_list<float32>[dim]`` array), in float64: float64 ``[n]``."""
    dim = len(query)
    v = vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float64)  # shape: [n, dim]
    q = np.asarray(query, dtype=np.float64)
    norms = np.maximum(np.linalg.norm(v, axis=1) * np.linalg.norm(q), 1e-300)
    return 1.0 - (v @ q) / norms
