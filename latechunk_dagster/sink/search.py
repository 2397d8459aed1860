"""Search the chunk table with a query embedded by the same model and head: by vector, or hybrid;
one granularity's table, or small-to-big (the fine chunks matched, their parents returned)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from latechunk_dagster import sink
from latechunk_dagster.core.chunker import query_chunker
from latechunk_dagster.core.tokenization import check_query
from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.generation_gates import reading_generation
from latechunk_dagster.sink.generations import current_table
from latechunk_dagster.sink.granularity_tables import definition_granularities, granularity_table_of
from latechunk_dagster.sink.hits import SEARCH_MODES, Hit, cosine_distances, ranked_hits
from latechunk_dagster.sink.queries import has_fts_index
from latechunk_dagster.sink.schema import granularity_table
from latechunk_dagster.sink.small_to_big import ParentHit, parent_hits

__all__ = [
    "SEARCH_MODES",
    "QueryEmbedder",
    "Hit",
    "ParentHit",
    "check_table_lineage",
    "cosine_distances",
    "lineage_difference",
    "query_chunker",
    "search",
]


class QueryEmbedder(Protocol):
    """What :func:`search` reads of its ``chunker``: the lineage it compares with the table's (``card``'s
    ``fingerprint`` and ``name``, ``head.describe()``, ``embedding_dim``) and ``embed_queries``. A
    :class:`~latechunk_dagster.LateChunker` is one; ``latechunk search``'s query embedded in a process
    of its own (:class:`latechunk_dagster.app.query_process.EmbeddedQuery`) is another."""

    @property
    def card(self) -> Any: ...

    @property
    def head(self) -> Any: ...

    @property
    def embedding_dim(self) -> int: ...

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray: ...


def search(
    query: str,
    *,
    chunker: QueryEmbedder | None = None,
    model: str | os.PathLike[str] | None = None,
    model_options: dict[str, Any] | None = None,
    uri: str,
    table_name: str = sink.CHUNK_TABLE,
    granularity: str | None = None,
    return_parent: bool = False,
    k: int = 5,
    where: str | None = None,
    exact: bool = False,
    mode: str = "vector",
    reranker: Any = None,
    connect_kwargs: dict[str, Any] | None = None,
) -> list[Hit] | list[ParentHit]:
    """Top-``k`` chunks for ``query``: by cosine distance (``mode="vector"``) or hybrid; or, with
    ``return_parent=True``, the top-``k`` distinct parents of the fine chunks that match (small-to-big).

    The query is embedded whole (mean of all its tokens, then the model's head, with the
    model's query prefix), the space the chunk vectors live in.

    Once :func:`~latechunk_dagster.sink.indexing.refresh_indexes` has built the vector index
    (tables of ``ANN_MIN_ROWS`` rows or more) the vector search is approximate, with the settings
    of :func:`~latechunk_dagster.sink.queries.vector_query` (recall@10 >= 0.95 measured on hard
    synthetic data; ``chunk_index``'s metadata holds the recall measured on your table).

    ``mode="hybrid"`` runs LanceDB's hybrid query (:func:`~latechunk_dagster.sink.queries.hybrid_query`):
    the full-text index on ``text`` (BM25) and the vector search each return ``k`` rows, the
    reranker fuses them and the best ``k`` are returned in its order; ``distance`` is then the
    cosine distance of each hit's stored vector to the query vector (float64), also for a hit
    that only the full-text search found.

    The table's lineage is checked first (:func:`check_table_lineage`): a table whose vectors the
    query's model cannot reproduce (another model fingerprint, head or width) is refused, naming the
    difference.

    A table definition under generations (:mod:`latechunk_dagster.sink.generations`) is read in its
    current generation, resolved once per call: a promotion or rollback committed during the call
    does not change the tables it reads.

    ``granularity="NAME"`` queries that granularity's table of the table definition ``table_name``
    (:func:`~latechunk_dagster.sink.schema.granularity_table`: ``f"{table_name}_{NAME}"``).
    ``return_parent=True`` matches the query on the queried table's (fine) vectors, reading more
    than ``k`` fine hits as needed, and returns their parents from the next granularity's table
    (:func:`~latechunk_dagster.sink.small_to_big.parent_hits`): :class:`ParentHit` objects, hits
    sharing a parent merged (the best distance kept, ``matched`` listing the fine hits), ``k``
    distinct parents best first, read in one query; ``where`` filters the fine chunks.

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
        granularity: the granularity's name (its table is searched), or ``None``: ``table_name`` itself.
        return_parent: return the parents of the matching chunks (small-to-big), not the chunks.

    Raises:
        InvalidQueryError: ``query`` is not a ``str`` or not valid Unicode (a lone surrogate: a
            byte that is not UTF-8 on the command line, half an emoji); a ``ValueError`` too.
        ValueError: the table's vectors are not the query model's (another model fingerprint, head
            or width: :func:`check_table_lineage`), or it does not exist; an unknown ``mode``; hybrid on
            a table without the full-text index (built by ``refresh_indexes``, the index asset);
            neither or both of ``chunker`` and ``model``; ``k < 1``; ``return_parent`` on a table
            without parent links (a single strategy's, or the coarsest granularity's: naming it) or
            whose parents are missing from the next granularity's table.
    """
    check_query(query)  # before the table is opened and the tokenizer sees it
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
    if (chunker is None) == (model is None):
        raise ValueError("search() takes a chunker or a model directory (model=...), one of the two")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    db = sink.connect(uri, **(connect_kwargs or {}))
    tables = table_names(db)
    definition, table_name = table_name, current_table(db, table_name, tables)  # under generations: the current one's
    with reading_generation(db, definition, table_name):  # dropped meanwhile: says so, naming it (issue 47 kind 14)
        if granularity is None:
            name = table_name
            if name not in tables:
                raise ValueError(
                    f"no table {name!r} at {uri}: materialize chunk_vectors first{_granularities(db, name)}"
                )
            table = db.open_table(name)
        else:  # checked by its rows: another definition's table may carry the same name (issue 40)
            name = granularity_table(table_name, granularity)
            table = granularity_table_of(db, table_name, granularity)
        if mode == "hybrid" and not has_fts_index(table):
            raise ValueError(
                f"table {name!r} has no full-text index on text, which hybrid search needs: "
                "materialize the index asset (chunk_vectors_index) or call sink.indexing.refresh_indexes"
            )
        check = dict(where=where, exact=exact, mode=mode, reranker=reranker)
        if chunker is None:
            with query_chunker(model, **(model_options or {})) as own:  # type: ignore[arg-type]
                return _search(own, db, table, name, query, k, return_parent, check)
        return _search(chunker, db, table, name, query, k, return_parent, check)


def lineage_difference(chunker: QueryEmbedder, row: Mapping[str, Any]) -> str | None:
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


def check_table_lineage(chunker: QueryEmbedder, table: Any, table_name: str) -> None:
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
    chunker: QueryEmbedder,
    db: Any,
    table: Any,
    table_name: str,
    query: str,
    k: int,
    return_parent: bool,
    options: dict[str, Any],
) -> list[Hit] | list[ParentHit]:
    """:func:`search` once the table is open and the query's chunker is known."""
    check_table_lineage(chunker, table, table_name)
    [vec] = chunker.embed_queries([query])
    if return_parent:
        return parent_hits(db, table, table_name, vec, query, k, **options)
    return ranked_hits(table, vec, query, k, **options)[0]


def _granularities(db: Any, table_name: str) -> str:
    """``" (tables of granularities of 'chunks': a, b)"`` where granularity tables of ``table_name`` exist
    (by their rows: :func:`~latechunk_dagster.sink.granularity_tables.definition_granularities`), else ``""``."""
    names = sorted(definition_granularities(db, table_name, empty=True))
    return f" (tables of granularities of {table_name!r}: {', '.join(names)})" if names else ""
