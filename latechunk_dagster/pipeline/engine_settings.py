"""The engine a shard run's chunker starts on: one home for both orchestrators.

Dagster's engine resources (:mod:`latechunk_dagster.integration.resources`) and Airflow's
``LateChunkShardOperator`` (:mod:`latechunk_dagster.airflow.engine`) each build these values whole
from their own configuration and start the chunker through them:

* :class:`ChunkerOptions`: the :class:`~latechunk_dagster.LateChunker` options every engine shares
  (in process, the light transformers engine, a vLLM server);
* :class:`VLLMSettings`: the in-process ``vllm.LLM`` and :meth:`VLLMSettings.start`, the one way a
  chunker on it is started;
* :class:`TransformersSettings`: the light transformers engine (``device``, padded tokens per
  forward pass) and :meth:`TransformersSettings.start`;
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
        blend: the late vector's weight in each chunk vector, in [0, 1]
            (:mod:`latechunk_dagster.core.blending`; ``None``: ``LateChunker``'s default, 1.0, late chunking).
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
    blend: float | None = None

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


@dataclass(frozen=True)
class TransformersSettings:
    """The light transformers engine of a chunker (``LateChunker(engine="transformers")``: the model's
    own transformers class in float32, no vLLM).

    Attributes:
        device: torch device (``None``: ``cuda`` where torch sees a GPU, else ``cpu``; ``"mps"`` on Apple).
        forward_tokens: padded tokens per forward pass (``None``: the engine's default, 16,384); the
            engine's own ``batch_tokens``, not the shard run's (document tokens per engine call).

    Raises:
        ValueError: (when built) ``forward_tokens`` that is not an integer >= 1, or a ``device``
            that is not a non-empty string.
    """

    device: str | None = None
    forward_tokens: int | None = None

    def __post_init__(self) -> None:
        n = self.forward_tokens
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"forward_tokens must be an integer >= 1 (padded tokens per forward pass), got {n!r}")
        if self.device is not None and (not isinstance(self.device, str) or not self.device.strip()):
            raise ValueError(f"device must be a torch device name ('cpu', 'cuda:1', 'mps'), got {self.device!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The setting names, in order."""
        return tuple(f.name for f in fields(cls))

    def start(self, model: str | os.PathLike[str], options: ChunkerOptions, engine_start: str = "now") -> LateChunker:
        """A new chunker on ``model`` with the transformers engine of these settings (the caller closes it);
        ``engine_start="first_encode"``: the engine starts on the first encode (``LateChunker``'s option).

        Raises:
            Whatever ``LateChunker`` raises (a model refused without its opt-in, an unknown device).
        """
        engine: dict[str, Any] = {"device": self.device, "engine_start": engine_start}
        if self.forward_tokens is not None:
            engine["forward_tokens"] = self.forward_tokens
        return LateChunker(model, engine="transformers", **options.kwargs(), **engine)


def engine_up_line(chunker: LateChunker) -> str:
    """The log line of a chunker: ``"<engine> up in <s> s (path=..., model=...)"``; an engine that starts on
    the first encode says so instead of a start time."""
    engine = chunker.engine.describe() if chunker.engine else "engine"
    if not chunker.engine_started:
        return f"{engine} (path={chunker.path}, model={chunker.card.path})"
    return f"{engine} up in {chunker.startup_seconds:.1f} s (path={chunker.path}, model={chunker.card.path})"
