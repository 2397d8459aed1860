"""What the start-up probe of a vLLM server finds (:class:`ServerInfo`) and the two ways a server
sends token states (:data:`RAW`, :data:`BASE64`): the record every part of
:class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine` reads, with no part's code."""

from __future__ import annotations

from dataclasses import dataclass

#: ``encoding_format`` of token states: raw float32 bytes (vLLM >= 0.11), else base64 in JSON.
RAW, BASE64 = "bytes_only", "base64"


@dataclass(frozen=True)
class ServerInfo:
    """What the start-up probe found.

    Attributes:
        version: the server's vLLM version (``GET /version``).
        model: the served model name (``GET /v1/models``), sent with every request.
        max_model_len: the server's longest input in tokens.
        dim: width of a token state (from a two-token ``/pooling`` probe).
        native: True when ``/v1/embeddings`` accepted ``late_chunking_params`` (vLLM >= 0.33).
        span_sums: True when the server answers the span route (``GET`` at our format version, and
            a ``POST`` of the probe's two tokens gives their states' sums).
        states_encoding: how ``/pooling`` sends token states: :data:`RAW` (raw float32, the same
            values as base64) or :data:`BASE64` (a server that refuses ``bytes_only``).
    """

    version: str
    model: str
    max_model_len: int
    dim: int
    native: bool
    span_sums: bool = False
    states_encoding: str = BASE64
