"""Named engines, started now or on their first call.

:func:`named_engine` builds :class:`~latechunk_dagster.LateChunker`'s ``engine="vllm"`` and
``engine="transformers"``. With ``engine_start="first_encode"`` it returns a :class:`DeferredEngine`:
an :class:`~latechunk_dagster.core.engines.Engine` whose name, version, capabilities and (where known)
dtype are known before it starts, and which starts the real engine on its first engine call. A Dagster
step or an Airflow task whose shard has nothing to encode (every document unchanged, an empty shard)
then never loads the model, and the first shard that encodes starts it; the next ones reuse it (one
engine per process, as before).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from latechunk_dagster.core.engines.base import Engine, NativeChunks

if TYPE_CHECKING:
    from latechunk_dagster.core.chunker_host import ChunkerHost

log = logging.getLogger(__name__)

#: dtype names vLLM resolves to themselves (``model_config.dtype``): a deferred vLLM engine asked for one
#: of these knows its dtype before it starts.
CANONICAL_DTYPES = frozenset({"float32", "float16", "bfloat16"})


class DeferredEngine(Engine):
    """An engine started on its first call (module docstring).

    Args:
        start: builds and starts the real engine (called once, under a lock).
        name, version, supports_native, supports_span_sums: the real engine's, known before it starts.
        dtype: the dtype the real engine will compute in, or ``None`` when only starting it tells
            (then reading :attr:`dtype` starts it).
        in_process: the real engine's core runs in this process.
    """

    def __init__(
        self,
        start: Callable[[], Engine],
        *,
        name: str,
        version: str,
        supports_native: bool,
        supports_span_sums: bool,
        dtype: str | None,
        in_process: bool,
    ) -> None:
        self._start = start
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.name, self.version = name, version
        self.supports_native, self.supports_span_sums = supports_native, supports_span_sums
        self._dtype = dtype
        self.in_process = in_process
        #: how many times the real engine was started (0 or 1)
        self.starts = 0

    @property
    def started(self) -> bool:
        """True once the real engine runs."""
        return self._engine is not None

    def live(self) -> Engine:
        """The real engine, started on the first call.

        Raises:
            RuntimeError: the engine was closed, or it started with other capabilities than promised.
            Whatever starting the engine raises (``ModelNotSupportedError``...).
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("LateChunker is closed")
            if self._engine is None:
                engine = self._start()
                self.starts += 1
                promised = (self.name, self.supports_native, self.supports_span_sums)
                got = (engine.name, engine.supports_native, engine.supports_span_sums)
                if got != promised:
                    engine.close()
                    raise RuntimeError(f"the engine started as {got}, not as planned {promised}")
                self._engine = engine
            return self._engine

    @property
    def dtype(self) -> str:
        """The dtype of the states: the one asked for where it is canonical, else the real engine's
        (reading it then starts the engine)."""
        if self._engine is None and self._dtype is not None:
            return self._dtype
        return str(getattr(self.live(), "dtype", "auto"))

    @property
    def startup_seconds(self) -> float:  # type: ignore[override]
        """Seconds the real engine took to start; 0.0 before it starts."""
        return float(getattr(self._engine, "startup_seconds", 0.0)) if self._engine is not None else 0.0

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        return self.live().token_states(prompts)

    def span_sums(self, prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.live().span_sums(prompts, pieces)

    def native_chunks(
        self, texts: Sequence[str], chunk_size: int, *, dimensions: int | None = None, normalize: bool = True
    ) -> list[NativeChunks]:
        return self.live().native_chunks(texts, chunk_size, dimensions=dimensions, normalize=normalize)

    def close(self) -> None:
        with self._lock:
            engine, self._engine, self._closed = self._engine, None, True
        if engine is not None:
            engine.close()

    def describe(self) -> str:
        if self._engine is not None:
            return self._engine.describe()
        return f"{self.name} {self.version} (starts on the first encode)"


def named_engine(
    named: str,
    host: ChunkerHost,
    trust_remote_code: bool,
    deferred: bool,
    vllm_args: Mapping[str, Any],
    options: Mapping[str, Any],
) -> Engine:
    """The engine ``LateChunker(engine=named)`` encodes with: started now, or (``deferred``) a
    :class:`DeferredEngine` where its core runs in this process (else started now).

    Args:
        named: ``"vllm"`` or ``"transformers"``.
        host: the chunker's host part (the model, its lengths, head, architectures).
        vllm_args: ``dtype``, ``gpu_memory_utilization``, ``in_process`` (vLLM's; ``None``: default).
        options: the engine's other keyword arguments (vLLM's ``**engine_kwargs``; the light engine's
            ``device`` and ``forward_tokens``).

    Raises:
        ModelNotSupportedError: vLLM cannot run the model's architecture, or its weights are missing
            (checked now, deferred or not); whatever starting the engine raises, when it starts now.
    """
    card = host.card
    if named == "transformers":
        from latechunk_dagster.core.engines.transformers_engine import TransformersEngine

        kwargs = dict(options)
        if "forward_tokens" in kwargs:  # the engine's own keyword for padded tokens per forward pass
            kwargs["batch_tokens"] = kwargs.pop("forward_tokens")

        def start() -> Engine:
            return TransformersEngine(
                card.path,
                max_model_len=host.max_model_len,
                dense=host.head.dense,
                trust_remote_code=trust_remote_code,
                **kwargs,
            )

        if not deferred:
            return start()
        import transformers

        from latechunk_dagster.core.model_files import check_model_files

        check_model_files(card.path, weights=True)  # as the engine's load would, before it is deferred

        traits = {"supports_native": TransformersEngine.supports_native}
        traits |= {"supports_span_sums": TransformersEngine.supports_span_sums}
        return DeferredEngine(
            start, name="transformers", version=transformers.__version__, dtype="float32", in_process=True, **traits
        )
    from latechunk_dagster.core.engines import vllm_local

    def start_vllm() -> Engine:
        return vllm_local.VLLMEngine(
            card.path,
            max_model_len=host.max_model_len,
            trust_remote_code=trust_remote_code,
            architectures=card.architectures,
            hf_overrides=dict(card.config_fills),
            **vllm_args,
            **options,
        )

    cpu = vllm_local.on_cpu()
    in_process = cpu if vllm_args.get("in_process") is None else bool(vllm_args["in_process"])
    if not (deferred and in_process):
        return start_vllm()
    version = vllm_local.import_vllm().__version__
    vllm_local.check_architecture(card.path, card.architectures, version)
    vllm_local.check_weights(card.path)
    dtype = vllm_args.get("dtype") or ("float32" if cpu else None)
    return DeferredEngine(
        start_vllm,
        name="vllm",
        version=version,
        supports_native=vllm_local.native_late_chunking_available(),
        supports_span_sums=vllm_local.VLLMEngine.supports_span_sums,
        dtype=dtype if dtype in CANONICAL_DTYPES else None,
        in_process=True,
    )


def engine_class(named: str) -> type[Engine] | None:
    """What a named engine supports before it starts: the transformers engine's class; ``None`` for
    vLLM (the installed vLLM decides: :meth:`~latechunk_dagster.core.engine_traits.EngineTraits.of`)."""
    if named == "transformers":
        from latechunk_dagster.core.engines.transformers_engine import TransformersEngine

        return TransformersEngine
    return None


def transformers_options(
    dtype: str | None, gpu_memory_utilization: float | None, in_process: bool | None, options: dict[str, Any]
) -> dict[str, Any]:
    """The light engine's own options (``device``, ``forward_tokens``), ``batch_tokens`` read as
    ``forward_tokens`` with a ``DeprecationWarning``.

    Raises:
        ValueError: vLLM arguments given to it (it computes in float32), or both names given.
    """
    options = dict(options)
    if "batch_tokens" in options:
        if "forward_tokens" in options:
            raise ValueError("give forward_tokens (padded tokens per forward pass) alone, not batch_tokens too")
        warnings.warn(
            "the transformers engine's batch_tokens is now forward_tokens (padded tokens per forward pass)",
            DeprecationWarning,
            stacklevel=3,
        )
        options["forward_tokens"] = options.pop("batch_tokens")
    vllm_args = {"dtype": dtype if dtype not in (None, "float32") else None}
    vllm_args |= {"gpu_memory_utilization": gpu_memory_utilization, "in_process": in_process}
    given = [f"{k}={v!r}" for k, v in vllm_args.items() if v is not None]
    given += [f"{k}={v!r}" for k, v in options.items() if k not in ("device", "forward_tokens")]
    if given:
        raise ValueError(
            f"engine='transformers' computes in float32 and takes no vLLM arguments: {', '.join(given)} "
            "(its own options: device, forward_tokens)"
        )
    return options
