"""Issue 35: the vLLM plugin loads only itself, and the package's names are imported on first use.

Every vLLM process loads the plugin (the ``vllm.general_plugins`` entry point, and the endpoint
plugin in a server started with ``VLLM_PLUGINS``): it must import its own modules and nothing of the
core, Dagster, LanceDB or httpx. The package ``__init__`` is lazy (PEP 562); every public name must
still resolve to its defining module's object, and ``__all__`` and ``dir()`` must list them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import latechunk_dagster

#: What loading both plugins may import of the package: the package, the plugin, its wire format
#: and its numpy-only span-sum kernel (the right answer from the issue: the plugin's own modules).
PLUGIN_MODULES = {
    "latechunk_dagster",
    "latechunk_dagster.vllm_plugin",
    "latechunk_dagster.vllm_plugin.endpoint",
    "latechunk_dagster.vllm_plugin.protocol",
    "latechunk_dagster.vllm_plugin.sums",
}


def fresh(code: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()[-1]


def test_loading_the_plugins_imports_only_the_plugins_own_modules() -> None:
    code = """
import json, sys
import latechunk_dagster.vllm_plugin, latechunk_dagster.vllm_plugin.endpoint
import numpy as np
from latechunk_dagster.vllm_plugin import _cpu_sum_pairs
import torch
rows = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
pairs = _cpu_sum_pairs(rows, torch.tensor([[0, 2], [2, 3]]))
print(json.dumps({"mods": sorted(m for m in sys.modules if m.startswith("latechunk_dagster")),
                  "heavy": [m for m in ("dagster", "lancedb", "httpx", "transformers") if m in sys.modules],
                  "pairs": pairs.tolist()}))
"""
    got = json.loads(fresh(code))
    assert set(got["mods"]) == PLUGIN_MODULES
    assert got["heavy"] == []
    # by hand: rows 0-1 sum to (4, 6), row 2 is (5, 6); exact in float32, so lo is 0; counts 2 and 1
    assert got["pairs"] == [[4.0, 6.0, 0.0, 0.0, 2.0], [5.0, 6.0, 0.0, 0.0, 1.0]]


def test_a_bare_import_of_the_package_imports_none_of_its_modules() -> None:
    got = json.loads(fresh("import json, sys, latechunk_dagster; print(json.dumps(sorted(sys.modules)))"))
    assert [m for m in got if m.startswith("latechunk_dagster")] == ["latechunk_dagster"]


def test_every_public_name_is_importable_and_listed() -> None:
    from latechunk_dagster.core.chunker import LateChunker
    from latechunk_dagster.core.errors import SpanError
    from latechunk_dagster.integration.resources import LanceDBResource

    assert latechunk_dagster.LateChunker is LateChunker
    assert latechunk_dagster.SpanError is SpanError
    assert latechunk_dagster.LanceDBResource is LanceDBResource
    for name in latechunk_dagster.__all__:
        assert getattr(latechunk_dagster, name) is not None, name
    assert set(latechunk_dagster.__all__) <= set(dir(latechunk_dagster))
    assert len(latechunk_dagster.__all__) == 41
    assert latechunk_dagster.core.pooling.piece_sums is latechunk_dagster.vllm_plugin.sums.piece_sums


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        latechunk_dagster.NoSuchName  # noqa: B018 - the access is the test
