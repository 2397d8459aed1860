"""Materializations in their own OS process, for the concurrent-writer and crash tests.

``python -m tests.writer_process`` is a writer: it reads one JSON job per line on stdin and, for
each, prepares (engine up, tables open), says ``READY``, waits until the file the job names in
``"go_file"`` exists when it names one (so several writers commit at once, whatever their start-up
took), runs it and says ``RESULT <json>``. The answers travel on the process's original stdout;
whatever the libraries print goes to stderr. :class:`Writer` is the test's side.

The release is a file, not a line on stdin: stdin carries jobs only, so a writer can never read the
next job where it waits for its release.

Job keys: ``mode`` (``"partition"``: :func:`materialize_partition` directly, on an engine the writer
keeps between its partition jobs; ``"dagster"``: one run of the factory's chunk job,
``execute_in_process``, whose engine resource starts and stops its own engine), ``model``, ``db``,
``partition``, ``run_id``, ``force``, ``batch_tokens``; ``docs`` ({doc_id: text}) for ``partition``
mode; ``store``, ``home``, ``partitions`` for ``dagster`` mode; ``go_file``; ``env`` (variables set
for the job: ``AWS_*``, ``TMPDIR`` for the staging directory, :data:`TEST_KILL_ENV` to be killed at
a named point; variables the previous job set and this one does not are removed).

The engine runs inside this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): a SIGKILL, or the exit
at the end of the jobs (without closing the engine), leaves no orphaned engine process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
#: Engine settings of a writer process: several run side by side, so a small KV cache each.
WRITER_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.02}
STRATEGY_TOKENS = 8
#: How long the test side waits for one answer of a writer (start-up included), in seconds.
ANSWER_TIMEOUT_S = 600


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


# -- the writer's side -------------------------------------------------------------------------------

#: The engine partition jobs share, with its model directory (one in-process engine per process).
_ENGINE: dict[str, Any] = {}


def _engine(model: str | None) -> Any:
    """The kept engine of ``model`` (started on first use); ``None``: close the kept engine."""
    from latechunk_dagster import LateChunker

    if _ENGINE and _ENGINE["model"] != model:
        _ENGINE.pop("chunker").close()
        _ENGINE.clear()
    if model is not None and not _ENGINE:
        _ENGINE.update(model=model, chunker=LateChunker(model, **WRITER_ENGINE_ARGS))
    return _ENGINE.get("chunker")


def prepare_partition(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """Engine up, tables opened (fresh handles) and documents built; returns the run."""
    from latechunk_dagster import FixedTokens, sink
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.sources.files import Document

    chunker = _engine(spec["model"])
    docs = [Document.from_text(k, v) for k, v in spec["docs"].items()]
    db = sink.connect(spec["db"])
    chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)

    def run() -> dict[str, Any]:
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
            "pid": os.getpid(),
        }

    return run


def prepare_dagster(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """The definitions built and the job resolved; returns the run (its resource starts the engine)."""
    import dagster as dg

    _engine(None)  # the run's engine resource starts its own
    table, defs = build_defs(spec)
    job = defs.resolve_job_def(table.jobs[0].name)

    def run() -> dict[str, Any]:
        os.environ["DAGSTER_HOME"] = spec["home"]
        with dg.DagsterInstance.get() as instance:
            result = job.execute_in_process(instance=instance, partition_key=spec["partition"], raise_on_error=False)
            mats = result.asset_materializations_for_node(table.chunk_asset.op.name)
            meta = {k: v.value for k, v in mats[0].metadata.items()} if mats else {}
            checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
            return {"success": result.success, "run_id": result.run_id, "checks": checks, "metadata": _plain(meta)}

    return run


def _plain(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}


def _set_env(env: dict[str, str], previous: dict[str, str]) -> None:
    for k in previous.keys() - env.keys():
        os.environ.pop(k, None)
    os.environ.update(env)
    tempfile.tempdir = None  # TMPDIR is read again


def _wait_for(path: Path, poll_s: float = 0.02) -> None:
    """Wait until ``path`` exists (the test's release of writers that commit together)."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no release at {path} within {ANSWER_TIMEOUT_S} s")
        time.sleep(poll_s)


def serve(jobs: IO[str], answers: IO[str]) -> None:
    """Run the jobs of ``jobs`` (JSON lines) one by one, answering on ``answers`` (module docstring)."""
    env: dict[str, str] = {}
    while line := jobs.readline():
        spec = json.loads(line)
        _set_env(spec.get("env", {}), env)
        env = spec.get("env", {})
        run = prepare_dagster(spec) if spec.get("mode") == "dagster" else prepare_partition(spec)
        print("READY", file=answers, flush=True)
        if go_file := spec.get("go_file"):
            _wait_for(Path(go_file))
        print("RESULT " + json.dumps(run()), file=answers, flush=True)


# -- the test's side --------------------------------------------------------------------------------


class Writer:
    """One writer process (the module docstring's protocol); its stderr goes to ``log``.

    ``env``: the process's environment on top of this one's (e.g. :data:`TEST_KILL_ENV`: then a job
    reaching that point kills the process, and :meth:`result` returns ``None``)."""

    def __init__(self, log: Path, env: dict[str, str] | None = None) -> None:
        from latechunk_dagster.pipeline.killpoints import TEST_KILL_ENV

        full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        if TEST_KILL_ENV not in (env or {}):
            full.pop(TEST_KILL_ENV, None)
        self.log = log
        #: A job was sent and its result not read yet (a test that failed mid-job leaves it so).
        self.in_flight = False
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.writer_process"],
                cwd=ROOT,
                env=full,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=fh,
                text=True,
            )

    def send(self, spec: dict[str, Any]) -> Writer:
        """Hand the writer one job (it prepares at once)."""
        assert self.proc.stdin is not None
        assert not self.in_flight, "the writer's last job has not answered"
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        self.in_flight = True
        return self

    @property
    def usable(self) -> bool:
        """Alive, with no job in flight: it can take the next one."""
        return self.proc.poll() is None and not self.in_flight

    def _answer(self) -> str | None:
        """The writer's next answer line; ``None`` if it was SIGKILLed. Fails on any other exit."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line:
            return line.rstrip("\n")
        rc = self.proc.wait(ANSWER_TIMEOUT_S)
        if rc == -signal.SIGKILL:
            return None
        raise AssertionError(f"writer exited {rc}: {self.log.read_text()[-3000:]}")

    def ready(self) -> None:
        """Wait until the job sent last is prepared."""
        assert self._answer() == "READY"

    def result(self) -> dict[str, Any] | None:
        """The job's result (after ``READY``); ``None`` if the job killed the process."""
        answer = self._answer()
        if answer == "READY":
            answer = self._answer()
        self.in_flight = False
        if answer is None:
            return None
        assert answer.startswith("RESULT "), answer
        return json.loads(answer[len("RESULT ") :])

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        """One job alone: send, wait for its result (the writer must live through it)."""
        result = self.send(spec).result()
        assert result is not None, f"writer killed: {self.log.read_text()[-3000:]}"
        return result

    def end(self) -> None:
        """No more jobs: the writer exits (:meth:`close` waits for it)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:  # it is gone already
                pass

    def close(self, timeout_s: float = 60) -> None:
        """:meth:`end`, then wait for the exit; killed after ``timeout_s``."""
        self.end()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def together(writers: list[Writer], specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One job per writer, all committing at once: every writer prepares and says ``READY``; once all
    have, one file releases them together (the module docstring)."""
    go_file = Path(tempfile.mkdtemp(prefix="latechunk-go-")) / "go"
    for w, spec in zip(writers, specs, strict=True):
        w.send({**spec, "go_file": str(go_file)})
    for w in writers:
        w.ready()
    go_file.touch()
    results = [w.result() for w in writers]
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


if __name__ == "__main__":
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what libraries print goes to the log
    # what every job imports, before the first job comes: a writer started early is ready sooner
    import dagster  # noqa: F401
    import vllm  # noqa: F401

    import latechunk_dagster.integration.resources  # noqa: F401
    import latechunk_dagster.pipeline  # noqa: F401

    serve(sys.stdin, answers)
    # no more jobs: every commit is done; leave without closing the engine and tearing down the
    # interpreter (18 s of CPU on two busy cores, which a test would wait for)
    os._exit(0)
