"""Schemas of the two tables this package writes, and the deterministic row ids.

The chunk table also carries the two columns the stock LanceDB stores of LangChain
(``langchain_community.vectorstores.LanceDB``) and LlamaIndex (``LanceDBVectorStore``) read:
``id`` (the chunk id) and ``metadata`` (a struct of scalars: where the chunk lies). Both are
functions of other columns (:data:`DERIVED_COLUMNS`), so a table written before they existed
gains them by LanceDB's ``add_columns`` with SQL expressions: new column files beside the old
ones, the vectors are not rewritten (:func:`latechunk_dagster.sink.creation.open_or_create`).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from latechunk_dagster.sink.retry import PRIMARY_KEY_METADATA
from latechunk_dagster.sources.documents import key_of

CHUNK_TABLE = "chunks"
REJECTED_TABLE = "rejected_documents"

#: Fields of the ``metadata`` struct, in order: scalars only (a list inside it, such as
#: ``headings``, breaks LlamaIndex's ``node.to_json()``), each a copy of the column of that name.
METADATA_FIELDS = (
    "chunk_id",
    "doc_id",
    "partition",
    "chunk_index",
    "char_start",
    "char_end",
    "token_start",
    "token_end",
)

#: Columns that are functions of other columns: name -> the LanceDB (DataFusion) SQL expression
#: that computes them from the row, used to add them to a table written before they existed.
DERIVED_COLUMNS = {
    "id": "chunk_id",
    "metadata": "named_struct(" + ", ".join(f"'{name}', {name}" for name in METADATA_FIELDS) + ")",
}


#: One box of the ``boxes`` column: the page (from 1, as ``page_start``) and the rectangle in PDF points
#: (origin at the page's bottom left, y up).
BOX_TYPE = pa.struct(
    [
        pa.field("page", pa.int32()),
        pa.field("x0", pa.float32()),
        pa.field("y0", pa.float32()),
        pa.field("x1", pa.float32()),
        pa.field("y1", pa.float32()),
    ]
)


def chunk_schema(dim: int) -> pa.Schema:
    """Schema of the chunk table; ``vector`` is ``fixed_size_list<float32>[dim]``.

    ``chunk_id`` is marked as lance's unenforced primary key, so two concurrent commits inserting
    the same new chunks conflict instead of both landing (:mod:`latechunk_dagster.sink.retry`).
    """
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False, metadata=PRIMARY_KEY_METADATA),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("partition", pa.string(), nullable=False),
            pa.field("chunk_index", pa.int32(), nullable=False),
            pa.field("token_start", pa.int32(), nullable=False),
            pa.field("token_end", pa.int32(), nullable=False),
            pa.field("char_start", pa.int32()),
            pa.field("char_end", pa.int32()),
            pa.field("text", pa.string()),
            pa.field("headings", pa.list_(pa.string())),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("doc_sha256", pa.string(), nullable=False),
            pa.field("doc_tokens", pa.int32(), nullable=False),
            pa.field("windows", pa.int32(), nullable=False),
            # lineage
            pa.field("model_name", pa.string(), nullable=False),
            pa.field("model_sha256", pa.string(), nullable=False),
            pa.field("head", pa.string(), nullable=False),
            pa.field("opt_ins", pa.string(), nullable=False),
            pa.field("strategy", pa.string(), nullable=False),
            pa.field("strategy_params", pa.string(), nullable=False),
            pa.field("engine_path", pa.string(), nullable=False),
            pa.field("vllm_version", pa.string(), nullable=False),
            pa.field("package_version", pa.string(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("materialized_at", pa.timestamp("us", tz="UTC"), nullable=False),
            # what the vectors depend on besides the text (latechunk_dagster.pipeline.vector_config);
            # nullable and last, so a table written before it existed gains it with add_columns
            pa.field("vector_config", pa.string()),
            # what the stock LangChain / LlamaIndex LanceDB stores read (module docstring); last,
            # so a table written before them gains them with add_columns (DERIVED_COLUMNS); the
            # types are the ones LanceDB gives those expressions (a struct of nullable fields)
            pa.field("id", pa.string(), nullable=False),
            pa.field("metadata", metadata_type()),
            # several granularities of one table definition (issue 29): the granularity's name ("" for
            # a single strategy) and the chunk_id of the parent chunk in the next granularity's table
            # (NULL for the coarsest granularity and a single strategy); nullable and last, so an
            # older table gains them as NULL (sink.writes.migrate)
            pa.field("granularity", pa.string()),
            pa.field("parent_chunk_id", pa.string()),
            # a document file read into text (latechunk_dagster.sources.converters): the converter and
            # version that made the text, and the pages (PDF) or slides (PPTX) of the chunk's char
            # range, from 1, both ends included; NULL for text read as it is; nullable and last, so an
            # older table gains them as NULL (sink.writes.migrate)
            pa.field("converter", pa.string()),
            pa.field("page_start", pa.int32()),
            pa.field("page_end", pa.int32()),
            # where a PDF chunk lies on its pages (issue 45): one box per line (run of its characters on
            # one line), the union of its characters' boxes (sources.converters.pdf_boxes); NULL for
            # other documents; nullable and last, so an older table gains it as NULL (sink.creation.migrate)
            pa.field("boxes", pa.list_(BOX_TYPE)),
            # what the store's listing said of the document's file when it was read (issue 49: size and
            # times, sources.stamps), so a run neither fetches nor converts a file whose stamp is
            # unchanged; NULL for table rows and unsure stamps; nullable and last (sink.creation.migrate)
            pa.field("source_stamp", pa.string()),
        ]
    )


def metadata_type() -> pa.StructType:
    """The ``metadata`` struct: :data:`METADATA_FIELDS` with their columns' types (ids string, positions
    int32), every field nullable."""
    ints = {"chunk_index", "char_start", "char_end", "token_start", "token_end"}
    return pa.struct([pa.field(name, pa.int32() if name in ints else pa.string()) for name in METADATA_FIELDS])


REJECTED_SCHEMA = pa.schema(
    [
        pa.field("rejection_id", pa.string(), nullable=False, metadata=PRIMARY_KEY_METADATA),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("doc_sha256", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("rejected_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def chunk_id(partition: str, doc_id: str, chunk_index: int, granularity: str = "") -> str:
    """Deterministic id of a chunk: the first 32 hex characters of the sha256 of the JSON array
    ``[partition, doc_id, chunk_index]`` (:func:`~latechunk_dagster.sources.documents.key_of`), or
    ``[partition, doc_id, chunk_index, granularity]`` for a named granularity (issue 29), so the ids
    of a table definition's granularity tables never coincide. ``granularity`` ``""`` (a single
    strategy) keeps the ids of a table written before granularities existed.

    The JSON encoding is unambiguous: shard ``"s"`` with doc_id ``"x\\x1fy"`` and shard ``"s\\x1fx"``
    with doc_id ``"y"`` get different ids (fields joined with a separator character, as before
    chunking version 2, gave them the same one).
    """
    if granularity:
        return key_of(partition, doc_id, chunk_index, granularity)[:32]
    return key_of(partition, doc_id, chunk_index)[:32]


def granularity_table(table: str, granularity: str) -> str:
    """The table of granularity ``granularity`` of the table definition ``table``: ``f"{table}_{granularity}"``,
    or ``table`` itself for ``""`` (a single strategy). One table per granularity (contract): a stock
    LangChain / LlamaIndex LanceDB store reads a granularity by its table name alone.

    Example:
        >>> granularity_table("chunks", "small"), granularity_table("chunks", "")
        ('chunks_small', 'chunks')
    """
    return f"{table}_{granularity}" if granularity else table


def rejection_id(partition: str, doc_id: str, where: str | None = None) -> str:
    """Deterministic id of a rejected-documents row: the first 32 hex characters of the sha256 of
    the JSON array ``["rejected", partition, doc_id, where]``. ``where`` (file and row) tells apart
    store rows that share a doc_id (a later duplicate and the document that is kept); ``None`` for a
    document the chunker refused."""
    return key_of("rejected", partition, doc_id, where)[:32]


def sql_string(value: str) -> str:
    """A SQL string literal for a LanceDB filter: quotes doubled (``x' OR '1'='1`` matches only itself)."""
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: Iterable[str], *, negate: bool = False) -> str:
    """``column IN ('a', 'b')`` (``NOT IN`` with ``negate``), each value quoted by :func:`sql_string`."""
    return f"{column} {'NOT IN' if negate else 'IN'} ({', '.join(sql_string(v) for v in values)})"
