"""The engine a shard run's chunker starts on: one home for both orchestrators.

Dagster's engine resources (:mod:`latechunk_dagster.integration.resources`) and Airflow's
``LateChunkShardOperator`` (:mod:`latechunk_dagster.airflow.engine`) each build these values whole
from their own configuration and start the chunker through them:

* :class:`ChunkerOptions`: the :class:`~latechunk_dagster.LateChunker` options every engine shares
  (in process, the light transformers engine, a vLLM server);
* :class:`VLLMSettings`: the in-process ``vllm.LLM`` and :meth:`VLLMSettings.start`, the one way a
  chunker on it is started;
* :func:`engine_up_line`: the log line of an engine that started.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from latechunk_dagster.core.chunker import LateChunker


@dataclass(frozen=True)
class ChunkerOptions:
    """The :class:`~latechunk_dagster.LateChunker` options every engine shares; the defaults are
    ``LateChunker``'s (``None``: the model's own value).

    Attributes:
        max_model_len: encoder input limit in tokens (default: the model's).
        engine_path: ``"auto"``, ``"native"``, ``"spans"`` or ``"token_states"`` (``LateChunker``'s
            docstring).
        prefix, query_prefix: the document and query instruction prefixes (default: the model's).
        dimensions: Matryoshka cut after the mean.
        window_overlap: tokens shared by consecutive windows of a long document.
        allow_causal, allow_non_mean_pooling, trust_remote_code: the opt-ins (recorded in lineage).
    """

    max_model_len: int | None = None
    engine_path: str = "auto"
    prefix: str | None = None
    query_prefix: str | None = None
    dimensions: int | None = None
    window_overlap: int | None = None
    allow_causal: bool = False
    allow_non_mean_pooling: bool = False
    trust_remote_code: bool = False

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The option names, in order."""
        return tuple(f.name for f in fields(cls))

    def kwargs(self) -> dict[str, Any]:
        """The options as ``LateChunker`` keyword arguments; one left at ``None`` is not passed
        (``LateChunker``'s default, the model's value, applies)."""
        return {name: getattr(self, name) for name in self.field_names() if getattr(self, name) is not None}


@dataclass(frozen=True)
class VLLMSettings:
    """The in-process ``vllm.LLM`` of a chunker (``LateChunker``'s engine arguments).

    Attributes:
        dtype: the model dtype (default: float32 on CPU, auto on GPU).
        gpu_memory_utilization: vLLM's memory fraction (default: 0.3 on CPU, 0.9 on GPU).
        tensor_parallel_size: GPUs per engine.
        enforce_eager: skip torch.compile (``None``: vLLM's default).
        engine_args: other ``vllm.LLM`` keyword arguments.
    """

    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool | None = None
    engine_args: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The setting names, in order."""
        return tuple(f.name for f in fields(cls))

    def start(self, model: str | os.PathLike[str], options: ChunkerOptions, engine_start: str = "now") -> LateChunker:
        """A new chunker on ``model`` with an in-process vLLM engine of these settings (the caller closes it);
        ``engine_start="first_encode"``: the engine starts on the first encode (``LateChunker``'s option).

        Raises:
            Whatever ``LateChunker`` raises (a model refused without its opt-in, an engine that
            cannot start).
        """
        args = dict(self.engine_args)
        if self.enforce_eager is not None:
            args["enforce_eager"] = self.enforce_eager
        return LateChunker(
            model,
            dtype=self.dtype,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            engine_start=engine_start,  # type: ignore[arg-type]
            **options.kwargs(),
            **args,
        )


def engine_up_line(chunker: LateChunker) -> str:
    """The log line of a chunker: ``"<engine> up in <s> s (path=..., model=...)"``; an engine that starts on
    the first encode says so instead of a start time."""
    engine = chunker.engine.describe() if chunker.engine else "engine"
    if not chunker.engine_started:
        return f"{engine} (path={chunker.path}, model={chunker.card.path})"
    return f"{engine} up in {chunker.startup_seconds:.1f} s (path={chunker.path}, model={chunker.card.path})"
