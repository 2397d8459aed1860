"""Which engine a task encodes with: in process (``vllm.LLM`` from operator arguments, or the light
transformers engine) or a vLLM server (a hook).

:class:`EngineSpec` holds what an operator was given; :func:`open_chunker` turns it into a live
:class:`~latechunk_dagster.LateChunker` for the duration of one task and closes it afterwards, so
no engine process outlives the task (Airflow runs every task instance in a process of its own).

One engine per process: vLLM allows a single in-process engine per process, and loading it
takes seconds to minutes. A process that already holds one (a test session, a worker that
runs tasks in-process, ``dag.test()`` in a notebook) hands it to the operators with
:func:`use_chunker`; they then encode with it and leave it open. The handed chunker must be
on the same model directory as the operator's ``model`` (else :class:`ValueError`): a task
never silently encodes with another model than it was told.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latechunk_dagster.core.chunker import ENGINES, LateChunker

_SHARED: dict[str, LateChunker] = {}
_LOCK = threading.Lock()


@contextlib.contextmanager
def use_chunker(chunker: LateChunker) -> Iterator[LateChunker]:
    """Within the block, tasks of this process encode with ``chunker`` instead of starting an engine.

    Example::

        with LateChunker(model_dir, dtype="float32") as chunker, use_chunker(chunker):
            dag.test()          # every late-chunk task of the DAG shares the one engine
    """
    with _LOCK:
        previous = _SHARED.get("chunker")
        _SHARED["chunker"] = chunker
    try:
        yield chunker
    finally:
        with _LOCK:
            if previous is None:
                _SHARED.pop("chunker", None)
            else:
                _SHARED["chunker"] = previous


def shared_chunker() -> LateChunker | None:
    """The chunker handed over with :func:`use_chunker`, if any."""
    return _SHARED.get("chunker")


@dataclass(frozen=True)
class EngineSpec:
    """The engine an operator was configured with.

    Attributes:
        model: model directory on disk (sentence-transformers layout or plain Hugging Face); for a
            server, the local copy of the served model (default: the connection's extra ``model``).
        vllm_conn_id: a ``vllm_server`` connection: encode on that server; ``None``: in process.
        engine: the in-process engine, ``"vllm"`` (default) or ``"transformers"`` (the light engine:
            no vLLM, float32; ``LateChunker(engine="transformers")``).
        dtype, gpu_memory_utilization, tensor_parallel_size, enforce_eager, engine_args: the
            in-process ``vllm.LLM`` (defaults: float32 and 0.3 on CPU, auto and 0.9 on GPU).
        chunker_options: ``LateChunker`` options every engine shares (``max_model_len``,
            ``engine_path``, ``prefix``, ``query_prefix``, ``dimensions``, ``window_overlap``, and the
            opt-ins ``allow_causal``, ``allow_non_mean_pooling``, ``trust_remote_code``).

    Raises:
        ValueError: (when built) an ``engine`` other than :data:`~latechunk_dagster.core.chunker.ENGINES`;
            ``engine="transformers"`` with a ``vllm_conn_id`` or a vLLM setting (each named).
    """

    model: str | None = None
    vllm_conn_id: str | None = None
    engine: str = "vllm"
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    chunker_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {list(ENGINES)}, got {self.engine!r}")
        if self.engine == "transformers":
            vllm = {
                "vllm_conn_id": self.vllm_conn_id,
                "dtype": None if self.dtype == "float32" else self.dtype,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "tensor_parallel_size": None if self.tensor_parallel_size == 1 else self.tensor_parallel_size,
                "enforce_eager": self.enforce_eager,
                "engine_args": self.engine_args or None,
            }
            given = [f"{k}={v!r}" for k, v in vllm.items() if v is not None]
            if given:
                raise ValueError(f"engine='transformers' runs in the task in float32 and takes no {', '.join(given)}")

    def start(self) -> LateChunker:
        """A new chunker on this spec (the caller closes it).

        Raises:
            ValueError: no model for an in-process engine; anything ``LateChunker`` raises
                (a model refused without its opt-in, an engine that cannot start).
        """
        options = {k: v for k, v in self.chunker_options.items() if v is not None}
        if self.engine == "transformers":
            if not self.model:
                raise ValueError("engine='transformers' needs `model` (a model directory)")
            return LateChunker(self.model, engine="transformers", **options)
        if self.vllm_conn_id:
            from latechunk_dagster.airflow.hooks.vllm import VLLMServerHook

            return VLLMServerHook(self.vllm_conn_id).get_chunker(self.model, **options)
        if not self.model:
            raise ValueError("an in-process engine needs `model` (a model directory), or give `vllm_conn_id`")
        args = dict(self.engine_args)
        if self.enforce_eager is not None:
            args["enforce_eager"] = self.enforce_eager
        return LateChunker(
            self.model,
            dtype=self.dtype,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            **options,
            **args,
        )


@contextlib.contextmanager
def open_chunker(spec: EngineSpec, log: Any = None) -> Iterator[LateChunker]:
    """The chunker of one task: the :func:`use_chunker` one (left open), else a new one, closed at the end.

    Raises:
        ValueError: the shared chunker is on another model directory than ``spec.model``, or on the
            transformers engine where the task asks for vLLM (or the other way round).
    """
    shared = shared_chunker()
    if shared is not None:
        if spec.model and Path(spec.model).resolve() != Path(shared.card.path).resolve():
            raise ValueError(f"the process's shared chunker is on {shared.card.path}, the task asks for {spec.model}")
        light = shared.settings.engine == "transformers"
        if light != (spec.engine == "transformers"):
            raise ValueError(
                f"the process's shared chunker runs on the {shared.settings.engine} engine, "
                f"the task asks for {spec.engine}"
            )
        yield shared
        return
    chunker = spec.start()
    if log is not None:
        engine = chunker.engine.describe() if chunker.engine else "engine"
        log.info(
            "%s up in %.1f s (path=%s, model=%s)", engine, chunker.startup_seconds, chunker.path, chunker.card.path
        )
    try:
        yield chunker
    finally:
        chunker.close()
