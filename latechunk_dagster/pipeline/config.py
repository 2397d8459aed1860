"""What a chunk vector depends on besides its document's text, as one fingerprint; batch defaults."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.core.chunking import ChunkingStrategy, Sentences
from latechunk_dagster.core.chunking.segmenters import segmenter_version
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.results import VLLM_ENGINES, ChunkerSettings

#: Version of the package's chunking semantics (token -> span assignment, char ranges, mean,
#: head order, window stitching). Raise it with any change that can alter a stored vector or
#: range: every stored row then no longer matches and is re-encoded on its next materialization.
#: 2: ``chunk_id`` / ``rejection_id`` are hashes of JSON arrays of their fields (they were fields
#: joined with U+001F, which collide across partitions), and char ranges extend over characters
#: that produced no token (contract section 2). Rows of version 1 are re-encoded, and their old ids are
#: deleted by the same commit (they are not matched by any new row of their replaced documents).
#: 3: the windows of a long document share the overlap the settings record (the default, an eighth
#: of the window length, 32 at 256; version 2 recorded that number but planned an eighth of the
#: window less its special and prefix tokens, 31 at 256), and the dtype recorded is the one vLLM
#: resolved. Version-2 rows of windowed documents hold the vectors of the old overlap under the
#: same recorded one, so every version-2 row is re-encoded.
#: 4: boundary strategies keep Markdown structure, cut between words, merge chunks under ``min_tokens``
#: and record headings on every row (issue 46): their boundaries move, so version-3 rows are re-encoded.
CHUNKING_VERSION = 4

#: The default strategy of a table (Dagster's factory, Airflow's operator): sentences packed into
#: chunks of at most 128 tokens.
DEFAULT_STRATEGY = Sentences(max_tokens=128)

#: Document tokens per engine call on the CPU: ~12 MB of 384-d float32 states; larger batches
#: measured no faster on 2 cores (the encoder is compute-bound there).
CPU_BATCH_TOKENS = 8_192

#: Document tokens per engine call on a GPU: enough windows to fill vLLM's scheduler many times
#: over (a 256-token model: 512 windows), still ~0.2 GB of 384-d float32 states.
GPU_BATCH_TOKENS = 131_072


def default_batch_tokens(chunker: LateChunker) -> int:
    """:data:`CPU_BATCH_TOKENS` when vLLM runs on the CPU (or cannot tell), else :data:`GPU_BATCH_TOKENS`."""
    try:
        from latechunk_dagster.core.engines.vllm_local import on_cpu

        return CPU_BATCH_TOKENS if on_cpu() else GPU_BATCH_TOKENS
    except Exception:  # no vLLM platform to ask: stay small
        return CPU_BATCH_TOKENS


#: Host worker processes of a partition (:func:`default_host_workers`): measured in
#: ``bench/host_ceiling.py`` (bench/README.md). Environment override: ``LATECHUNK_HOST_WORKERS``.
HOST_WORKERS_ENV = "LATECHUNK_HOST_WORKERS"


def check_host_workers(value: object, *, source: str = "host_workers") -> int:
    """``value`` as a host worker count: an integer >= 0 (``0``: in process); ``source`` names the
    setting in the error.

    Raises:
        ValueError: ``value`` is a bool, not an integer, or negative.
    """
    try:
        count = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        count = -1
    if isinstance(value, bool) or count < 0 or (not isinstance(value, str) and count != value):
        raise ValueError(f"{source}={value!r}: expected an integer >= 0 (0 = in process)")
    return count


def default_host_workers() -> int:
    """Host worker processes of :func:`~latechunk_dagster.pipeline.materialize_partition` by default.

    ``LATECHUNK_HOST_WORKERS`` when set (an integer, ``0`` = in process); else ``0``: the host work
    runs in the calling and writer threads, on any machine, except the conversion of document files,
    which then runs in :func:`conversion_workers` processes (``0`` given, by argument or variable,
    converts in the calling thread too).

    Measured on 2 cores (``bench/host_ceiling.py``, ``bench/gpu_proxy.py``, bench/README.md), free
    engine at the GPU batch: 2 workers 1.15x the threads, 1 worker 0.87x; each worker costs ~200 MB
    and a start of a few seconds per chunker, and the parent's own share of the host work bounds a
    pool at ~1.8M tokens/s whatever its size (a projection from the CPU split; no machine with more
    cores has been measured). The partition-path tests (streaming, incremental, Dagster pipeline,
    host pool, long documents, stores, hostile inputs, precision, strategies: 152 tests) pass with
    ``LATECHUNK_HOST_WORKERS=2``. The default stays ``0`` because the gain on 2 cores is small and
    a worker pool changes what a process holds (processes, memory, shared-memory blocks, a
    ``spawn`` start that re-imports a plain script's ``__main__``); set ``host_workers`` (the
    Dagster engine resource's field, ``LateChunkShardOperator(settings={"host_workers": N})``) or
    ``LATECHUNK_HOST_WORKERS`` to use them, on a many-core GPU host from 1 per 2-4 cores, measured
    with ``bench/host_ceiling.py --workers 1,4,8,16``.

    Raises:
        ValueError: ``LATECHUNK_HOST_WORKERS`` is not an integer >= 0.
    """
    given = host_workers_env()
    return 0 if given is None else given


def host_workers_env() -> int | None:
    """``LATECHUNK_HOST_WORKERS`` as a worker count, ``None`` when unset or blank.

    Raises:
        ValueError: it is not an integer >= 0.
    """
    raw = os.environ.get(HOST_WORKERS_ENV)
    if raw is not None and raw.strip():
        return check_host_workers(raw, source=HOST_WORKERS_ENV)
    return None


#: Most host worker processes :func:`conversion_workers` starts by default (each holds ~200 MB).
MAX_CONVERSION_WORKERS = 8

#: Cores :func:`conversion_workers` leaves to the run's own process beside a GPU engine: the engine
#: thread (vLLM's scheduler and its input preparation) and the stream's calling and writer threads.
ENGINE_CORES = 2


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or ``taskset``'s), else ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def conversion_workers(cores: int | None = None, engine_on_cpu: bool | None = None) -> int:
    """Host worker processes that convert a partition's document files when no setting says otherwise
    (neither ``host_workers`` nor ``LATECHUNK_HOST_WORKERS``; issue 49 item 3), so conversion never
    runs in the run's own process by default: a file that crashes or hangs its converter is rejected
    alone (:mod:`latechunk_dagster.pipeline.hostworker`).

    From the machine's cores, leaving the engine what it needs: beside a GPU engine all but
    :data:`ENGINE_CORES`; beside vLLM's CPU build, which computes on the cores, a quarter of them;
    at least 1, at most :data:`MAX_CONVERSION_WORKERS`. 16 cores and a GPU: 8; 2 cores: 1. The pool
    starts at the first document file (a store of JSONL or Parquet starts none).

    Args:
        cores: the cores to share (default :func:`usable_cores`).
        engine_on_cpu: the engine computes on the CPU (default: vLLM's platform, as
            :func:`default_batch_tokens` asks it; ``True`` when it cannot tell).
    """
    cores = usable_cores() if cores is None else cores
    if engine_on_cpu is None:
        try:
            from latechunk_dagster.core.engines.vllm_local import on_cpu

            engine_on_cpu = bool(on_cpu())
        except Exception:  # no vLLM platform to ask: assume the engine needs the cores
            engine_on_cpu = True
    spare = cores // 4 if engine_on_cpu else cores - ENGINE_CORES
    return max(1, min(MAX_CONVERSION_WORKERS, spare))


def vector_config_fields(
    settings: ChunkerSettings, strategy: ChunkingStrategy, parent: tuple[str, ChunkingStrategy] | None = None
) -> dict[str, object]:
    """Everything besides the text that changes a document's vectors or ranges (or, for a fine
    granularity, its parent links).

    ``parent``: for a granularity that has a next (coarser) one, ``(its name, its strategy)``: the
    rows' ``parent_chunk_id`` depend on them, so a change of the coarse strategy rewrites the fine
    table's rows too (issue 29). ``None`` (a single strategy, the coarsest granularity) adds
    nothing, so those rows keep the configuration they had.

    The engine's name is one of them (a change of engine re-encodes the partition's documents, like
    a change of dtype), except for the engines that run vLLM's model code
    (:data:`~latechunk_dagster.core.results.VLLM_ENGINES`): their rows were written before the
    engine was recorded and keep their record (an in-process engine and a server already differ
    by the dtype they record).

    The engine's version (vLLM's, transformers' for the light engine) and, for a strategy that
    segments sentences, its segmenter's package version count too (issue 36: an upgrade of either
    may move vectors or boundaries, so it opens a generation instead of mixing old and new rows).
    A blend weight other than 1 (:mod:`latechunk_dagster.core.blending`) is one more field: changing it
    opens a generation; late chunking (``blend=1``) adds nothing, so its rows keep their record.
    A converter's version joins here as one more field: the generation key
    (:func:`~latechunk_dagster.sink.generations.definition_key`) is built from ``vector_config`` and
    follows it with no change of its own.
    """
    engine = {} if settings.engine in VLLM_ENGINES else {"engine": settings.engine}
    engine |= {} if parent is None else {"parent": [parent[0], parent[1].name, parent[1].params()]}
    if settings.blend != 1.0:  # blended vectors (issue 48); late chunking's rows keep their record
        engine["blend"] = settings.blend
    params = strategy.params()
    if isinstance(params.get("segmenter"), str):
        engine["segmenter_version"] = segmenter_version(params["segmenter"])
    return engine | {
        "engine_version": settings.engine_version,
        "chunking_version": CHUNKING_VERSION,
        "model_sha256": settings.model_sha256,
        "head": settings.head,
        "opt_ins": sorted(settings.opt_ins),
        "dtype": settings.dtype,
        "prefix": settings.prefix,
        "window_length": settings.window_length,
        "window_overlap": settings.window_overlap,
        "allow_windows": settings.allow_windows,
        "strategy": strategy.name,
        "strategy_params": strategy.params(),
    }


def vector_config(
    settings: ChunkerSettings, strategy: ChunkingStrategy, parent: tuple[str, ChunkingStrategy] | None = None
) -> str:
    """Hex sha256 (first 32 characters) of :func:`vector_config_fields`, stored per chunk row in
    ``vector_config``: a document is re-encoded when its text or this value changed."""
    blob = json.dumps(vector_config_fields(settings, strategy, parent), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def normalised(granularities: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy]) -> Granularities:
    """``granularities`` as the checked :class:`~latechunk_dagster.core.granularities.Granularities`
    value the run's edge built (returned as it is); a bare strategy or a mapping (an older caller's
    form) is checked into one here."""
    return Granularities.of(granularities)


def is_single(granularities: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy]) -> bool:
    """One strategy (its table is the definition's own name), not several granularities."""
    return Granularities.of(granularities).single


def granularity_configs(settings: ChunkerSettings, granularities: Granularities | ChunkingStrategy) -> dict[str, str]:
    """``{granularity: vector_config}`` of a run, finest first (``{"": config}`` for one strategy):
    each granularity's :func:`vector_config` with the next granularity as its parent.

    Args:
        granularities: as the run's edge normalised them (:data:`Granularities`).
    """
    granularities = normalised(granularities)
    names = list(granularities)
    return {
        g: vector_config(settings, s, (names[k + 1], granularities[names[k + 1]]) if k + 1 < len(names) else None)
        for k, (g, s) in enumerate(granularities.items())
    }
