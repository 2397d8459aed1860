"""The vectors both client embedders hand out: queries as the table's model embeds them, texts whole."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.tokenization import check_query
from latechunk_dagster.evaluation.retrieval import naive_vectors
from latechunk_dagster.sink.search import check_table_lineage, query_chunker


def embedder_chunker(
    chunker: LateChunker | str | os.PathLike[str], model_options: dict[str, Any] | None, table: Any
) -> tuple[LateChunker, bool]:
    """The chunker of a client embedder, and whether the embedder owns it (and closes it).

    Args:
        chunker: the model directory that wrote the table: loaded on the light transformers engine
            (:func:`~latechunk_dagster.core.chunker.query_chunker`: no vLLM, the same vectors within
            1e-6) with ``model_options``, and closed by the embedder's ``close()`` (or its ``with``
            block, :class:`OwnedChunker`); or an open ``LateChunker`` or ``RemoteLateChunker`` (a
            vLLM server) of that model, used as it is, whose lifetime is the caller's.
        model_options: ``LateChunker`` options for a model directory (``dimensions``,
            ``trust_remote_code``...).
        table: the LanceDB chunk table the store reads, or ``None``: refused at once, naming the
            difference, when its vectors are of another model fingerprint, head or width
            (:func:`~latechunk_dagster.sink.search.check_table_lineage`).

    Raises:
        ValueError: ``model_options`` beside a ready chunker; a table written by another model or
            head (naming the difference).
    """
    owned = not isinstance(chunker, LateChunker)
    if not owned and model_options:
        raise ValueError(f"model_options {sorted(model_options)} apply to a model directory, not to a ready chunker")
    live = query_chunker(chunker, **(model_options or {})) if owned else chunker  # type: ignore[arg-type]
    if table is not None:
        try:
            check_table_lineage(live, table, table.name)
        except ValueError:
            if owned:
                live.close()
            raise
    return live, owned


class OwnedChunker:
    """``close()`` and the ``with`` block of a client embedder: the one home of both embedders' rule
    that an embedder closes the chunker it loaded and never one handed to it.

    The embedder sets ``_chunker`` and ``_owned`` from :func:`embedder_chunker` (on a pydantic
    embedder, as private attributes).
    """

    _chunker: LateChunker
    _owned: bool

    def close(self) -> None:
        """Close the chunker this embedder loaded (a chunker handed to it stays open)."""
        if self._owned:
            self._chunker.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def query_vectors(chunker: LateChunker, queries: Sequence[str]) -> list[list[float]]:
    """``chunker.embed_queries(queries)`` as lists of floats (the float32 values, exactly).

    Raises:
        InvalidQueryError: a query that is not a ``str`` or not valid Unicode (a lone surrogate,
            e.g. half an emoji from a JavaScript client); names it and the character.
        ValueError: a query longer than the model, or with no token after the query prompt.
    """
    single = len(queries) == 1
    checked = [check_query(q, None if single else i) for i, q in enumerate(queries)]
    return _lists(chunker.embed_queries(checked))


def text_vectors(chunker: LateChunker, texts: Sequence[str]) -> list[list[float]]:
    """Each text embedded whole as a document (the model's document prompt, the mean of all its
    tokens, then the head: the "naive" vectors of :func:`~latechunk_dagster.evaluation.naive_vectors`),
    as lists of floats. These are not late-chunk vectors: the table's rows are written by the pipeline.

    Raises:
        ValueError: a text that cannot be embedded (empty, not valid Unicode...): names its index and why.
    """
    return _lists(naive_vectors(chunker, list(texts)))


def _lists(vectors: np.ndarray) -> list[list[float]]:
    return [[float(x) for x in row] for row in np.asarray(vectors, dtype=np.float32)]
