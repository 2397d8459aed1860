"""vLLM's Model Runner V2 (issue 37 item 4): does the span plugin's hook still run there?

V2 is vLLM's default model runner where Triton runs (vllm PR 48290). On this CPU build it cannot
start: vLLM 0.33's CPU worker refuses it ("Model Runner V2 requires Triton") and the build's Triton
has no CPU backend, so the span path cannot be run on V2 here. What can be checked here, on vLLM 0.33
itself: V2 refuses clearly (our error names the model and vLLM's reason), and V2's pooling runner
pools through the model's own pooler, whose ``token_embed`` branch is the ``TokenPooler`` the
plugin patches (a change of either in a later vLLM fails this test).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.native


def test_model_runner_v2_pools_through_the_pooler_the_plugin_patches() -> None:
    from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler
    from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

    from latechunk_dagster import vllm_plugin

    assert "token_embed" in inspect.getsource(sys.modules[PoolingRunner.__module__])
    assert "self.model.pooler(hidden_states, pooling_metadata)" in inspect.getsource(PoolingRunner.pool)
    vllm_plugin.register()
    assert getattr(TokenPooler, vllm_plugin._PATCHED) and TokenPooler.forward.__module__ == vllm_plugin.__name__


def test_v2_on_this_cpu_build_is_refused_with_the_model_and_vllms_reason(minilm_dir: Path) -> None:
    code = (
        "from latechunk_dagster import LateChunker, ModelNotSupportedError\n"
        "try:\n"
        f"    LateChunker({str(minilm_dir)!r}, dtype='float32', enforce_eager=True, gpu_memory_utilization=0.05)\n"
        "except ModelNotSupportedError as e:\n"
        "    print('REFUSED', e)\n"
    )
    env = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    [line] = [x for x in out.stdout.splitlines() if x.startswith("REFUSED")]
    assert "BertModel" in line and "Model Runner V2 requires Triton" in line
