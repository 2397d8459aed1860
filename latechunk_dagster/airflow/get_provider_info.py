"""What Airflow's ``ProvidersManager`` reads about this provider (the ``apache_airflow_provider`` entry point).

No Airflow import here: the providers manager calls :func:`get_provider_info` while it discovers
providers. The connection forms are declared here (``ui-field-behaviour``, ``conn-fields``), as
Airflow 3.2+ expects, so the UI shows them without importing the hooks.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from latechunk_dagster import __version__
from latechunk_dagster.core.engines.vllm_server import ServerSettings

_HOOKS = "latechunk_dagster.airflow.hooks"
_OPERATORS = "latechunk_dagster.airflow.operators.latechunk"


def _text(label: str, description: str) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {"type": ["string", "null"]}}


#: The server settings' defaults, from their one home (the form shows what an empty field means).
_SERVER_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ServerSettings)}


def _setting(name: str, label: str, description: str) -> dict[str, Any]:
    """A numeric field of the ``vllm_server`` form: its type and default are :class:`ServerSettings`'."""
    default = _SERVER_DEFAULTS[name]
    kind = "integer" if isinstance(default, int) else "number"
    return {"label": label, "description": description, "schema": {"type": [kind, "null"], "default": default}}


LANCEDB_CONNECTION: dict[str, Any] = {
    "hook-class-name": f"{_HOOKS}.lancedb.LanceDBHook",
    "hook-name": "LanceDB",
    "connection-type": "lancedb",
    "ui-field-behaviour": {
        "hidden-fields": ["schema", "login", "port"],
        "relabeling": {"host": "URI", "password": "LanceDB Cloud API key"},
        "placeholders": {
            "host": "/data/lancedb, s3://bucket/vectors, gs://..., az://... or db://my-database",
            "password": "only for LanceDB Cloud (db://)",
        },
    },
    "conn-fields": {
        "storage_options": _text(
            "Storage options (JSON)",
            'Object-store options for lancedb.connect, a JSON object: {"region": "eu-west-1", '
            '"endpoint": "http://127.0.0.1:9000", "aws_access_key_id": "...", "allow_http": "true"}',
        ),
        "region": _text("LanceDB Cloud region", "e.g. us-east-1"),
        "host_override": _text("LanceDB Cloud / Enterprise host", "only for LanceDB Enterprise"),
        "read_consistency_interval_s": {
            "label": "Read consistency interval (s)",
            "description": "Seconds after which reads see other writers' commits (0: every read; empty: never)",
            "schema": {"type": ["number", "null"]},
        },
    },
}

VLLM_SERVER_CONNECTION: dict[str, Any] = {
    "hook-class-name": f"{_HOOKS}.vllm.VLLMServerHook",
    "hook-name": "vLLM server (late chunking)",
    "connection-type": "vllm_server",
    "ui-field-behaviour": {
        "hidden-fields": ["login"],
        "relabeling": {"host": "Base URL or host", "schema": "Scheme (http/https)", "password": "API key"},
        "placeholders": {
            "host": "http://vllm-0:8000",
            "schema": "http",
            "password": "the server's --api-key, if any",
        },
    },
    "conn-fields": {
        "model": _text("Model directory", "Local copy of the served model (tokenizer, head): /models/all-MiniLM-L6-v2"),
        "served_model": _text("Served model name", "The model's name on the server (empty: its first)"),
        "other_base_urls": _text(
            "More servers", "Root URLs of more servers of the same model, comma-separated: http://vllm-1:8000"
        ),
        "max_in_flight": _setting("max_in_flight", "Requests in flight", "Requests in flight at once from one task"),
        "timeout_s": _setting("timeout_s", "Request timeout (s)", "Timeout of one request"),
        "retries": _setting("retries", "Retries", "Extra attempts on connection errors, timeouts, 429/5xx"),
        "backoff_s": _setting("backoff_s", "Backoff (s)", "First wait between attempts (doubles each time)"),
        "max_inputs_per_request": _setting(
            "max_inputs_per_request", "Inputs per request", "Most encoder inputs in one request"
        ),
        "max_tokens_per_request": _setting(
            "max_tokens_per_request", "Tokens per request", "Most tokens in one request"
        ),
    },
}


def get_provider_info() -> dict[str, Any]:
    """The provider's description: package, hooks, operators and connection types (``lancedb``, ``vllm_server``)."""
    return {
        "package-name": "latechunk-dagster",
        "name": "Late chunking (vLLM, LanceDB)",
        "description": "Late-chunk a document store into a LanceDB table with vLLM: hooks for LanceDB and "
        "vLLM servers, operators for shards, checks and indexes.",
        "versions": [__version__],
        "integrations": [{"integration-name": "Late chunking", "tags": ["software"]}],
        "operators": [{"integration-name": "Late chunking", "python-modules": [_OPERATORS]}],
        "hooks": [{"integration-name": "Late chunking", "python-modules": [f"{_HOOKS}.lancedb", f"{_HOOKS}.vllm"]}],
        "connection-types": [LANCEDB_CONNECTION, VLLM_SERVER_CONNECTION],
    }
