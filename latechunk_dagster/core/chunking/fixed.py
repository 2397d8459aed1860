"""``FixedTokens``: chunks of ``chunk_size`` tokens, special tokens included."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span, split_fixed
from latechunk_dagster.core.tokenization import Tokenization


@dataclass(frozen=True)
class FixedTokens(ChunkingStrategy):
    """Spans ``[0, c), [c, 2c), ...``; the last chunk keeps the tokens it has.

    Special tokens and instruction-prefix tokens count toward ``chunk_size`` and sit
    inside the first / last chunk. Identical to vLLM's
    ``LateChunkingParams(chunk_size)`` (contract section 2), so the engine may let vLLM
    reduce these spans in the worker.

    Example:
        >>> FixedTokens(chunk_size=32).describe()
        'fixed_tokens(chunk_size=32)'
    """

    name: ClassVar[str] = "fixed_tokens"
    chunk_size: int

    def __post_init__(self) -> None:
        if type(self.chunk_size) is not int or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {self.chunk_size!r}")

    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        return split_fixed(0, len(tokens), self.chunk_size)
