"""A materialization in its own OS process, for the concurrent-writer and crash tests and bench.

``python -m tests.writer_process '<json spec>'`` prints one JSON line with what it wrote. Spec keys:
``mode`` (``"partition"``: :func:`materialize_partition` directly; ``"dagster"``: one run of the
factory's chunk job, ``execute_in_process``), ``model``, ``db``, ``partition``, ``run_id``,
``start_at`` (a wall-clock time to wait for, so several processes commit together), ``force``,
``batch_tokens``; ``docs`` ({doc_id: text}) for ``partition`` mode; ``store``, ``home``,
``partitions`` for ``dagster`` mode. ``LATECHUNK_TEST_KILL_AT`` in the environment kills it at a
named point (:data:`latechunk_dagster.pipeline.partition.TEST_KILL_ENV`).

The engine runs inside this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): a SIGKILL leaves no
orphaned engine process behind.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Engine settings of a writer process: several run side by side, so a small KV cache each.
WRITER_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.02}
STRATEGY_TOKENS = 8


def build_defs(spec: dict[str, Any]) -> Any:
    """Definitions of one table over a store whose top-level directories are the partitions."""
    import dagster as dg

    from latechunk_dagster import FixedTokens, late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource, VLLMEngineResource

    table = late_chunk_assets(
        partitions_def=dg.StaticPartitionsDefinition(spec["partitions"]),
        backfill_policy=None,
        strategy=FixedTokens(chunk_size=STRATEGY_TOKENS),
        sensor=False,
        parity_check=False,
        index=False,
    )
    return table, dg.Definitions.merge(
        table.to_definitions(),
        dg.Definitions(
            resources={
                "engine": VLLMEngineResource(model=spec["model"], **WRITER_ENGINE_ARGS),
                "lancedb": LanceDBResource(uri=spec["db"]),
                "store": DocumentStoreResource(path=spec["store"]),
            }
        ),
    )


def _wait(spec: dict[str, Any]) -> None:
    time.sleep(max(0.0, spec.get("start_at", 0.0) - time.time()))


def run_partition(spec: dict[str, Any]) -> dict[str, Any]:
    from latechunk_dagster import FixedTokens, LateChunker, sink
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.sources.files import Document

    docs = [Document.from_text(k, v) for k, v in spec["docs"].items()]
    with LateChunker(spec["model"], **WRITER_ENGINE_ARGS) as chunker:
        db = sink.connect(spec["db"])
        chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
        rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
        _wait(spec)
        t0 = time.time()
        report = materialize_partition(
            chunker,
            docs,
            spec["partition"],
            FixedTokens(chunk_size=STRATEGY_TOKENS),
            chunk_table=chunks,
            rejected_table=rejected,
            run_id=spec["run_id"],
            force=spec.get("force", False),
            batch_tokens=spec.get("batch_tokens"),
        )
        w = report.write
        return {
            "chunks_written": report.chunks_written,
            "partition_rows": report.partition_rows,
            "attempts": w.attempts if w else 0,
            "lance_attempts": w.lance_attempts if w else 0,
            "seconds": time.time() - t0,
            "commit_at": time.time(),
        }


def run_dagster(spec: dict[str, Any]) -> dict[str, Any]:
    import dagster as dg

    table, defs = build_defs(spec)
    os.environ["DAGSTER_HOME"] = spec["home"]
    with dg.DagsterInstance.get() as instance:
        _wait(spec)
        result = defs.resolve_job_def(table.jobs[0].name).execute_in_process(
            instance=instance, partition_key=spec["partition"], raise_on_error=False
        )
        mats = result.asset_materializations_for_node(table.chunk_asset.op.name)
        meta = {k: v.value for k, v in mats[0].metadata.items()} if mats else {}
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
        return {"success": result.success, "run_id": result.run_id, "checks": checks, "metadata": _plain(meta)}


def _plain(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    out = run_dagster(spec) if spec.get("mode") == "dagster" else run_partition(spec)
    print("RESULT " + json.dumps(out), flush=True)
