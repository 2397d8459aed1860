"""Credentials of a document store in an object store, from an Airflow connection (Amazon's ``aws`` form).

The operators' ``store_conn_id`` names a connection whose fields become the store's
``storage_options`` (LanceDB's form, :data:`latechunk_dagster.sources.storage.OPTION_KEYS`),
following the Amazon provider's ``aws`` connection where it fits:

=============================  =====================================================
connection field               storage option
=============================  =====================================================
login                          ``aws_access_key_id``
password                       ``aws_secret_access_key``
extra ``aws_session_token``    ``aws_session_token``
extra ``region_name``          ``aws_region``
extra ``endpoint_url``         ``aws_endpoint`` (an ``http://`` URL also sets ``allow_http``)
extra ``storage_options``      any other option (a JSON object: GCS, Azure, ``allow_http``)
extra ``ocr``                  not an option: the store reads scanned PDF pages by OCR
                               (``DocumentStore(ocr=True)``; ``true`` / ``false``)
extra ``converters``           not an option: converters of one's own by suffix, as import
                               paths (a JSON object: ``{".epub": "my_pkg.converters:Epub"}``)
=============================  =====================================================

The last two are how the store's documents are read (:func:`store_settings`), for a local store
too (a connection of any type with only these extras).

No ``store_conn_id``: the store takes each cloud's standard chain (the worker's ``AWS_*``
variables, its instance role). The options go to the store's filesystem client only: Airflow
masks the connection's password in task logs, and nothing here logs or returns them elsewhere.

A connection as an environment variable::

    AIRFLOW_CONN_DOCS_S3='{"conn_type": "aws", "login": "AKIA...", "password": "...",
        "extra": {"region_name": "eu-west-1"}}'
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from latechunk_dagster.airflow.hooks.lancedb import connection_extras
from latechunk_dagster.sources.readers import loads_strict

#: The extras a store connection reads (anything else is refused, so a typo is not ignored).
STORE_EXTRAS = (
    "aws_session_token", "region_name", "endpoint_url", "storage_options", "ocr", "converters", "read_concurrency",
)  # fmt: skip
#: The extras that say how documents are read (:func:`store_settings`), not storage options.
READING_EXTRAS = ("ocr", "converters", "read_concurrency")


def storage_options_from_connection(conn: Any) -> dict[str, str]:
    """A connection's fields as ``storage_options`` (the module's table).

    Raises:
        ValueError: an unknown extra, or ``storage_options`` that is not a JSON object (naming the
            connection, never a value).
    """
    extra = connection_extras(conn, conn.conn_type or "aws", STORE_EXTRAS)
    options = extra.pop("storage_options", None) or {}
    for name in READING_EXTRAS:
        extra.pop(name, None)
    if isinstance(options, str):  # the UI's text field holds the JSON object as a string
        try:
            options = loads_strict(options) if options.strip() else {}
        except ValueError:
            raise ValueError(f"connection {conn.conn_id!r}: storage_options is not a JSON object") from None
    if not isinstance(options, dict):
        raise ValueError(f"connection {conn.conn_id!r}: storage_options must be a JSON object")
    out = {str(k): str(v) for k, v in options.items()}
    fields = {
        "aws_access_key_id": conn.login,
        "aws_secret_access_key": conn.password,
        "aws_session_token": extra.get("aws_session_token"),
        "aws_region": extra.get("region_name"),
        "aws_endpoint": extra.get("endpoint_url"),
    }
    out.update({k: str(v) for k, v in fields.items() if v})
    if str(out.get("aws_endpoint", "")).startswith("http://"):
        out.setdefault("allow_http", "true")
    return out


def store_storage_options(conn_id: str | None) -> dict[str, str]:
    """``storage_options`` of the connection ``conn_id`` (:func:`storage_options_from_connection`);
    ``{}`` for ``None`` (the cloud's standard chain)."""
    return {} if not conn_id else storage_options_from_connection(BaseHook.get_connection(conn_id))


def reading_from_connection(conn: Any) -> dict[str, Any]:
    """A connection's ``ocr``, ``converters`` and ``read_concurrency`` (a text tree's files fetched at
    once: :mod:`latechunk_dagster.sources.prefetch`) extras as :meth:`DocumentStore.from_path
    <latechunk_dagster.sources.files.DocumentStore.from_path>`'s keyword arguments (``{}`` when unset).

    Raises:
        ValueError: an ``ocr`` that is not a boolean (``true`` / ``false``), or ``converters`` that is
            not a JSON object of strings, a ``read_concurrency`` below 1 (naming the connection).
    """
    extra = connection_extras(conn, conn.conn_type or "aws", STORE_EXTRAS)
    out: dict[str, Any] = {}
    ocr = extra.get("ocr")
    if ocr is not None:
        if isinstance(ocr, str) and ocr.strip().lower() in ("true", "false"):
            ocr = ocr.strip().lower() == "true"
        if not isinstance(ocr, bool):
            raise ValueError(f"connection {conn.conn_id!r}: ocr must be true or false, got {ocr!r}")
        out["ocr"] = ocr
    converters = extra.get("converters")
    if converters is not None:
        if isinstance(converters, str):
            try:
                converters = loads_strict(converters) if converters.strip() else {}
            except ValueError:
                raise ValueError(f"connection {conn.conn_id!r}: converters is not a JSON object") from None
        if not isinstance(converters, dict) or not all(isinstance(v, str) for v in converters.values()):
            why = 'a JSON object of suffix: import path ({".epub": "my_pkg.converters:Epub"})'
            raise ValueError(f"connection {conn.conn_id!r}: converters must be {why}")
        out["converters"] = {str(k): v for k, v in converters.items()}
    concurrency = extra.get("read_concurrency")
    if concurrency is not None and str(concurrency).strip():
        if not str(concurrency).strip().isdigit() or int(str(concurrency).strip()) < 1:
            raise ValueError(f"connection {conn.conn_id!r}: read_concurrency must be a whole number >= 1")
        out["read_concurrency"] = int(str(concurrency).strip())
    return out


def store_settings(conn_id: str | None) -> dict[str, Any]:
    """How the store of the connection ``conn_id`` reads its documents (:func:`reading_from_connection`):
    ``{}`` for ``None`` (the built-in converters, no OCR)."""
    return {} if not conn_id else reading_from_connection(BaseHook.get_connection(conn_id))
