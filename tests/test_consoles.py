"""Issue 51 item 5: quiet consoles. The guide's first run (docs/dagster.md's ``first-run.sh``: the
``dg`` commands it teaches, the index, ``latechunk search`` plain and ``--hybrid``) run as written in
bash from an empty folder, its lines counted: no Dagster telemetry banner, no ``SupersessionWarning``,
``BetaWarning`` or other Python warning, no ``WARNING`` log line, and no vLLM line twice.

The results of the same block are asserted by ``tests/test_your_own_documents.py``; here only what
the terminal shows (the block sets ``PYTHONWARNINGS`` to hide this venv's two dg version-mismatch
lines, as the guide says; the test checks that nothing else is hidden by it)."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

from latechunk_dagster.app.settings import DG_QUIET
from tests.doc_examples import example
from tests.test_your_own_documents import environ

#: Dagster's event lines start with a timestamp; the rest of a line names what printed it
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? [+-]\d{4} - ")


def noise(text: str) -> list[str]:
    """The lines of ``text`` a user should not see (each named by what it is), in order."""
    found = []
    for line in text.splitlines():
        if re.search(r"telemetry|welcome to dagster", line, re.I):
            found.append(f"telemetry banner: {line}")
        elif re.search(r"\w+Warning\b", line):  # SupersessionWarning, BetaWarning, UserWarning, ...
            found.append(f"python warning: {line}")
        elif re.search(r"\bWARNING\b| - WARN(?:ING)? - ", line):
            found.append(f"warning log line: {line}")
    vllm = Counter(STAMP.sub("", line).strip() for line in text.splitlines() if "vllm" in line.lower())
    found += [f"vLLM line x{n}: {line}" for line, n in vllm.items() if n > 1]
    return found


def test_noise_finds_each_kind_of_line() -> None:
    """The counter itself, on lines as the tools print them (from the issue's transcript)."""
    text = "\n".join(
        [
            "  Telemetry:",
            "/x/dagster/_cli/asset.py:58: SupersessionWarning: `materialize` is superseded",
            "/x/assets.py:47: BetaWarning: Parameter `observable_source_asset` is currently in beta",
            "WARNING 12-07 16:40:01 [cpu.py:100] torch.set_num_threads",
            "2026-12-07 16:47:04 +0000 - dagster - INFO - vllm 0.32.0 (starts on the first encode)",
            "2026-12-07 16:47:09 +0000 - dagster - INFO - vllm 0.32.0 (starts on the first encode)",
            "2026-12-07 16:47:09 +0000 - dagster - INFO - RUN_SUCCESS - Finished execution",
        ]
    )
    assert [n.split(":")[0] for n in noise(text)] == [
        "telemetry banner",
        "python warning",
        "python warning",
        "warning log line",
        "vLLM line x2",
    ]
    assert noise("2026-12-07 16:47:09 +0000 - dagster - INFO - RUN_SUCCESS") == []


def test_the_guides_first_run_prints_nothing_unwanted(tmp_path: Path) -> None:
    block = example("first-run.sh")
    # the guide teaches dg, with its telemetry off and this venv's version-mismatch lines hidden
    assert "dg launch" in block and "dagster asset materialize" not in block and "enabled: false" in block
    assert f'PYTHONWARNINGS="{DG_QUIET}"' in block
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=tmp_path,
        env=environ(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "RUN_SUCCESS" in text and text.count("\tpumps/acme.txt\t") == 2  # both searches answered
    assert noise(text) == [], "\n".join(noise(text))


def test_a_phase_prints_when_it_starts_while_it_runs_and_its_wall_time() -> None:
    """Issue 51 item 4: no step silent longer than its interval (the demo's 20 s, here 0.2 s)."""
    import time

    import pytest

    from latechunk_dagster.app.phases import Phase

    lines: list[str] = []
    with Phase("encoding", interval=0.2, out=lines.append):
        time.sleep(0.5)  # two intervals: "still running" lines (one to three where the machine is busy)
        lines.append("-- mark --")
    assert lines[0] == "encoding ..."
    beats = lines[1 : lines.index("-- mark --")]
    assert 1 <= len(beats) <= 3 and all(re.fullmatch(r"  encoding: still running, \d s", b) for b in beats), beats
    done = re.fullmatch(r"encoding: done in (\d+\.\d) s", lines[-1])
    assert done and 0.5 <= float(done[1]) < 5, lines[-1]
    lines.clear()
    with pytest.raises(KeyError), Phase("sync", interval=60, out=lines.append):
        raise KeyError("x")
    assert lines[0] == "sync ..." and re.fullmatch(r"sync: stopped after \d+\.\d s", lines[-1]), lines
    with pytest.raises(ValueError, match="interval must be positive"):
        Phase("x", interval=0)
    answers = iter(["1/2 shards written"])  # the second call raises StopIteration: left out, lines go on
    lines.clear()
    with Phase("encoding", interval=0.2, out=lines.append, status=lambda: next(answers)):
        deadline = time.monotonic() + 30
        while len(lines) < 3 and time.monotonic() < deadline:  # two beats, however busy the machine
            time.sleep(0.05)
    assert re.fullmatch(r"  encoding: still running, \d s: 1/2 shards written", lines[1]), lines
    assert re.fullmatch(r"  encoding: still running, \d s", lines[2]), lines


def test_the_encode_phase_counts_the_shards_written_so_far() -> None:
    """The demo's encode phase's status reads the run's materializations from the instance."""
    import dagster as dg

    from latechunk_dagster.app.demo import _shards_written

    parts = dg.StaticPartitionsDefinition(["a", "b", "c"])

    @dg.asset(partitions_def=parts)
    def shard() -> None:
        return None

    with dg.instance_for_test() as instance:
        dg.materialize([shard], instance=instance, partition_key="a")  # before: not counted
        status = _shards_written(instance, shard.key, 3)
        assert status() == "0/3 shards written"
        for key in ("b", "c"):
            dg.materialize([shard], instance=instance, partition_key=key)
        assert status() == "2/3 shards written"
