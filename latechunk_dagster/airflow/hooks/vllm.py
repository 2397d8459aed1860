"""Airflow hook of a running vLLM server (connection type ``vllm_server``) -> ``RemoteLateChunker``.

The connection's fields map onto ``RemoteLateChunker`` (the same as Dagster's
``VLLMServerEngineResource``):

=================================  ============================================================
connection field                   argument
=================================  ============================================================
host (+ port, schema = scheme)     ``base_url``: ``http://vllm-0:8000`` (a host with a scheme is
                                   taken as it is; else ``schema`` or ``http`` and ``port``)
extra ``other_base_urls``          more servers of the same model: a JSON list or a comma-separated
                                   string of root URLs (requests are spread over all; a server that
                                   stops answering is left out until it answers again)
password                           ``api_key`` (a server started with ``--api-key``); a host
                                   ``http://user:pass@vllm-0:8000`` sends basic auth instead, and
                                   every message names it ``http://user:[secure]@vllm-0:8000``
extra ``model``                    the local directory of the served model (tokenizer, head)
extra ``served_model``             the model's name on the server (default: its first)
extra ``max_in_flight``,           request limits (defaults 4, 120, 4, 0.5, 32, 8192)
``timeout_s``, ``retries``,
``backoff_s``,
``max_inputs_per_request``,
``max_tokens_per_request``
=================================  ============================================================
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from latechunk_dagster.airflow.hooks.lancedb import connection_extras
from latechunk_dagster.core.engines.vllm_server import ServerSettings, check_server_setting
from latechunk_dagster.core.redact import redact_url, split_userinfo
from latechunk_dagster.core.server_chunker import RemoteLateChunker

#: Request-limit extras: the numeric fields of ``ServerSettings`` (their one home, with their ranges).
REQUEST_LIMITS: tuple[str, ...] = tuple(n for n in ServerSettings.field_names() if n not in ("served_model", "api_key"))
VLLM_EXTRAS = ("model", "served_model", "other_base_urls", *REQUEST_LIMITS)


def base_url_of(conn: Any) -> str:
    """The server's root URL from a connection's host, schema (scheme) and port.

    Raises:
        ValueError: no host.
    """
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        raise ValueError(f"connection {conn.conn_id!r} has no host: set it to the vLLM server (http://host:port)")
    if "://" in host:
        return host
    scheme = (conn.schema or "http").strip() or "http"
    return f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")


def server_kwargs(conn: Any) -> dict[str, Any]:
    """``RemoteLateChunker`` keyword arguments of a ``vllm_server`` connection (module docstring),
    ``base_url`` and ``model`` included (``model`` ``None`` when the connection has none).

    Raises:
        ValueError: no host, an unknown extra, a limit that is not a number or out of range (named:
            :func:`~latechunk_dagster.core.engines.vllm_server.check_server_setting`), or
            other_base_urls that are not URLs.
    """
    extra = connection_extras(conn, "vllm_server", VLLM_EXTRAS)
    others = extra.get("other_base_urls") or []
    if isinstance(others, str):
        others = [u for u in (part.strip() for part in others.split(",")) if u]
    if not isinstance(others, list) or not all(isinstance(u, str) and "://" in u for u in others):
        raise ValueError(
            f"connection {conn.conn_id!r}: extra 'other_base_urls' must be a list of root URLs "
            f"(http://host:port), got {redact_url(repr(extra.get('other_base_urls')))}"
        )
    kwargs: dict[str, Any] = {
        "base_url": base_url_of(conn),
        "other_base_urls": [u.rstrip("/") for u in others],
        "model": extra.get("model") or None,
        "served_model": extra.get("served_model") or None,
        "api_key": conn.password or None,
    }
    for name in REQUEST_LIMITS:
        if name in extra:
            kwargs[name] = check_server_setting(name, extra[name], f"connection {conn.conn_id!r}")
    return kwargs


class VLLMServerHook(BaseHook):
    """A vLLM server (``--runner pooling --pooler-config '{"task": "token_embed"}'``) as a chunker.

    Example::

        from latechunk_dagster.airflow.hooks.vllm import VLLMServerHook

        with VLLMServerHook("vllm_default").get_chunker(prefix=None) as chunker:
            chunker.engine.describe()   # 'vllm-server 0.32.0 at http://vllm-0:8000 (...)'

    Args:
        vllm_conn_id: the connection id (default ``vllm_default``).
    """

    conn_name_attr = "vllm_conn_id"
    default_conn_name = "vllm_default"
    conn_type = "vllm_server"
    hook_name = "vLLM server (late chunking)"

    def __init__(self, vllm_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vllm_conn_id = vllm_conn_id

    def get_server_kwargs(self) -> dict[str, Any]:
        """:func:`server_kwargs` of the connection."""
        return server_kwargs(self.get_connection(self.vllm_conn_id))

    def get_conn(self) -> dict[str, Any]:
        """The connection's ``RemoteLateChunker`` arguments (a chunker is built by :meth:`get_chunker`)."""
        return self.get_server_kwargs()

    def get_chunker(self, model: str | None = None, **chunker_kwargs: Any) -> RemoteLateChunker:
        """A :class:`~latechunk_dagster.RemoteLateChunker` on the server (close it, or use ``with``).

        Args:
            model: the local model directory; default: the connection's extra ``model``.
            **chunker_kwargs: ``LateChunker`` options (``prefix``, ``dimensions``, ``trust_remote_code``...).

        Raises:
            ValueError: no model directory. ServerUnavailableError / TokenizationMismatchError: see
                ``RemoteLateChunker``.
        """
        kwargs = self.get_server_kwargs()
        base_url, others = kwargs.pop("base_url"), kwargs.pop("other_base_urls")
        model = model or kwargs.pop("model")
        kwargs.pop("model", None)
        if not model:
            raise ValueError(
                f"connection {self.vllm_conn_id!r}: no model directory (the extra 'model' or the operator's model)"
            )
        return RemoteLateChunker([base_url, *others] if others else base_url, model, **kwargs, **chunker_kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: ask every server of the connection for its models."""
        import httpx

        found = []
        url = ""
        try:
            kwargs = self.get_server_kwargs()
            headers = {"Authorization": f"Bearer {kwargs['api_key']}"} if kwargs["api_key"] else {}
            for url in (kwargs["base_url"], *kwargs["other_base_urls"]):
                bare, auth = split_userinfo(url)  # credentials as basic auth: none in httpx's request log line
                resp = httpx.get(f"{bare}/v1/models", headers=headers, auth=auth, timeout=10)
                resp.raise_for_status()
                found.append(f"{redact_url(url)}: {[m.get('id') for m in resp.json().get('data', [])]}")
        except Exception as exc:  # the URL and the error redacted (core.redact): a password is named nowhere
            failed = redact_url(f"{url}: {exc}" if url else str(exc))
            return False, "; ".join([*found, failed])
        return True, "models: " + "; ".join(found)
