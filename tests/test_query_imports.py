"""Issue 30: what ``latechunk search`` imports on the light engine, and the deferred imports.

transformers imports ``sklearn.metrics`` (for assisted decoding) and ``scipy.optimize`` (for its
object-detection losses) at import when they are installed, and an encoder runs neither;
:mod:`latechunk_dagster.core.hf_imports` defers them to a function's first call. A search from a
fresh process must print the hits this process finds with the same model without importing
scikit-learn, SciPy, Dagster, vLLM or httpx (``bench/query_engine.py`` measures what that saves);
the deferred functions must still give the libraries' answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.app import cli
from latechunk_dagster.app.demo_corpus import build_demo_store
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import DocumentStore

QUERY = "compress data with gzip"


def fresh(code: str, *args: str) -> str:
    """Run ``python -c code args`` in a fresh process; its stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_a_deferred_function_imports_its_module_on_the_first_call_and_gives_its_answer() -> None:
    pytest.importorskip("sklearn")
    code = """
import json, sys
from latechunk_dagster.core.hf_imports import AutoModel
before = [m for m in ("sklearn", "scipy.optimize") if m in sys.modules]
from transformers.generation import candidate_generator
from transformers.loss import loss_for_object_detection
fpr, tpr, thresholds = candidate_generator.roc_curve([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
rows, cols = loss_for_object_detection.linear_sum_assignment([[4, 1, 3], [2, 0, 5], [3, 2, 2]])
import scipy.optimize, sklearn.metrics
print(json.dumps({"before": before, "fpr": fpr.tolist(), "tpr": tpr.tolist(), "thresholds": thresholds[1:].tolist(),
                  "assignment": [rows.tolist(), cols.tolist()],
                  "real": all(hasattr(m, "__file__") for m in (sklearn.metrics, scipy.optimize))}))
"""
    got = json.loads(fresh(code).splitlines()[-1])
    assert got["before"] == []  # transformers' auto classes and model code imported, neither deferred module
    # by hand: scores 0.8 (positive), 0.4 (negative), 0.35 (positive), 0.1 (negative), thresholds descending
    assert got["fpr"] == [0.0, 0.0, 0.5, 0.5, 1.0]
    assert got["tpr"] == [0.0, 0.5, 0.5, 1.0, 1.0]
    assert got["thresholds"] == [0.8, 0.4, 0.35, 0.1]
    # by hand: the cheapest one-to-one assignment of [[4, 1, 3], [2, 0, 5], [3, 2, 2]] costs 1 + 2 + 2
    assert got["assignment"] == [[0, 1, 2], [1, 0, 2]]
    assert got["real"]  # a later import is the library's own module, not the stand-in


def test_nothing_is_deferred_where_the_module_is_already_imported() -> None:
    import json as json_module

    from latechunk_dagster.core.hf_imports import deferred_functions

    with deferred_functions("json"):
        from json import dumps
    assert sys.modules["json"] is json_module and dumps is json_module.dumps


def test_cli_search_from_a_fresh_process_imports_none_of_the_heavy_packages(
    minilm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LateChunker(minilm_dir, engine="transformers") as light:
        store = DocumentStore.from_path(build_demo_store(tmp_path / "documents", modules=["bz2", "gzip", "zlib"]))
        settings = LanceDBSettings(uri=str(tmp_path / "lancedb"))
        chunks = settings.chunk_table(sink.CHUNK_TABLE, light.embedding_dim)
        rejected = settings.rejected_table(sink.REJECTED_TABLE)
        for shard in store.shards():
            materialize_partition(
                light, store.iter_shard(shard), shard, Sentences(max_tokens=128), chunk_table=chunks,
                rejected_table=rejected, run_id="r1",
            )  # fmt: skip
        want = search(QUERY, chunker=light, uri=settings.uri, k=3, exact=True)
    code = """
import sys
from latechunk_dagster.app.cli import main
assert main(sys.argv[1:]) == 0
print("LOADED", [m for m in ("sklearn", "scipy", "dagster", "vllm", "httpx") if m in sys.modules])
"""
    out = fresh(code, "search", QUERY, "--uri", settings.uri, "-k", "3", "--exact").splitlines()
    assert out[-1] == "LOADED []"
    rows = [line.split("\t") for line in out[1:-1]]
    assert [r[1:3] for r in rows] == [[h.doc_id, str(h.char_range)] for h in want]
    assert [float(r[0]) for r in rows] == pytest.approx([h.distance for h in want], abs=5e-5)  # printed to 4 places
    # the command line itself (it ends without the interpreter's teardown): the same lines, flushed, exit 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "latechunk_dagster.app.cli", "search", QUERY, "--uri", settings.uri, "-k", "3"]
    done = subprocess.run([*command, "--exact"], capture_output=True, text=True, env=env, timeout=300)
    assert (done.returncode, done.stdout.splitlines()) == (0, out[:-1]), done.stderr[-2000:]
    # in this process: the same lines, on one torch thread during the search, the caller's count after
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert cli.main(["search", QUERY, "--uri", settings.uri, "-k", "3", "--exact"]) == 0
        assert capsys.readouterr().out.splitlines() == out[:-1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_the_former_server_resource_module_still_imports_with_a_deprecation_warning() -> None:
    """``integration.remote`` (a name ``core/remote.py`` also had) is now ``integration.server_resource``."""
    import importlib

    sys.modules.pop("latechunk_dagster.integration.remote", None)
    with pytest.warns(DeprecationWarning, match="integration.server_resource"):
        old = importlib.import_module("latechunk_dagster.integration.remote")
    from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

    assert old.VLLMServerEngineResource is VLLMServerEngineResource
