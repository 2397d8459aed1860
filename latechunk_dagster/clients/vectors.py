"""The vectors both client embedders hand out: queries as the table's model embeds them, texts whole."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.evaluation.retrieval import naive_vectors


def query_vectors(chunker: LateChunker, queries: Sequence[str]) -> list[list[float]]:
    """``chunker.embed_queries(queries)`` as lists of floats (the float32 values, exactly)."""
    return _lists(chunker.embed_queries(list(queries)))


def text_vectors(chunker: LateChunker, texts: Sequence[str]) -> list[list[float]]:
    """Each text embedded whole as a document (the model's document prompt, the mean of all its
    tokens, then the head: the "naive" vectors of :func:`~latechunk_dagster.evaluation.naive_vectors`),
    as lists of floats. These are not late-chunk vectors: the table's rows are written by the pipeline."""
    return _lists(naive_vectors(chunker, list(texts)))


def _lists(vectors: np.ndarray) -> list[list[float]]:
    return [[float(x) for x in row] for row in np.asarray(vectors, dtype=np.float32)]
