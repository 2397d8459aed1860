"""The operator that lists a document store's shards (and drops the rows of shards that left it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
from latechunk_dagster.airflow.hooks.store import store_settings, store_storage_options
from latechunk_dagster.airflow.operators.base import LanceDBOperator
from latechunk_dagster.airflow.tasks import drop_removed_shards, list_shards, table_names
from latechunk_dagster.pipeline.removals import TooManyRemovalsError
from latechunk_dagster.sink import REJECTED_TABLE
from latechunk_dagster.sources.storage import public_uri


class ListShardsOperator(LanceDBOperator):
    """Return the shard names of a document store (XCom: ``list[str]``), to ``.expand(shard=...)`` over.

    With ``table_name``, the rows of shards that left the store are deleted from that table and
    ``rejected_table_name`` first (as Dagster's partition sync does), so the mapped tasks over the
    listed shards leave a table of exactly the store's documents.

    Args:
        store_path: the store (a directory of ``.txt``/``.md``, a ``.jsonl``/``.parquet`` file or a
            directory of them; :class:`~latechunk_dagster.sources.files.DocumentStore`). Templated.
        table_name: the chunk table to drop removed shards from (``None``: leave tables alone). Templated.
        granularities: the granularity names of a table definition of several strategies (the keys
            of the late-chunk task's ``strategies``): the removed shards are dropped from each
            granularity's table (``table_name_<granularity>``). Templated.
        rejected_table_name, lancedb_conn_id, store_conn_id: as
            :class:`~latechunk_dagster.airflow.operators.latechunk.LateChunkShardOperator`.
        max_delete: the share of the table's partitions that may be removed at once (``0.5``,
            ``"50%"``; ``None``: ``$LATECHUNK_MAX_DELETE``, default 50%). More fails the task
            (no retry) naming the partitions and their rows, and deletes nothing. Templated.
    """

    template_fields: Sequence[str] = ("store_path", "table_name", "granularities", "rejected_table_name", "max_delete")

    def __init__(
        self,
        *,
        store_path: str,
        table_name: str | None = None,
        granularities: Sequence[str] = (),
        rejected_table_name: str = REJECTED_TABLE,
        lancedb_conn_id: str = LanceDBHook.default_conn_name,
        max_delete: float | str | None = None,
        store_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.store_path = store_path
        self.store_conn_id = store_conn_id
        self.table_name = table_name
        self.granularities = granularities
        self.rejected_table_name = rejected_table_name
        self.lancedb_conn_id = lancedb_conn_id
        self.max_delete = max_delete

    def execute(self, context: Context) -> list[str]:
        options, reading = store_storage_options(self.store_conn_id), store_settings(self.store_conn_id)
        listing = list_shards(self.store_path, self.log, options, reading)
        shards = list(listing.shards)
        shown = public_uri(self.store_path)  # a URI's credentials never reach the task log
        self.log.info("%d shards in %s: %s", len(shards), shown, shards[:20])
        check_map_length(len(shards), shown)
        if self.table_name:
            db = self.hook.get_settings()
            names = table_names(self.table_name, self.granularities or ())
            try:
                drop_removed_shards(db, listing, [*names, self.rejected_table_name], self.log, self.max_delete)
            except TooManyRemovalsError as exc:  # a retry would refuse again: the user's call
                raise AirflowFailException(str(exc)) from None
        return shards


def check_map_length(count: int, store_path: str) -> None:
    """Refuse a shard list longer than Airflow maps (``[core] max_map_length``, default 1024): the
    downstream ``.expand(shard=...)`` would fail later with a message naming neither.

    Raises:
        AirflowFailException: more shards than the setting allows, naming both and the way out.
    """
    from airflow.sdk.configuration import conf

    limit = conf.getint("core", "max_map_length", fallback=1024)
    if count > limit:
        raise AirflowFailException(
            f"{store_path} has {count} shards, more than Airflow maps over one task "
            f"([core] max_map_length = {limit}); raise it (AIRFLOW__CORE__MAX_MAP_LENGTH={count}) "
            "or split the store into fewer, larger shards"
        )
