"""Where a chunk table lives: one LanceDB database's location and options, orchestrator-free.

Dagster's ``LanceDBResource`` and Airflow's ``LanceDBHook`` both hand out a
:class:`LanceDBSettings`; everything that opens tables goes through it, so both orchestrators
connect, create and refuse tables the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa

from latechunk_dagster.sink.catalog import has_table
from latechunk_dagster.sink.creation import open_or_create
from latechunk_dagster.sink.generations import every_generation
from latechunk_dagster.sink.granularity_tables import drop_leftover_tables
from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_schema
from latechunk_dagster.sink.writes import connect, delete_partitions, stored_partitions


def check_read_consistency_interval(value: object, owner: str = "LanceDB") -> float | None:
    """``read_consistency_interval_s`` as seconds: a finite number >= 0, or ``None`` (never check).

    A number, or its text (an Airflow connection extra typed as a string), is taken; anything else
    is refused here, naming the setting, rather than by LanceDB later: a negative interval panics
    inside LanceDB's Rust code on the first table call ("rust future panicked"), and ``nan``,
    ``inf`` or ``"five"`` fail with messages that name no setting.

    Args:
        owner: how the error names the object the setting belongs to (``"LanceDBResource"``...).

    Raises:
        ValueError: not a number (a bool included), not finite, or negative.
    """
    if value is None:
        return None
    seconds = None
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except ValueError:
            seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(
            f"{owner}: read_consistency_interval_s must be a finite number of seconds >= 0 "
            f"(0: every read; unset: never), got {value!r}"
        )
    return seconds


@dataclass(frozen=True)
class LanceDBSettings:
    """A LanceDB database: a local directory, an object store (``s3://``, ``gs://``, ``az://``) or LanceDB Cloud.

    Attributes:
        uri: local directory, object-store URI or LanceDB Cloud URI (``db://``).
        storage_options: object-store options for ``lancedb.connect`` (keys, endpoint, region...).
        api_key, region, host_override: LanceDB Cloud / Enterprise.
        read_consistency_interval_s: seconds after which reads check for other writers' commits
            (0: every read; ``None``: never); a finite number >= 0 (:func:`check_read_consistency_interval`).
        owner: how errors name the object that holds these settings (``"LanceDBResource"``...).

    Raises:
        ValueError: ``read_consistency_interval_s`` out of range, naming the setting and ``owner``.
    """

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    region: str | None = None
    host_override: str | None = None
    read_consistency_interval_s: float | None = None
    owner: str = "LanceDB"

    def __post_init__(self) -> None:
        interval = check_read_consistency_interval(self.read_consistency_interval_s, self.owner)
        object.__setattr__(self, "read_consistency_interval_s", interval)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``lancedb.connect`` (only the options that are set)."""
        kwargs: dict[str, Any] = {}
        if self.storage_options:
            kwargs["storage_options"] = dict(self.storage_options)
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key
        if self.region is not None:
            kwargs["region"] = self.region
        if self.host_override is not None:
            kwargs["host_override"] = self.host_override
        if self.read_consistency_interval_s is not None:
            kwargs["read_consistency_interval"] = timedelta(seconds=self.read_consistency_interval_s)
        return kwargs

    def connect(self) -> Any:
        """A LanceDB connection (``lancedb.DBConnection``)."""
        return connect(self.uri, **self.connect_kwargs())

    def table_uri(self, name: str) -> str:
        """``uri/name``: where table ``name`` lives (for lineage and logs)."""
        return f"{self.uri.rstrip('/')}/{name}"

    def chunk_table(self, name: str, dim: int) -> Any:
        """The chunk table ``name`` for vectors of ``dim`` floats, created empty if missing.

        Raises:
            ValueError: the table exists with a schema the pipeline cannot write (names the missing,
                retyped and NOT NULL extra columns: :func:`~latechunk_dagster.sink.creation.schema_difference`;
                nullable columns a user added are kept), or the database cannot be opened (a path that
                is a file, no permission, a bucket out of reach).
        """
        return self._open_or_create(name, chunk_schema(dim))

    def rejected_table(self, name: str) -> Any:
        """The rejected-documents table ``name``, created empty if missing (errors as :meth:`chunk_table`)."""
        return self._open_or_create(name, REJECTED_SCHEMA)

    def _open_or_create(self, name: str, schema: pa.Schema) -> Any:
        try:
            return open_or_create(self.connect(), name, schema)
        except OSError as exc:  # a path that is a file, no permission, an unreachable bucket...
            raise ValueError(f"{self.owner}(uri={self.uri!r}) cannot open or create table {name!r}: {exc}") from exc

    def open_table(self, name: str) -> Any | None:
        """Table ``name`` if it exists, else ``None``."""
        db = self.connect()
        return db.open_table(name) if has_table(db, name) else None

    def drop_partitions(self, table_names: list[str], partitions: list[str]) -> int:
        """Delete the rows of ``partitions`` (shards gone from the store) from the tables and, where
        they are under generations, from the same definition's other live generations
        (:func:`~latechunk_dagster.sink.generations.every_generation`); rows deleted."""
        db = self.connect()
        return delete_partitions(db, every_generation(db, table_names), partitions)

    def stored_partitions(self, table_names: list[str]) -> set[str]:
        """The partitions with rows in the tables or in their definition's other live generations
        (as :meth:`drop_partitions`): what a partition sync compares with the store."""
        db = self.connect()
        return stored_partitions(db, every_generation(db, table_names))

    def drop_leftover_tables(
        self, definition: str, granularities: list[str], warn: Callable[[str], None] | None = None
    ) -> list[str]:
        """Drop the tables of the table definition ``definition`` that none of ``granularities`` writes
        any more (a granularity removed from it), one warning each on ``warn``; the tables dropped
        (:func:`~latechunk_dagster.sink.granularity_tables.drop_leftover_tables`)."""
        return drop_leftover_tables(self.connect(), definition, granularities, warn)
