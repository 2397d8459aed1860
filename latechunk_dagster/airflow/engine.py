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
import difflib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from latechunk_dagster.core.chunker import ENGINES, LateChunker
from latechunk_dagster.pipeline.engine_settings import (
    ChunkerOptions,
    TransformersSettings,
    VLLMSettings,
    engine_up_line,
)
from latechunk_dagster.pipeline.shard import ShardSettings

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
        vllm: the in-process ``vllm.LLM``
            (:class:`~latechunk_dagster.pipeline.engine_settings.VLLMSettings`: defaults float32 and
            0.3 on CPU, auto and 0.9 on GPU).
        transformers: the light engine's ``device`` and ``forward_tokens``
            (:class:`~latechunk_dagster.pipeline.engine_settings.TransformersSettings`: the values
            Dagster's ``TransformersEngineResource(device=, batch_tokens=)`` passes).
        options: the ``LateChunker`` options every engine shares
            (:class:`~latechunk_dagster.pipeline.engine_settings.ChunkerOptions`: ``max_model_len``,
            ``engine_path``, ``prefix``, ``query_prefix``, ``dimensions``, ``window_overlap``, and the
            opt-ins ``allow_causal``, ``allow_non_mean_pooling``, ``trust_remote_code``).

    Raises:
        ValueError: (when built) an ``engine`` other than :data:`~latechunk_dagster.core.chunker.ENGINES`;
            ``engine="transformers"`` with a ``vllm_conn_id`` or a vLLM setting (each named); a
            transformers setting for another engine (named).
    """

    model: str | None = None
    vllm_conn_id: str | None = None
    engine: str = "vllm"
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    options: ChunkerOptions = field(default_factory=ChunkerOptions)
    transformers: TransformersSettings = field(default_factory=TransformersSettings)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {list(ENGINES)}, got {self.engine!r}")
        if self.engine != "transformers":
            given = [f"{k}={getattr(self.transformers, k)!r}" for k in TransformersSettings.field_names()]
            given = [g for g in given if not g.endswith("=None")]
            if given:
                raise ValueError(f"{', '.join(given)} set the transformers engine; engine={self.engine!r} takes none")
        if self.engine == "transformers":
            vllm = self.vllm
            settings = {
                "vllm_conn_id": self.vllm_conn_id,
                "dtype": None if vllm.dtype == "float32" else vllm.dtype,
                "gpu_memory_utilization": vllm.gpu_memory_utilization,
                "tensor_parallel_size": None if vllm.tensor_parallel_size == 1 else vllm.tensor_parallel_size,
                "enforce_eager": vllm.enforce_eager,
                "engine_args": vllm.engine_args or None,
            }
            given = [f"{k}={v!r}" for k, v in settings.items() if v is not None]
            if given:
                raise ValueError(f"engine='transformers' runs in the task in float32 and takes no {', '.join(given)}")

    def start(self) -> LateChunker:
        """A new chunker on this spec (the caller closes it). An in-process engine starts on the first
        encode, so a shard with nothing to encode (empty, or every document unchanged) starts none.

        Raises:
            ValueError: no model for an in-process engine; anything ``LateChunker`` raises
                (a model refused without its opt-in, an engine that cannot start).
        """
        options = self.options.kwargs()
        if self.engine == "transformers":
            if not self.model:
                raise ValueError("engine='transformers' needs `model` (a model directory)")
            return self.transformers.start(self.model, self.options, engine_start="first_encode")
        if self.vllm_conn_id:
            from latechunk_dagster.airflow.hooks.vllm import VLLMServerHook

            return VLLMServerHook(self.vllm_conn_id).get_chunker(self.model, **options)
        if not self.model:
            raise ValueError("an in-process engine needs `model` (a model directory), or give `vllm_conn_id`")
        return self.vllm.start(self.model, self.options, engine_start="first_encode")


#: The keys of a late-chunk task's ``settings``, by the value each goes to: the engine's name, the
#: in-process ``vllm.LLM`` (:class:`VLLMSettings`), the ``LateChunker`` options
#: (:class:`ChunkerOptions`) and the shard run (:class:`ShardSettings`).
SETTINGS_KEYS: dict[str, tuple[str, ...]] = {
    "engine": ("engine",),
    "vllm": VLLMSettings.field_names(),
    "options": ChunkerOptions.field_names(),
    "transformers": TransformersSettings.field_names(),
    "shard": tuple(f.name for f in fields(ShardSettings)),
}


def task_settings(
    settings: Mapping[str, Any] | None, *, model: str | None = None, vllm_conn_id: str | None = None
) -> tuple[EngineSpec, ShardSettings]:
    """The engine and the shard run's settings of a late-chunk task, from its one ``settings`` dict.

    Args:
        settings: any of :data:`SETTINGS_KEYS`: ``engine`` (``"vllm"``, the default, or
            ``"transformers"``); the in-process ``vllm.LLM``'s ``dtype``, ``gpu_memory_utilization``,
            ``tensor_parallel_size``, ``enforce_eager``, ``engine_args``; the ``LateChunker``
            options ``max_model_len``, ``engine_path``, ``prefix``, ``query_prefix``,
            ``dimensions``, ``window_overlap``, ``allow_causal``, ``allow_non_mean_pooling``,
            ``trust_remote_code``, ``blend`` (the late vector's weight, issue 48); the transformers
            engine's ``device`` and ``forward_tokens``
            (padded tokens per forward pass); the shard run's ``batch_tokens``, ``force``,
            ``max_rejected_share``, ``systemic_min_documents``, ``host_workers``, ``chunks_column``
            (every field of :class:`ShardSettings`). A key left out
            keeps its default (each value's docstring).
        model, vllm_conn_id: as :class:`EngineSpec`.

    Raises:
        ValueError: a key that is none of these (named, with the closest known key: a setting is
            never dropped), or a value out of range (:class:`ShardSettings`, :class:`EngineSpec`).
        TypeError: ``settings`` that is not a mapping.
    """
    if settings is not None and not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a dict of setting names to values, got {type(settings).__name__}")
    given = dict(settings or {})
    known = [key for keys in SETTINGS_KEYS.values() for key in keys]
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"settings: unknown key {key!r}{hint}; the keys are {known}")
    part = {name: {k: given[k] for k in keys if k in given} for name, keys in SETTINGS_KEYS.items()}
    spec = EngineSpec(
        model=model,
        vllm_conn_id=vllm_conn_id,
        **part["engine"],
        vllm=VLLMSettings(**part["vllm"]),
        options=ChunkerOptions(**part["options"]),
        transformers=TransformersSettings(**part["transformers"]),
    )
    return spec, ShardSettings(**part["shard"])


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
        log.info(engine_up_line(chunker))
    try:
        yield chunker
    finally:
        chunker.close()
