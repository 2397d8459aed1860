"""The in-process vLLM engine: one ``vllm.LLM`` with the ``token_embed`` pooler task.

Per-token states come from ``llm.encode(..., pooling_task="token_embed")`` with
``PoolingParams(use_activation=False)`` (normalization off); native chunk means from
``LateChunkingParams`` on vLLM >= 0.33. The CPU defaults below were measured on this
project's machines (2 cores, 24 GiB; the figures are given at each default).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from latechunk_dagster.core.engines.base import Engine, NativeChunks, check_pieces, pair_rows
from latechunk_dagster.core.errors import EngineAnswerError, ModelNotSupportedError

log = logging.getLogger(__name__)

#: ids of live engines whose engine core runs in this process. vLLM keeps its parallel
#: state in module globals: another engine started beside one would break it.
_IN_PROCESS_ENGINES: set[int] = set()


#: What vLLM raises at start for a configuration it cannot serve (pydantic's ValidationError is a ValueError).
_CONFIG_ERRORS = (AttributeError, ValueError, KeyError, TypeError, NotImplementedError, AssertionError)


def check_architecture(model: str | os.PathLike[str], architectures: Sequence[str], version: str) -> None:
    """Refuse, before any start-up work, a model none of whose architectures vLLM's registry has.

    Raises:
        ModelNotSupportedError: naming the model, its architectures and the installed vLLM.
    """
    if not architectures:
        return
    import_vllm()
    from vllm.model_executor.models import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    if not supported.intersection(architectures):
        raise ModelNotSupportedError(
            f"{model}: vLLM {version} cannot run the architecture {list(architectures)} (not in its model "
            "registry); encoders it runs include BertModel, XLMRobertaModel, NomicBertModel and ModernBertModel"
        )


@contextlib.contextmanager
def context_proxies_hidden() -> Iterator[None]:
    """While vLLM starts an engine, werkzeug's context-local proxies are out of module namespaces.

    On a CPU without Triton, vLLM binds its C++ kernels by scanning every attribute of every module
    in ``sys.modules`` with ``hasattr(value, "__dict__")`` (``vllm.triton_utils.dispatcher``).
    ``hasattr`` only swallows ``AttributeError``, and a werkzeug ``LocalProxy`` (``flask.g``,
    ``flask.request``, ...) raises ``RuntimeError`` outside a Flask context, so the engine start
    fails in any process that imported Flask: an Airflow task run by ``dag.test()`` is one.
    Each such attribute is swapped for ``None`` for the start and put back after (the proxies are
    unbound then anyway). Nothing is done where werkzeug was not imported.
    """
    local = sys.modules.get("werkzeug.local")
    proxy_type = getattr(local, "LocalProxy", None)
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    if proxy_type is not None:
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if type(value) is proxy_type:  # type(), not isinstance(): a proxy forwards __class__
                    swapped.append((namespace, name, value))
    try:
        for namespace, name, _ in swapped:
            namespace[name] = None
        yield
    finally:
        for namespace, name, value in swapped:
            namespace[name] = value


#: File patterns of the weights vLLM loads from a model directory (safetensors, shards, PyTorch bins).
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt", "*.pth")


def check_weights(model: str | os.PathLike[str]) -> None:
    """Refuse a local model directory without weights before vLLM starts (it would fail deep in its
    start-up with a long traceback). A server engine needs only the tokenizer and config locally.

    Raises:
        ModelNotSupportedError: naming the directory and the file kinds looked for; or a weight file
            that is a Git LFS pointer or not a safetensors file (:func:`~latechunk_dagster.core.
            model_files.check_model_files`: naming the directory and the file).
    """
    from latechunk_dagster.core.model_files import check_model_files

    path = Path(model)
    if path.is_dir() and not any(next(path.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        raise ModelNotSupportedError(
            f"{path}: no model weights in the directory (looked for {', '.join(WEIGHT_PATTERNS)}); "
            "an in-process engine needs them (a vLLM server engine needs only the tokenizer and config here)"
        )
    check_model_files(path, weights=True)


def native_late_chunking_available() -> bool:
    """True when the installed vLLM has ``vllm.pooling_params.LateChunkingParams`` (vLLM >= 0.33)."""
    try:
        import_vllm()
        from vllm.pooling_params import LateChunkingParams  # noqa: F401
    except ImportError:
        return False
    return True


#: vLLM's log level where ``VLLM_LOGGING_LEVEL`` is not set: errors. vLLM's own default (INFO)
#: prints about 35 lines of start-up messages per engine (kernel registration, thread binding) around
#: a script's own output (issue 40.5); at WARNING still 13 on the CPU, 5 of them one
#: ``torch.set_num_threads`` line and the rest notes on the build (``LD_PRELOAD``, Triton, eager mode)
#: that say nothing about the user's run (issue 51.5).
ENGINE_LOG_LEVEL = "ERROR"
#: The level the commands (``latechunk``, ``make demo``) ask for: errors only.
QUIET_ENGINE_LOG_LEVEL = "ERROR"


def quiet_engine_logs(level: str = ENGINE_LOG_LEVEL) -> None:
    """Set vLLM's log level to ``level`` unless the user set ``VLLM_LOGGING_LEVEL``, whose value wins.

    The one home of the engine's log level: :func:`import_vllm` calls it before this package first
    imports vLLM (every engine start goes through it), the commands call it first with
    :data:`QUIET_ENGINE_LOG_LEVEL`. vLLM reads ``VLLM_LOGGING_LEVEL`` when it is first imported (the
    variable reaches the engine core processes it spawns too); where it was imported already, its
    logger's level is set. Below INFO this also drops vLLM's ``FutureWarning``s and torch's C++
    warnings (``TORCH_CPP_LOG_LEVEL``, e.g. ``NUMA binding``); at ERROR, messages logged while vLLM
    is being imported (``Triton is installed, but ...``) too. ``VLLM_LOGGING_LEVEL=INFO`` brings all
    of it back; ``VLLM_CONFIGURE_LOGGING=0`` (vLLM leaves its logging to the user) leaves it alone too.
    """
    if os.environ.get("VLLM_CONFIGURE_LOGGING", "1").strip() == "0":
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", level)
    if engine_log_is_verbose():
        return
    logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")


def import_vllm() -> Any:
    """``import vllm``, with its log level set first (:func:`quiet_engine_logs`): this module's
    first import of vLLM, wherever it happens, goes through here."""
    quiet_engine_logs()
    import vllm

    return vllm


def engine_log_is_verbose() -> bool:
    """True when vLLM logs at INFO or DEBUG (its default): then its progress bars are shown too."""
    return os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper() in ("INFO", "DEBUG")


def on_cpu() -> bool:
    """True when vLLM's current platform is the CPU."""
    import_vllm()
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine(Engine):
    """One ``vllm.LLM`` in this process (its engine core in process on the CPU).

    Args:
        model: model directory.
        max_model_len: longest encoder input in tokens.
        dtype: vLLM dtype; default ``"float32"`` on the CPU (vLLM's ``"auto"`` there silently
            downcasts float32 weights to float16) and ``"auto"`` on a GPU. Once started, the
            attribute ``dtype`` is the one vLLM resolved (``"float16"``, ``"bfloat16"``,
            ``"float32"``), the dtype the states are computed in.
        gpu_memory_utilization: vLLM's memory fraction; default 0.3 on the CPU (a fraction of
            host memory there; 0.92 fails to start) and 0.9 on a GPU.
        in_process: run vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
            Default True on the CPU (measured 2.9 s vs 22 s start-up, 5,400 vs 3,600 tokens/s,
            no child process left behind), vLLM's default elsewhere.
        trust_remote_code: let vLLM run configuration code shipped with the model (the caller's
            explicit opt-in, see ``LateChunker``).
        architectures: the model's ``config.json`` architectures, checked against vLLM's model
            registry before the engine starts (empty: not checked).
        hf_overrides: config values vLLM should use (documented defaults the config omits), merged
            under the caller's own ``hf_overrides``.
        **engine_kwargs: passed to ``vllm.LLM``; on the CPU ``enforce_eager`` defaults to True
            (torch.compile measured +35 s start-up for +25% tokens/s).

    Raises:
        RuntimeError: another in-process engine is live in this process (close it first).
        ModelNotSupportedError: no architecture of the model is one the installed vLLM can run, or
            vLLM refused the model's configuration at start (its message, with the model named).
    """

    name = "vllm"
    supports_span_sums = True  # the package's plugin, registered before the engine starts

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        max_model_len: int,
        dtype: str | None = None,
        gpu_memory_utilization: float | None = None,
        in_process: bool | None = None,
        trust_remote_code: bool = False,
        architectures: Sequence[str] = (),
        hf_overrides: dict[str, Any] | None = None,
        **engine_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        from vllm import LLM
        from vllm.config import PoolerConfig

        if _IN_PROCESS_ENGINES:
            # seen here: starting a second vLLM engine (in or out of process) tears down the
            # parallel state of the live in-process one, whose next encode then fails
            raise RuntimeError("another LateChunker runs its engine in this process; close it first")
        cpu = on_cpu()
        self.dtype = dtype or ("float32" if cpu else "auto")
        self.in_process = cpu if in_process is None else in_process
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if self.in_process else "1"
        if cpu:
            engine_kwargs.setdefault("enforce_eager", True)
        # The weight-loading progress bar follows vLLM's log level: none when it only logs warnings or errors.
        engine_kwargs.setdefault("use_tqdm_on_load", engine_log_is_verbose())
        mem = gpu_memory_utilization if gpu_memory_utilization is not None else (0.3 if cpu else 0.9)
        self.version = vllm.__version__
        self.supports_native = native_late_chunking_available()
        check_architecture(model, architectures, self.version)
        check_weights(model)
        overrides = {**(hf_overrides or {}), **(engine_kwargs.pop("hf_overrides", None) or {})}
        if overrides:
            engine_kwargs["hf_overrides"] = overrides
        from latechunk_dagster.vllm_plugin import register

        register()  # span sums in the pooler (vLLM also loads it as a general plugin where installed)
        t0 = time.perf_counter()
        try:
            with context_proxies_hidden():
                self.llm: Any = LLM(
                    model=str(Path(model)),
                    runner="pooling",
                    pooler_config=PoolerConfig(task="token_embed"),
                    max_model_len=max_model_len,
                    dtype=self.dtype,
                    gpu_memory_utilization=mem,
                    trust_remote_code=trust_remote_code,
                    **engine_kwargs,
                )
        except _CONFIG_ERRORS as exc:
            # vLLM's own refusals of a model's configuration surface as raw errors from deep inside
            # its start-up (AttributeError on a missing config field, pydantic ValidationError,
            # NomicBert's asserts): one sentence naming the model, with vLLM's reason.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ModelNotSupportedError(
                f"{model}: vLLM {self.version} could not start an engine for {list(architectures) or 'it'}: "
                f"{type(exc).__name__}: {reason}"
            ) from exc
        self.startup_seconds = time.perf_counter() - t0
        # the dtype vLLM resolved and computes the states in ("auto" is float16 for a pooling model
        # on a GPU; "half", "Float32"... are spellings), as LateChunker.settings records it
        self.dtype = str(self.llm.model_config.dtype).removeprefix("torch.")
        if self.in_process:
            _IN_PROCESS_ENGINES.add(id(self))
        if not self.in_process:
            self._probe_span_sums()
        log.info("vLLM %s engine for %s started in %.1f s", self.version, model, self.startup_seconds)

    def _probe_span_sums(self) -> None:
        """An engine core in its own process loads the span plugin only where vLLM loads the package's
        general plugins (installed, and named by ``VLLM_PLUGINS`` if that is set): ask it once; where
        it answers token rows instead of span sums, this engine takes the token-state path."""
        ids = [0, 1]
        try:
            probe = np.array([[0, 2]], dtype=np.int64)
            self.span_sums([ids], [probe])
        except EngineAnswerError as exc:
            self.supports_span_sums = False
            log.warning("the engine core has no span sums (%s); chunks take the token-state path", exc)

    def _live(self) -> Any:
        if self.llm is None:
            raise RuntimeError("LateChunker is closed")
        return self.llm

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        from vllm import PoolingParams, TokensPrompt

        if not prompts:
            return []
        outs = self._live().encode(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            pooling_params=PoolingParams(use_activation=False),
            pooling_task="token_embed",
            use_tqdm=False,
        )
        # shape of each: [n_tokens, dim]
        return [o.outputs.data.float().numpy() for o in outs]

    def span_sums(self, prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray]) -> list[np.ndarray]:
        """:meth:`Engine.span_sums` computed in vLLM's pooler (:mod:`latechunk_dagster.vllm_plugin`):
        the token states stay in the engine; ``(2 * dim + 1) * 4`` bytes per piece leave it."""
        from vllm import PoolingParams, TokensPrompt

        from latechunk_dagster.vllm_plugin import SPANS_KEY

        if not prompts:
            return []
        check_pieces(prompts, pieces)
        params = [
            PoolingParams(use_activation=False, extra_kwargs={SPANS_KEY: p[:, :2].ravel().tolist()}) for p in pieces
        ]
        outs = self._live().encode(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            pooling_params=params,
            pooling_task="token_embed",
            use_tqdm=False,
        )
        # shape of each: [n_pieces, 2 * dim + 1] (hi, lo, count)
        return [pair_rows(o.outputs.data.float().numpy(), p, self.describe()) for o, p in zip(outs, pieces)]

    def native_chunks(
        self, texts: Sequence[str], chunk_size: int, *, dimensions: int | None, normalize: bool
    ) -> list[NativeChunks]:
        from vllm import PoolingParams
        from vllm.pooling_params import LateChunkingParams

        params = PoolingParams(
            late_chunking_params=LateChunkingParams(chunk_size=chunk_size),
            dimensions=dimensions,
            use_activation=normalize,
        )
        outs = self._live().encode(list(texts), pooling_params=params, pooling_task="token_embed", use_tqdm=False)
        return [
            NativeChunks(
                list(o.prompt_token_ids),
                [tuple(c.token_range) for c in o.late_chunking.chunks],
                # shape: [n_chunks, dim]
                np.ascontiguousarray(o.outputs.data.float().numpy(), dtype=np.float32),
            )
            for o in outs
        ]

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # pragma: no cover - best effort on odd vLLM builds
            log.exception("vLLM engine shutdown failed")
        _IN_PROCESS_ENGINES.discard(id(self))
        del llm
        gc.collect()
