"""What the host steps read of the chunker's host part: a protocol, so the step modules
(:mod:`~latechunk_dagster.core.preparing`, :mod:`~latechunk_dagster.core.finishing`) need not import
:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`, which calls them (no import circle)."""

from __future__ import annotations

from typing import Any, Protocol

from latechunk_dagster.core.engine_traits import EngineTraits
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.head import Head


class HostView(Protocol):
    """The settings of :class:`~latechunk_dagster.core.chunker_host.ChunkerHost` the steps read (its
    docstring says what each is)."""

    tokenizer: Any
    head: Head
    prefix: str
    query_prefix: str
    document_prompt_tokens: int
    query_prompt_tokens: int
    max_model_len: int
    window_length: int
    allow_windows: bool
    strategy_timeout_s: float | None
    opt_ins: tuple[str, ...]
    engine: EngineTraits

    @property
    def resolved_window_overlap(self) -> int: ...

    def engine_path(self, requested: str | None = None, granularities: Granularities | None = None) -> str: ...
