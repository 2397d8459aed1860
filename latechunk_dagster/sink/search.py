"""Search the chunk table with a query embedded by the same model and head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latechunk_dagster import sink
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.sink.indexing import vector_query


@dataclass(frozen=True)
class Hit:
    """One search result: cosine ``distance`` (0 = same direction), where the chunk lies and its text."""

    doc_id: str
    partition: str
    chunk_index: int
    char_range: tuple[int, int] | None
    text: str | None
    distance: float


def search(
    query: str,
    *,
    chunker: LateChunker,
    uri: str,
    table_name: str = sink.CHUNK_TABLE,
    k: int = 5,
    where: str | None = None,
    exact: bool = False,
    connect_kwargs: dict[str, Any] | None = None,
) -> list[Hit]:
    """Top-``k`` chunks for ``query`` by cosine distance.

    The query is embedded whole (mean of all its tokens, then the model's head, with the
    model's query prefix), the space the chunk vectors live in.

    Once :func:`~latechunk_dagster.sink.indexing.refresh_indexes` has built the vector index
    (tables of ``ANN_MIN_ROWS`` rows or more) the search is approximate, with the settings of
    :func:`~latechunk_dagster.sink.indexing.vector_query` (recall@10 >= 0.95 measured on hard
    synthetic data; ``chunk_index``'s metadata holds the recall measured on your table).

    Args:
        connect_kwargs: options for ``lancedb.connect`` (``storage_options`` for an object store,
            ``api_key`` for LanceDB Cloud: what ``LanceDBResource.connect_kwargs()`` returns).
        where: optional LanceDB SQL filter (e.g. ``"partition = 'a'"``; quote with
            :func:`latechunk_dagster.sink.sql_string`).
        exact: bypass the vector index and scan every row: the exact top ``k`` (cost linear in rows).

    Raises:
        ValueError: the table was written by another model than ``chunker``'s, or does not exist.
    """
    db = sink.connect(uri, **(connect_kwargs or {}))
    if table_name not in db.list_tables().tables:
        raise ValueError(f"no table {table_name!r} at {uri}: materialize chunk_vectors first")
    table = db.open_table(table_name)
    other = (
        table.search()
        .where(f"model_sha256 != {sink.sql_string(chunker.card.fingerprint)}")
        .select(["model_sha256"])
        .limit(1)
        .to_list()
    )
    if other:
        raise ValueError(
            f"table {table_name!r} holds vectors of model {other[0]['model_sha256'][:12]}, "
            f"the query model is {chunker.card.fingerprint[:12]}: embed queries with the same model"
        )
    [vec] = chunker.embed_queries([query])
    q: Any = vector_query(table, vec, k, exact=exact)
    if where:
        q = q.where(where, prefilter=True)
    rows = q.select(["doc_id", "partition", "chunk_index", "char_start", "char_end", "text", "_distance"]).to_list()
    return [
        Hit(
            r["doc_id"],
            r["partition"],
            r["chunk_index"],
            (r["char_start"], r["char_end"]) if r["char_start"] is not None else None,
            r["text"],
            float(r["_distance"]),
        )
        for r in rows
    ]
