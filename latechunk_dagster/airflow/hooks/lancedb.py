"""Airflow hook of a LanceDB database (connection type ``lancedb``).

The connection's fields map onto the same settings as Dagster's ``LanceDBResource``
(:class:`~latechunk_dagster.sink.database.LanceDBSettings`):

============================  =================================================================
connection field              setting
============================  =================================================================
host                          ``uri``: a local directory, ``s3://bucket/path``, ``gs://...``,
                              ``az://...`` or LanceDB Cloud ``db://database``
password                      ``api_key`` (LanceDB Cloud)
extra ``storage_options``     object-store options for ``lancedb.connect`` (a JSON object:
                              ``aws_access_key_id``, ``endpoint``, ``region``, ``allow_http``...)
extra ``region``              LanceDB Cloud region
extra ``host_override``       LanceDB Cloud / Enterprise host
extra ``read_consistency_interval_s``  seconds after which reads see other writers' commits
============================  =================================================================

A connection as an environment variable (Airflow's JSON form)::

    AIRFLOW_CONN_LANCEDB_DEFAULT='{"conn_type": "lancedb", "host": "s3://my-bucket/vectors",
        "extra": {"storage_options": {"region": "eu-west-1"}}}'
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.database import LanceDBSettings, check_read_consistency_interval
from latechunk_dagster.sources.readers import loads_strict

#: The extras a ``lancedb`` connection reads (anything else is refused, so a typo is not ignored).
LANCEDB_EXTRAS = ("storage_options", "region", "host_override", "read_consistency_interval_s")


def connection_extras(conn: Any, conn_type: str, known: tuple[str, ...]) -> dict[str, Any]:
    """A connection's extras by plain name (``extra__<type>__<name>`` keys of older forms too), unset ones dropped.

    Raises:
        ValueError: an extra not in ``known`` (a typo would otherwise be ignored silently).
    """
    prefix = f"extra__{conn_type}__"
    extra = {k.removeprefix(prefix): v for k, v in (conn.extra_dejson or {}).items()}
    unknown = sorted(set(extra) - set(known))
    if unknown:
        raise ValueError(
            f"connection {conn.conn_id!r}: unknown extra {unknown}; a {conn_type} connection takes {known}"
        )
    return {k: v for k, v in extra.items() if v not in (None, "")}


def settings_from_connection(conn: Any, owner: str = "LanceDBHook") -> LanceDBSettings:
    """A ``lancedb`` Airflow connection as :class:`LanceDBSettings` (the module's table of fields).

    Raises:
        ValueError: no host (URI), an unknown extra, ``storage_options`` that is not a JSON
            object of strings, or a ``read_consistency_interval_s`` that is not a finite number >= 0.
    """
    uri = (conn.host or "").strip()
    if not uri:
        raise ValueError(f"connection {conn.conn_id!r} has no host: set it to the LanceDB URI (a directory, s3://...)")
    extra = connection_extras(conn, "lancedb", LANCEDB_EXTRAS)
    options = extra.get("storage_options") or {}
    if isinstance(options, str):  # the UI's text field holds the JSON object as a string
        try:
            options = loads_strict(options) if options.strip() else {}
        except ValueError as exc:  # not JSON, or a key given twice (which value is meant is ambiguous)
            raise ValueError(f"connection {conn.conn_id!r}: storage_options is not a JSON object: {exc}") from None
    if not isinstance(options, dict):
        raise ValueError(f"connection {conn.conn_id!r}: storage_options must be a JSON object, got {options!r}")
    owner = f"{owner}(conn_id={conn.conn_id!r})"
    return LanceDBSettings(
        uri=uri,
        storage_options={str(k): str(v) for k, v in options.items()},
        api_key=conn.password or None,
        region=extra.get("region") or None,
        host_override=extra.get("host_override") or None,
        read_consistency_interval_s=check_read_consistency_interval(extra.get("read_consistency_interval_s"), owner),
        owner=owner,
    )


class LanceDBHook(BaseHook):
    """A LanceDB database from an Airflow connection of type ``lancedb`` (module docstring).

    Example::

        from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook

        hook = LanceDBHook("lancedb_default")
        table = hook.open_table("chunks")        # None if it does not exist yet
        db = hook.get_conn()                     # a lancedb.DBConnection

    Args:
        lancedb_conn_id: the connection id (default ``lancedb_default``).
    """

    conn_name_attr = "lancedb_conn_id"
    default_conn_name = "lancedb_default"
    conn_type = "lancedb"
    hook_name = "LanceDB"

    def __init__(self, lancedb_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lancedb_conn_id = lancedb_conn_id
        self._settings: LanceDBSettings | None = None

    def get_settings(self) -> LanceDBSettings:
        """The connection as :class:`~latechunk_dagster.sink.database.LanceDBSettings` (read once per hook).

        Raises:
            ValueError: see :func:`settings_from_connection`. AirflowNotFoundException: no such connection.
        """
        if self._settings is None:
            self._settings = settings_from_connection(self.get_connection(self.lancedb_conn_id))
        return self._settings

    def get_conn(self) -> Any:
        """A ``lancedb.DBConnection``."""
        return self.get_settings().connect()

    @property
    def uri(self) -> str:
        """The database URI."""
        return self.get_settings().uri

    def chunk_table(self, name: str, dim: int) -> Any:
        """The chunk table ``name`` for ``dim``-float vectors, created empty if missing (``ValueError``:
        another schema, or the database cannot be opened)."""
        return self.get_settings().chunk_table(name, dim)

    def rejected_table(self, name: str) -> Any:
        """The rejected-documents table ``name``, created empty if missing."""
        return self.get_settings().rejected_table(name)

    def open_table(self, name: str) -> Any | None:
        """Table ``name`` if it exists, else ``None``."""
        return self.get_settings().open_table(name)

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: list the database's tables."""
        try:
            names = table_names(self.get_conn())
        except Exception as exc:  # the UI shows the message
            return False, str(exc)
        return True, f"connected to {self.uri}: {len(names)} tables"
