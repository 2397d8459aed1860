"""Dagster resource for a vLLM server: the chunker of a step talks to it over HTTP."""

from pydantic import Field, ValidationInfo, field_validator

from latechunk_dagster.core.engines.vllm_server import ServerSettings, check_server_setting
from latechunk_dagster.core.server_chunker import RemoteLateChunker
from latechunk_dagster.integration.resources import ChunkerResource

_D = ServerSettings()  # the defaults


class VLLMServerEngineResource(ChunkerResource):
    """A :class:`~latechunk_dagster.RemoteLateChunker` per process, on a running vLLM server.

    Same contract as ``VLLMEngineResource.get_chunker()``: the chunker (a probe of the server
    and the tokenization check, well under a second) starts on the first call of the process
    and is closed in ``teardown_after_execution``. Nothing heavy runs in the step process, so
    many steps (multiprocess or k8s executors) can share one server; bound them with a Dagster
    concurrency pool per server.

    Example::

        import dagster as dg
        from latechunk_dagster import DocumentStoreResource, LanceDBResource, late_chunk_assets
        from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

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

    # The fields of ServerSettings (names and defaults live there; Dagster's config schema needs them spelled out).
    base_url: str = Field(
        description="Root URL of the vLLM server (http://host:port; http://user:pass@host:port sends basic "
        "auth, and logs and errors show the URL with the password masked)."
    )
    other_base_urls: list[str] = Field(
        default_factory=list,
        description="More servers of the same model: requests are spread over base_url and these, and a "
        "server that stops answering is left out until it answers again.",
    )
    served_model: str | None = Field(
        default=_D.served_model, description="Model name on the server (default: its first)."
    )
    max_in_flight: int = Field(default=_D.max_in_flight, description="Requests in flight at once from one step.")
    timeout_s: float = Field(default=_D.timeout_s, description="Timeout of one request, seconds.")
    retries: int = Field(default=_D.retries, description="Extra attempts on connection errors, timeouts, 429/5xx.")
    backoff_s: float = Field(
        default=_D.backoff_s, description="First wait between attempts (doubles each time), seconds."
    )
    max_inputs_per_request: int = Field(
        default=_D.max_inputs_per_request, description="Most encoder inputs in one request."
    )
    max_tokens_per_request: int = Field(default=_D.max_tokens_per_request, description="Most tokens in one request.")
    api_key: str | None = Field(default=_D.api_key, description="Bearer token of a server started with --api-key.")

    @field_validator(
        "max_in_flight",
        "timeout_s",
        "retries",
        "backoff_s",
        "max_inputs_per_request",
        "max_tokens_per_request",
        mode="before",
    )
    @classmethod
    def _check_limit(cls, value: object, info: ValidationInfo) -> int | float:
        # when the resource is built (in code, or from run config at a run's start), not at the first request
        return check_server_setting(str(info.field_name), value, cls.__name__)

    def server_settings(self) -> ServerSettings:
        """This resource's :class:`ServerSettings`."""
        return ServerSettings(**{name: getattr(self, name) for name in ServerSettings.field_names()})

    def _start(self) -> RemoteLateChunker:
        return RemoteLateChunker(
            [self.base_url, *self.other_base_urls] if self.other_base_urls else self.base_url,
            self.model_path(),
            settings=self.server_settings(),
            **self.chunker_kwargs(),
        )
