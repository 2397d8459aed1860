"""Dagster resource for a vLLM server: the chunker of a step talks to it over HTTP."""

from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from latechunk_dagster.core.engines.vllm_server import RemoteLateChunker
from latechunk_dagster.integration.resources import EnginePath


class VLLMServerEngineResource(ConfigurableResource):
    """A :class:`~latechunk_dagster.RemoteLateChunker` per process, on a running vLLM server.

    Same contract as ``VLLMEngineResource.get_chunker()``: the chunker (a probe of the server
    and the tokenization check, well under a second) starts on the first call of the process
    and is closed in ``teardown_after_execution``. Nothing heavy runs in the step process, so
    many steps (multiprocess or k8s executors) can share one server; bound them with a Dagster
    concurrency pool per server.

    Example::

        import dagster as dg
        from latechunk_dagster import DocumentStoreResource, LanceDBResource, late_chunk_assets
        from latechunk_dagster.integration.remote import VLLMServerEngineResource

        defs = late_chunk_assets(table_name="chunks_minilm").to_definitions(
            resources={
                "engine": VLLMServerEngineResource(base_url="http://vllm-0:8000",
                                                   model="/models/all-MiniLM-L6-v2",
                                                   max_in_flight=8, timeout_s=120),
                "lancedb": LanceDBResource(uri="/tmp/latechunk-example/lancedb"),
                "store": DocumentStoreResource(path="/tmp/latechunk-example/documents"),
            },
        )
    """

    base_url: str = Field(description="Root URL of the vLLM server (http://host:port).")
    model: str = Field(description="Local directory of the served model (its tokenizer and head run here).")
    served_model: str | None = Field(default=None, description="Model name on the server (default: its first).")
    max_in_flight: int = Field(default=4, description="Requests in flight at once from one step.")
    timeout_s: float = Field(default=120.0, description="Timeout of one request, seconds.")
    retries: int = Field(default=4, description="Extra attempts on connection errors, timeouts, 429/5xx.")
    backoff_s: float = Field(default=0.5, description="First wait between attempts (doubles each time), seconds.")
    max_inputs_per_request: int = Field(default=32, description="Most encoder inputs in one request.")
    max_tokens_per_request: int = Field(default=8192, description="Most tokens in one request.")
    api_key: str | None = Field(default=None, description="Bearer token of a server started with --api-key.")
    engine_path: EnginePath = Field(
        default=EnginePath.auto, description="'auto', 'native' (vLLM >= 0.33 server) or 'token_states'."
    )
    max_model_len: int | None = Field(default=None, description="Encoder input limit (capped at the server's).")
    prefix: str | None = Field(default=None, description="Document instruction prefix (default: model's).")
    query_prefix: str | None = Field(default=None, description="Query instruction prefix (default: model's).")
    dimensions: int | None = Field(default=None, description="Matryoshka cut after the mean.")
    window_overlap: int | None = Field(default=None, description="Overlap of windows for long documents (tokens).")
    allow_causal: bool = Field(default=False, description="Opt in to causal models (recorded in lineage).")
    allow_non_mean_pooling: bool = Field(default=False, description="Opt in to CLS/last-token pooled models.")

    _chunker: RemoteLateChunker | None = PrivateAttr(default=None)
    _log: Any = PrivateAttr(default=None)

    def model_path(self) -> str:
        return self.model

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._log = context.log

    def _start(self) -> RemoteLateChunker:
        chunker = RemoteLateChunker(
            self.base_url,
            self.model_path(),
            served_model=self.served_model,
            max_in_flight=self.max_in_flight,
            timeout_s=self.timeout_s,
            retries=self.retries,
            backoff_s=self.backoff_s,
            max_inputs_per_request=self.max_inputs_per_request,
            max_tokens_per_request=self.max_tokens_per_request,
            api_key=self.api_key,
            engine_path=EnginePath(self.engine_path).value,  # type: ignore[arg-type]
            max_model_len=self.max_model_len,
            prefix=self.prefix,
            query_prefix=self.query_prefix,
            dimensions=self.dimensions,
            window_overlap=self.window_overlap,
            allow_causal=self.allow_causal,
            allow_non_mean_pooling=self.allow_non_mean_pooling,
        )
        if self._log:
            self._log.info(f"{chunker.engine.describe() if chunker.engine else ''}: path={chunker.path}")
        return chunker

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._chunker is not None:
            self._chunker.close()
            self._chunker = None

    def get_chunker(self) -> RemoteLateChunker:
        """The chunker of this process, started on first use and closed at teardown."""
        if self._chunker is None:
            self._chunker = self._start()
        return self._chunker
