"""What the provider's operators over a ``lancedb`` connection share: one cached hook."""

from __future__ import annotations

from functools import cached_property

from airflow.sdk import BaseOperator

from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook


class LanceDBOperator(BaseOperator):
    """An operator over a ``lancedb`` connection (``lancedb_conn_id``): one hook per task instance,
    built on first use (:attr:`hook`), as the Apache providers' operators hold theirs."""

    lancedb_conn_id: str = LanceDBHook.default_conn_name

    @cached_property
    def hook(self) -> LanceDBHook:
        """The :class:`~latechunk_dagster.airflow.hooks.lancedb.LanceDBHook` of ``lancedb_conn_id``
        (its connection is read once)."""
        return LanceDBHook(self.lancedb_conn_id)
