"""What the chunker's host part knows of its engine without calling it: name and capabilities.

The host part (:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`) decides the engine path
and plans span-sum pieces from these traits alone, so it works where no engine runs (a host worker
process) and before a deferred engine starts (:mod:`latechunk_dagster.core.deferred_engine`).
"""

from __future__ import annotations

from dataclasses import dataclass

from latechunk_dagster.core.engines.base import Engine


@dataclass(frozen=True)
class EngineTraits:
    """An engine's name and what it can do, as plain picklable data.

    Attributes:
        name: :attr:`Engine.name <latechunk_dagster.core.engines.Engine.name>` (``"vllm"``, ``"vllm-server"``,
            ``"transformers"``).
        supports_native: the engine has native late chunking (vLLM >= 0.33, ``LateChunkingParams``).
        supports_span_sums: the engine sums spans where the states are (the span path).
        description: how errors name the engine (``"vllm-server 0.32.0 at http://..."``,
            ``"the installed vLLM"``).
    """

    name: str
    supports_native: bool
    supports_span_sums: bool
    description: str

    @classmethod
    def of(cls, engine: Engine | type[Engine] | None) -> EngineTraits:
        """The traits of a started engine, of an engine class (what it supports before it starts), or,
        for ``None``, of the in-process vLLM engine before it starts (the installed vLLM decides native
        late chunking; the package's span plugin is registered before it starts, so it sums spans)."""
        if engine is None:
            from latechunk_dagster.core.engines.vllm_local import native_late_chunking_available

            return cls("vllm", native_late_chunking_available(), True, "the installed vLLM")
        what = engine.describe() if isinstance(engine, Engine) else f"the {engine.name} engine"
        return cls(engine.name, bool(engine.supports_native), bool(engine.supports_span_sums), what)
