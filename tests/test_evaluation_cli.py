"""`latechunk eval` on a small real table: the printed table, the filter, one-line errors.

The table is written by a separate process (its own engine), then the CLI runs as users run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from latechunk_dagster.app.demo_queries import context_set
from latechunk_dagster.evaluation import write_queries

BUILD = """
import sys
from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.app.demo_queries import context_set
from latechunk_dagster.evaluation import materialize_setting
from latechunk_dagster.app.definitions import shipped_model_path

docs, _ = context_set(per_kind=3)
with LateChunker(shipped_model_path(), enforce_eager=True, gpu_memory_utilization=0.1) as chunker:
    db = sink.connect(sys.argv[1])
    table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    materialize_setting(chunker, {"p1": docs[:6], "p2": docs[6:]}, Sentences(max_tokens=24), table)
"""


def run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LATECHUNK_HOME": str(home), "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("cli-eval")
    out = run([sys.executable, "-c", BUILD, str(home / "lancedb")], home)
    assert out.returncode == 0, out.stderr[-3000:]
    _, queries = context_set(per_kind=3)
    write_queries(home / "queries.jsonl", queries)
    return home


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "latechunk_dagster.app.cli", "eval", *args], home)


def test_eval_prints_the_table(home: Path) -> None:
    out = cli(home, str(home / "queries.jsonl"), "--where", "partition = 'p1'")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "| | nDCG@10 | R@1 | R@5 | R@10 | MRR@10 |"
    assert lines[2].startswith("| late | ") and lines[3].startswith("| naive | ")
    assert lines[4].startswith("| late - naive (95% CI) | ")
    late, naive = (float(line.split("|")[2]) for line in lines[2:4])
    assert late > naive  # context-dependent queries: the late vectors carry the entity
    # partition p1 holds 6 of the 12 documents; the other documents' 18 queries are skipped
    # the blend rows (issue 48) follow the table's own rows; then the summary line
    summary = next(line for line in lines if " queries over " in line)
    assert summary.startswith("18 queries over ") and "18 queries skipped" in summary


def test_eval_with_k_5(home: Path) -> None:
    out = cli(home, str(home / "queries.jsonl"), "--k", "5")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[0] == "| | nDCG@5 | R@1 | R@5 | MRR@5 |"
    assert next(line for line in out.stdout.splitlines() if " queries over " in line).startswith("36 queries over ")


def test_eval_errors_are_one_line(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "doc_id": "x"}\n{"query": "q2", "doc_id": "x", "char_start": 9}\n')
    for args, message in (
        ([str(bad)], "line 2: give both 'char_start' and 'char_end'"),
        ([str(tmp_path / "none.jsonl")], "query file not found"),
        ([str(home / "queries.jsonl"), "--where", "no_such_column = 1"], "bad --where filter"),
    ):
        out = cli(home, *args)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("latechunk eval: error: ") and message in last
