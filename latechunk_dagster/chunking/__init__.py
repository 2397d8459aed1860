"""Chunking strategies: one module per strategy, all deriving from :class:`ChunkingStrategy`."""

from latechunk_dagster.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.chunking.fixed import FixedTokens
from latechunk_dagster.chunking.sentences import Sentences

__all__ = ["ChunkingStrategy", "FixedTokens", "Sentences", "Span"]
