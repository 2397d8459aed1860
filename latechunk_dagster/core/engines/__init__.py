"""Engines behind :class:`~latechunk_dagster.core.chunker.LateChunker`: the interface and its implementations."""

from latechunk_dagster.core.engines.base import Engine, NativeChunks

__all__ = ["Engine", "NativeChunks"]
