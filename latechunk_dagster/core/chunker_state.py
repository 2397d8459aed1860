"""What the parts of :class:`~latechunk_dagster.core.chunker.LateChunker` share: its attributes.

:class:`~latechunk_dagster.core.chunker.LateChunker` is composed of one class per job (options,
prepare, encode, finish); each derives from :class:`ChunkerState`, which names the attributes the
constructor sets, and :meth:`ChunkerState._engine`.
"""

from __future__ import annotations

from typing import Any

from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.head import Head
from latechunk_dagster.core.model_card import ModelCard


class ChunkerState:
    """The attributes :meth:`LateChunker.__init__ <latechunk_dagster.core.chunker.LateChunker>` sets."""

    card: ModelCard
    head: Head
    prefix: str
    query_prefix: str
    tokenizer: Any
    document_prompt_tokens: int
    query_prompt_tokens: int
    max_model_len: int
    window_length: int
    window_overlap: int | None
    allow_windows: bool
    strategy_timeout_s: float | None
    opt_ins: tuple[str, ...]
    engine: Engine | None
    path: str

    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("LateChunker is closed")
        return self.engine
