"""The promote task of a table definition under generations: after the mapped shard tasks (and the
checks task), readers switch to the generation the shards wrote, in one commit of its log."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
from latechunk_dagster.airflow.operators.base import LanceDBOperator
from latechunk_dagster.sink.generations import clean, promote, read_state
from latechunk_dagster.sink.schema import CHUNK_TABLE


def promote_after_shards(
    db: Any, table_name: str, results: Iterable[Mapping[str, Any] | None], log_line: Any = None
) -> dict[str, Any]:
    """Promote the newest generation of ``table_name`` once every shard task wrote into it, through
    :func:`~latechunk_dagster.sink.generations.promote` (the one gate: partitions the current
    generation holds; its tables indexed before it is served).

    Args:
        db: a LanceDB connection.
        results: the shard tasks' XCom values (:func:`~latechunk_dagster.pipeline.shard.shard_summary`);
            each names the ``generation`` it wrote. A ``None`` (a task that returned nothing) blocks.
        log_line: called with a line per table indexed before serving (the task's ``log.info``).

    Returns:
        ``{"generation": current after the call, "previous": current before (0: none),
        "promoted": whether readers were switched now, "dropped": generations dropped past the
        retention (:func:`~latechunk_dagster.sink.generations.clean`, run after every call)}``.

    Raises:
        ValueError: the definition is not under generations (``latechunk generations --enable``); a
            shard result missing or naming another generation (lists them); the generation lacks
            partitions the current one holds: nothing is committed.
    """
    state = read_state(db, table_name)
    if state is None or state.newest is None:
        raise ValueError(
            f"table definition {table_name!r} is not under generations or has none: enable them "
            "(latechunk generations --enable) before the shard tasks run"
        )
    newest, current = state.newest, state.current
    previous = current.number if current else 0
    if current is not None and current.number == newest.number:
        return {"generation": newest.number, "previous": previous, "promoted": False, "dropped": clean(db, table_name)}
    got = list(results)
    stray = [r.get("partition") if r else None for r in got if not r or r.get("generation") != newest.number]
    if not got or stray:
        raise ValueError(
            f"generation {newest.number} of {table_name!r} is not promoted: shards not written into it: "
            f"{stray[:10] if got else 'no shard results'}"
        )
    promote(db, table_name, newest.number, note="Airflow promote task", log_line=log_line)
    return {"generation": newest.number, "previous": previous, "promoted": True, "dropped": clean(db, table_name)}


class LateChunkPromoteOperator(LanceDBOperator):
    """Switch readers of ``table_name`` to the generation the mapped shard tasks wrote (one commit),
    once every one of them wrote into it; place it after the checks task, whose failure stops the
    run before it. Returns ``{"generation", "previous", "promoted"}``; ``latechunk rollback`` undoes it.

    Args:
        results: the shard tasks' XCom values (templated: ``chunk.output`` of the mapped task).
        table_name, lancedb_conn_id: as :class:`~latechunk_dagster.airflow.operators.LateChunkShardOperator`.
    """

    template_fields: Sequence[str] = ("results", "table_name")

    def __init__(
        self,
        *,
        results: Any = (),
        table_name: str = CHUNK_TABLE,
        lancedb_conn_id: str = LanceDBHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.results = results
        self.table_name = table_name
        self.lancedb_conn_id = lancedb_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        db = self.hook.get_conn()
        try:
            out = promote_after_shards(db, self.table_name, list(self.results or []), self.log.info)
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info("generations of %s: %s", self.table_name, out)
        return out
