"""Airflow provider of late chunking: hooks, operators and an example DAG over the same core as the Dagster layer.

* :mod:`~latechunk_dagster.airflow.hooks`: ``LanceDBHook`` (connection type ``lancedb``) and
  ``VLLMServerHook`` (connection type ``vllm_server``).
* :mod:`~latechunk_dagster.airflow.operators`: ``ListShardsOperator``, ``LateChunkShardOperator``
  (one shard, :func:`~latechunk_dagster.pipeline.materialize_partition`), ``LateChunkChecksOperator``
  (:mod:`~latechunk_dagster.sink.validation`) and ``LateChunkIndexOperator``
  (:mod:`~latechunk_dagster.sink.indexing`).
* :mod:`~latechunk_dagster.airflow.engine`: the in-process engine of a task, and
  :func:`~latechunk_dagster.airflow.engine.use_chunker` to share one engine across the tasks of a process.
* :func:`~latechunk_dagster.airflow.get_provider_info.get_provider_info`: registered through the
  ``apache_airflow_provider`` entry point, so Airflow lists the provider and its connection types.

Importing this package does not import Airflow; its submodules do (``apache-airflow>=3.3``, the
``airflow`` extra).
"""
