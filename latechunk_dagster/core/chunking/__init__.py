"""Chunking strategies: one module per strategy, all deriving from :class:`ChunkingStrategy`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.core.chunking.char_spans import CharSpans
from latechunk_dagster.core.chunking.fixed import FixedTokens
from latechunk_dagster.core.chunking.given import GivenChunks
from latechunk_dagster.core.chunking.markdown import MarkdownSections
from latechunk_dagster.core.chunking.paragraphs import Paragraphs
from latechunk_dagster.core.chunking.sentences import Sentences

#: Every strategy class, keyed by its ``name`` (the name recorded in lineage and used in configs).
STRATEGIES: dict[str, type[ChunkingStrategy]] = {
    cls.name: cls for cls in (FixedTokens, Sentences, Paragraphs, MarkdownSections, CharSpans, GivenChunks)
}


def strategy_from_config(name: str, params: Mapping[str, Any]) -> ChunkingStrategy:
    """Build a strategy from its ``name`` and ``params`` (the inverse of ``s.name`` / ``s.params()``).

    Args:
        name: a key of :data:`STRATEGIES`, e.g. ``"paragraphs"``.
        params: the strategy's fields, as plain JSON values (lists stand for tuples,
            e.g. ``{"ranges": [[0, 5], [6, 11]]}`` for ``char_spans``).

    Raises:
        ValueError: unknown ``name`` (the message lists the known ones), unknown or
            missing parameters, or parameter values the strategy refuses.

    Example:
        >>> strategy_from_config("paragraphs", {"max_tokens": 128})
        Paragraphs(max_tokens=128, language='en', segmenter='sentencex', min_tokens=8)
    """
    cls = STRATEGIES.get(name)
    if cls is None:
        raise ValueError(f"unknown chunking strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(fields))
    missing = sorted(
        k
        for k, f in fields.items()
        if k not in params and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if unknown or missing:
        raise ValueError(
            f"bad parameters for chunking strategy {name!r}: unknown {unknown}, missing {missing}; "
            f"it takes {sorted(fields)}"
        )
    # CharSpans turns JSON lists into tuples itself; the other strategies take scalars.
    return cls(**dict(params))


__all__ = [
    "STRATEGIES",
    "CharSpans",
    "ChunkingStrategy",
    "FixedTokens",
    "GivenChunks",
    "MarkdownSections",
    "Paragraphs",
    "Sentences",
    "Span",
    "strategy_from_config",
]
