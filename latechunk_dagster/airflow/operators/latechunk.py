"""Airflow operators: list a store's shards, late-chunk one shard, check the table, refresh its indexes.

Thin operators (Apache provider style): each reads its connection through a hook, opens the
engine (:mod:`latechunk_dagster.airflow.engine`) and calls one function of
:mod:`latechunk_dagster.airflow.tasks`, which calls the same core as the Dagster assets.

A DAG (see :mod:`latechunk_dagster.airflow.example_dags.example_late_chunk`)::

    shards = ListShardsOperator(task_id="shards", store_path=STORE, table_name="chunks")
    chunk = LateChunkShardOperator.partial(
        task_id="chunk", store_path=STORE, model=MODEL, settings={"max_model_len": 256}, pool=ENGINE_POOL
    ).expand(shard=shards.output)
    checks = LateChunkChecksOperator(task_id="checks", store_path=STORE, results=chunk.output)
    index = LateChunkIndexOperator(task_id="index")
    shards >> chunk >> checks >> index
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from latechunk_dagster.airflow.engine import EngineSpec, open_chunker, shared_chunker, task_settings
from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
from latechunk_dagster.airflow.hooks.store import store_settings, store_storage_options
from latechunk_dagster.airflow.operators.base import LanceDBOperator as LanceDBOperator  # re-exported
from latechunk_dagster.airflow.operators.shards import ListShardsOperator as ListShardsOperator  # re-exported
from latechunk_dagster.airflow.operators.shards import check_map_length as check_map_length  # re-exported
from latechunk_dagster.airflow.tasks import (
    ChecksFailedError,
    built_table_names,
    check_granularity_tables,
    check_strategy_form,
    lineage_run_id,
    refresh_table_indexes,
    resolve_strategies,
    run_store_shard,
    xcom_list,
)
from latechunk_dagster.core.chunking import ChunkingStrategy
from latechunk_dagster.pipeline import SystemicFailureError
from latechunk_dagster.pipeline.shard import ShardSettings, describe_strategies
from latechunk_dagster.pipeline.shard_job import ShardJob
from latechunk_dagster.sink import CHUNK_TABLE, REJECTED_TABLE
from latechunk_dagster.sink.schema import granularity_table

#: Airflow pool of the tasks that hold an engine: create it with as many slots as GPUs
#: (``airflow pools set latechunk_engine 1 "late-chunking engines"``).
ENGINE_POOL = "latechunk_engine"


def table_asset(table_name: str, lancedb_conn_id: str = LanceDBHook.default_conn_name) -> Asset:
    """The Airflow asset of a chunk table: ``lancedb://<conn id>/<table>`` (name ``latechunk/<conn id>/<table>``).

    The URI names the connection, not the database location, so it is known when the DAG is
    parsed; the event's ``extra`` carries the resolved ``table_uri`` and ``version``.
    """
    return Asset(uri=f"lancedb://{lancedb_conn_id}/{table_name}", name=f"latechunk/{lancedb_conn_id}/{table_name}")


def check_one_strategy_form(task_id: Any, strategy: Any, strategy_params: Any, strategies: Any) -> None:
    """:func:`~latechunk_dagster.airflow.tasks.check_strategy_form` when the DAG is parsed, naming the task.

    Raises:
        ValueError: ``strategies`` beside ``strategy`` or ``strategy_params``.
    """
    try:
        check_strategy_form(strategy, strategy_params, strategies)
    except ValueError as exc:
        raise ValueError(f"LateChunkShardOperator {task_id!r}: {exc}") from None


class LateChunkShardOperator(LanceDBOperator):
    """Late-chunk one shard of a document store into a LanceDB table (one atomic commit).

    What Dagster's chunk asset does for one partition, with the same function
    (:func:`~latechunk_dagster.pipeline.shard.run_shard`): streaming batches, only new or changed
    documents encoded, removed ones deleted, bad documents recorded in the rejected table, progress
    in the task log. A shard that fails systemically (or cannot be read) fails the task and keeps
    its old rows; a systemic failure fails without retries (the data, not the machine, is wrong).

    With ``strategies`` (several named strategies, finest first), each document is encoded once and
    each granularity ``g`` is written to its own table ``table_name_<g>``
    (:func:`~latechunk_dagster.sink.schema.granularity_table`), each chunk linked to its parent in
    the next granularity's table (``parent_chunk_id``): one commit per table, finest first.

    Returns (XCom) the small JSON summary of :func:`~latechunk_dagster.pipeline.shard.shard_summary`:
    table URI and version, partition, documents in / re-encoded / skipped / rejected / deleted,
    chunks, tokens, and per granularity table its own table, version and counts (``granularities``:
    the names Dagster's granularity assets publish). Never vectors. Emits an asset event on
    :func:`table_asset` (``extra``: table URI, version, partition, counts, the granularities';
    ``partition_key``: the shard where the Airflow version supports it).

    Rows' lineage ``run_id`` is the Airflow run id, plus ``#<map index>`` in a mapped task.

    Args:
        store_path: the document store (templated). shard: the shard (= partition key) (templated).
        table_name, rejected_table_name: LanceDB tables (templated; defaults ``chunks`` and
            ``rejected_documents``, as Dagster's factory).
        strategy: a strategy object or name (templated); strategy_params: the name's parameters
            (templated; use ``render_template_as_native_obj=True`` for numbers from templates).
            Default: sentences of at most 128 tokens.
        strategies: instead of ``strategy``, several named strategies, finest first:
            ``{granularity: {"name": strategy name, **its params}}`` (or ``{granularity: strategy}``),
            e.g. ``{"small": {"name": "fixed_tokens", "chunk_size": 32}, "large": {"name": "sentences"}}``
            (templated; ``given_chunks`` reads ``settings["chunks_column"]``). Names are letters,
            digits and ``_``.
        model: the model directory (templated); for a server, its local copy (default: the
            connection's extra ``model``).
        lancedb_conn_id: a ``lancedb`` connection (:class:`~latechunk_dagster.airflow.hooks.lancedb.LanceDBHook`).
        store_conn_id: the connection of a store in an object store (``s3://``, ``gs://``, ``az://``):
            Amazon's ``aws`` form, :mod:`latechunk_dagster.airflow.hooks.store`; ``None``: the
            cloud's standard chain (the worker's ``AWS_*`` variables, its instance role). Its extras
            ``ocr`` and ``converters`` say how the store's documents are read (OCR of scanned PDF
            pages, converters of one's own), a local store's too.
        vllm_conn_id: a ``vllm_server`` connection to encode on that server; ``None`` (default):
            an in-process engine on ``model``, started for the task and shut down after it.
        settings: everything else, as one dict (:func:`~latechunk_dagster.airflow.engine.task_settings`
            names every key): ``engine`` (``"vllm"``, the default, or ``"transformers"``: the light
            engine, no vLLM, for workers vLLM does not run on; it takes none of the vLLM settings, and
            its name is recorded in the rows' lineage, so a switch re-encodes the shard once; its own
            ``device`` and ``forward_tokens``, padded tokens per forward pass); the
            in-process ``vllm.LLM`` (``dtype``, ``gpu_memory_utilization``, ``tensor_parallel_size``,
            ``enforce_eager``, ``engine_args``); the ``LateChunker`` options (``max_model_len``,
            ``engine_path``, ``prefix``, ``query_prefix``, ``dimensions``, ``window_overlap``, the
            opt-ins ``allow_causal``, ``allow_non_mean_pooling``, ``trust_remote_code``, recorded in
            lineage); the shard run (``batch_tokens``, ``force``, ``max_rejected_share``,
            ``systemic_min_documents``, ``host_workers``: worker processes for the host work, default
            ``LATECHUNK_HOST_WORKERS``, else 0 for prepare and finish while document files are converted
            in worker processes (``pipeline.config.conversion_workers``); ``chunks_column``: the store column of each
            document's own chunks, for ``given_chunks``). The same values Dagster's engine resource
            and run config build. Checked when the DAG is parsed.
        pool: give :data:`ENGINE_POOL` (or another pool) to bound how many tasks hold an engine at once.

    Raises:
        ValueError: (when the DAG is parsed) a ``settings`` key that is none of these, naming it; a
            setting out of range, naming it; vLLM settings beside ``engine="transformers"``;
            ``strategies`` beside ``strategy`` or ``strategy_params``.
    """

    template_fields: Sequence[str] = (
        "store_path",
        "shard",
        "table_name",
        "rejected_table_name",
        "strategy",
        "strategy_params",
        "strategies",
        "model",
    )
    template_fields_renderers = {"strategy_params": "json", "strategies": "json"}
    ui_color = "#d9ecff"

    def __init__(
        self,
        *,
        store_path: str,
        shard: str,
        table_name: str = CHUNK_TABLE,
        rejected_table_name: str = REJECTED_TABLE,
        strategy: str | ChunkingStrategy | None = None,
        strategy_params: dict[str, Any] | None = None,
        strategies: Mapping[str, Any] | None = None,
        model: str | None = None,
        lancedb_conn_id: str = LanceDBHook.default_conn_name,
        vllm_conn_id: str | None = None,
        settings: Mapping[str, Any] | None = None,
        store_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [table_asset(table_name, lancedb_conn_id)])
        check_one_strategy_form(kwargs.get("task_id"), strategy, strategy_params, strategies)
        super().__init__(**kwargs)
        self.store_path = store_path
        self.store_conn_id = store_conn_id
        self.shard = shard
        self.table_name = table_name
        self.rejected_table_name = rejected_table_name
        self.strategy = strategy
        self.strategy_params = strategy_params
        self.strategies = strategies
        self.model = model
        self.lancedb_conn_id = lancedb_conn_id
        self.vllm_conn_id = vllm_conn_id
        # an unknown key, a setting out of range, an unknown engine or vLLM settings given to the
        # transformers engine: refused when the DAG is parsed, by the run's own rules
        try:
            task_settings(settings, model=model, vllm_conn_id=vllm_conn_id)
        except (TypeError, ValueError) as exc:
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"{type(self).__name__} {self.task_id!r}: {exc}") from exc
        self.settings = dict(settings or {})

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """``BaseOperator.partial`` with the default outlet (:func:`table_asset`) set and ``settings``
        checked at parse time: a mapped task's ``__init__`` runs only when it executes, too late for
        the DAG's assets and for a setting's error."""
        from airflow.sdk.bases.operator import partial

        if kwargs.get("settings") is None or isinstance(kwargs["settings"], Mapping):  # not an XComArg
            task_settings(kwargs.get("settings"), vllm_conn_id=kwargs.get("vllm_conn_id"))
        check_one_strategy_form(
            kwargs.get("task_id"), kwargs.get("strategy"), kwargs.get("strategy_params"), kwargs.get("strategies")
        )
        kwargs.setdefault(
            "outlets",
            [
                table_asset(
                    kwargs.get("table_name", CHUNK_TABLE), kwargs.get("lancedb_conn_id", LanceDBHook.default_conn_name)
                )
            ],
        )
        return partial(cls, **kwargs)

    def shard_settings(self) -> ShardSettings:
        """The shard run's settings (:class:`~latechunk_dagster.pipeline.shard.ShardSettings`: the
        same value Dagster's run config builds)."""
        return task_settings(self.settings)[1]

    def engine_spec(self) -> EngineSpec:
        """The engine this task encodes with (``model`` and ``vllm_conn_id`` as rendered)."""
        return task_settings(self.settings, model=self.model, vllm_conn_id=self.vllm_conn_id)[0]

    def execute(self, context: Context) -> dict[str, Any]:
        # a bad strategy, a bad URI, or given_chunks without a chunks_column: before the engine starts
        job = ShardJob(
            self.hook,
            resolve_strategies(self.strategy, self.strategy_params, self.strategies),
            self.shard_settings(),
            table_name=self.table_name,
            rejected_name=self.rejected_table_name,
            log=self.log,
        )
        self.log.info(
            "late-chunking shard %r of %s into %s (%s)",
            self.shard,
            self.store_path,
            job.db.table_uri(self.table_name),
            describe_strategies(job.strategy),
        )
        with open_chunker(self.engine_spec(), self.log) as chunker:
            self._engine = None if chunker is shared_chunker() else chunker  # what on_kill stops
            try:
                run_id = lineage_run_id(context["run_id"], context["ti"].map_index)
                options, reading = store_storage_options(self.store_conn_id), store_settings(self.store_conn_id)
                result = run_store_shard(job, chunker, run_id, self.store_path, self.shard, options, reading)
            except SystemicFailureError as exc:
                raise AirflowFailException(str(exc)) from exc
            finally:
                self._engine = None
        self._emit(context, result)
        self.log.info("shard %r: %s", self.shard, result)
        return result

    def on_kill(self) -> None:
        """Stop the engine this task started (an in-process engine, or the server chunker's requests);
        a chunker handed over with :func:`~latechunk_dagster.airflow.engine.use_chunker` is left open."""
        engine, self._engine = getattr(self, "_engine", None), None
        if engine is not None:
            self.log.info("task killed: closing its engine")
            engine.close()

    def _emit(self, context: Context, result: dict[str, Any]) -> None:
        """The asset event of each outlet asset: what the commit left (no vectors), partitioned by the shard."""
        keys = ("table_uri", "version", "partition", "run_id", "chunks_written", "partition_rows")
        extra = {k: result[k] for k in (*keys, "documents_in", "documents_rejected", "tokens_encoded", "granularities")}
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                event = context["outlet_events"][outlet]
                event.extra = extra
                event.add_partitions(self.shard)


class LateChunkChecksOperator(LanceDBOperator):
    """The Dagster asset checks' assertions over shards the late-chunk tasks wrote; fails on a failed check.

    ``vectors_valid``, ``spans_tile``, ``unique_chunk_ids``, ``documents_accounted``,
    ``row_count_matches`` (:data:`latechunk_dagster.sink.validation.CHECKS`), with the same
    functions as the Dagster checks. Returns ``{check: {"passed": bool, "details": {...}}}``.

    A table definition of several granularities is checked per granularity table, each but the
    coarsest also with ``parents_exist`` (its ``parent_chunk_id`` links against the next
    granularity's table): returns ``{granularity: {check: {...}}}``, and a failure names the
    granularity and its table.

    Args:
        store_path: the document store (templated).
        results: the late-chunk tasks' XCom values (templated: ``chunk.output`` of the mapped task);
            they name the shards, the rows each commit left and the granularities.
        shards: more shards to check (templated); one without a result fails ``row_count_matches``.
        granularities: the granularity names, finest first (templated); empty: those the results name.
        chunks_column: the store column of the documents' own chunks, as the late-chunk tasks'
            ``settings["chunks_column"]`` (templated; a document's ``doc_sha256`` covers its chunks).
        table_name, rejected_table_name, lancedb_conn_id, store_conn_id: as :class:`LateChunkShardOperator`.
    """

    template_fields: Sequence[str] = (
        "store_path",
        "results",
        "shards",
        "granularities",
        "chunks_column",
        "table_name",
        "rejected_table_name",
    )

    def __init__(
        self,
        *,
        store_path: str,
        results: Any = (),
        shards: Sequence[str] = (),
        granularities: Sequence[str] = (),
        chunks_column: str | None = None,
        table_name: str = CHUNK_TABLE,
        rejected_table_name: str = REJECTED_TABLE,
        lancedb_conn_id: str = LanceDBHook.default_conn_name,
        store_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.store_path = store_path
        self.store_conn_id = store_conn_id
        self.results = results
        self.shards = shards
        self.granularities = granularities
        self.chunks_column = chunks_column
        self.table_name = table_name
        self.rejected_table_name = rejected_table_name
        self.lancedb_conn_id = lancedb_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        per = check_granularity_tables(
            self.hook.get_settings(),
            self.store_path,
            table_name=self.table_name,
            rejected_table_name=self.rejected_table_name,
            granularities=xcom_list(self.granularities),
            results=xcom_list(self.results),
            shards=xcom_list(self.shards),
            chunks_column=self.chunks_column or None,
            storage_options=store_storage_options(self.store_conn_id),
            store_settings=store_settings(self.store_conn_id),
        )
        failures = []
        for g, outcomes in per.items():
            for name, (passed, details) in outcomes.items():
                (self.log.info if passed else self.log.error)(
                    "check %s%s: %s %s", name, f" of {g!r}" if g else "", "passed" if passed else "FAILED", details
                )
            if not all(passed for passed, _ in outcomes.values()):
                failures.append(str(ChecksFailedError(outcomes, g, granularity_table(self.table_name, g))))
        if failures:
            raise AirflowFailException("; ".join(failures))
        returned = {
            g: {name: {"passed": passed, "details": details} for name, (passed, details) in outcomes.items()}
            for g, outcomes in per.items()
        }
        return returned[""] if list(returned) == [""] else returned


class LateChunkIndexOperator(LanceDBOperator):
    """Build or refresh the chunk table's indexes, then compact (what Dagster's index asset does).

    Returns the report of :func:`~latechunk_dagster.sink.indexing.refresh_indexes` (rows, vector
    index, measured recall, version); with ``granularities``, ``{granularity: report}`` of each
    granularity's table.

    Args:
        table_name, lancedb_conn_id: as :class:`LateChunkShardOperator` (``table_name`` templated).
        granularities: the granularity names of a table definition of several strategies
            (templated): each one's table (``table_name_<granularity>``) is refreshed.

    Under generations the tables refreshed are the newest generation's (what the late-chunk tasks
    wrote: :func:`~latechunk_dagster.airflow.tasks.built_table_names`), as Dagster's index asset.
    """

    template_fields: Sequence[str] = ("table_name", "granularities")

    def __init__(
        self,
        *,
        table_name: str = CHUNK_TABLE,
        granularities: Sequence[str] = (),
        lancedb_conn_id: str = LanceDBHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_name = table_name
        self.granularities = granularities
        self.lancedb_conn_id = lancedb_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        db = self.hook.get_settings()
        names = xcom_list(self.granularities)
        reports = {}
        for g, name in zip(names or [""], built_table_names(db, self.table_name, names), strict=True):
            try:
                reports[g] = refresh_table_indexes(db, name)
            except LookupError as exc:
                raise AirflowException(str(exc)) from exc
            self.log.info("indexes of %s: %s", name, reports[g])
        return reports[""] if not names else reports
