"""Where the span plugin finds vLLM's token-embedding pooler (issue 47, "Also").

A unit test of the lookup on fake module trees: only one vLLM can be installed here (0.32/0.33, whose
pooler is ``pooler.tokwise.poolers.TokenPooler``), so the older and other layouts (``AllPooler`` in
``pooler.py``; ``AllPooler`` under an abstract ``TokenPooler``; the ``layers/pool/...`` trees) are
stood in for by modules built here with the class names and shapes those trees have (read from vLLM's
history). The installed vLLM's own place is checked for real, and the patched ``forward`` of a found
fake pooler answers a span request with span sums, never with the token rows.
"""

from __future__ import annotations

import abc
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from latechunk_dagster import vllm_plugin
from latechunk_dagster.vllm_plugin import SPANS_KEY, PoolerNotFoundError, register, token_pooler


def fake_tree(modules: dict[str, dict[str, type]]) -> Any:
    """An ``import_module`` that knows only ``modules`` (name -> its classes)."""

    def import_module(name: str) -> ModuleType:
        if name not in modules:
            raise ModuleNotFoundError(name)
        module = ModuleType(name)
        for attr, cls in modules[name].items():
            setattr(module, attr, cls)
        return module

    return import_module


class ConcretePooler:
    """A pooler as vLLM's: ``forward`` returns each request's token rows."""

    def forward(self, hidden_states: Any, pooling_metadata: Any) -> list[Any]:
        return [hidden_states[a:b] for a, b in pooling_metadata.bounds]


class AbstractPooler(abc.ABC):
    @abc.abstractmethod
    def forward(self, hidden_states: Any, pooling_metadata: Any) -> list[Any]: ...


def concrete(name: str) -> type:
    return type(name, (ConcretePooler,), {})


LAYERS = "vllm.model_executor.layers."


def layouts() -> dict[str, tuple[dict[str, dict[str, type]], str, str]]:
    """Layout name -> (its modules, the module and class the lookup must pick)."""
    tok = LAYERS + "pooler.tokwise.poolers"
    places = {
        "0.32-0.33 TokenPooler": ({"TokenPooler": concrete("TokenPooler")}, tok, "TokenPooler"),
        "AllPooler under an abstract TokenPooler": (
            {"TokenPooler": AbstractPooler, "AllPooler": concrete("AllPooler")},
            tok,
            "AllPooler",
        ),
        "pool/poolers/tokenwise.py": ({"AllPooler": concrete("A")}, LAYERS + "pool.poolers.tokenwise", "AllPooler"),
        "pool/tokenwise/poolers.py": ({"AllPooler": concrete("A")}, LAYERS + "pool.tokenwise.poolers", "AllPooler"),
        "pooler.py AllPooler": ({"AllPooler": concrete("AllPooler")}, LAYERS + "pooler", "AllPooler"),
    }
    return {k: ({module: classes}, module, name) for k, (classes, module, name) in places.items()}


@pytest.mark.parametrize("layout", list(layouts()))
def test_the_pooler_is_found_in_each_known_place(layout: str) -> None:
    modules, module, name = layouts()[layout]
    assert token_pooler(fake_tree(modules), "x") is modules[module][name]


def test_no_pooler_anywhere_fails_naming_the_vllm_version_and_every_place() -> None:
    # a tree with the module but only an abstract pooler counts as none: patching it would do nothing
    tree = fake_tree({"vllm.model_executor.layers.pooler.tokwise.poolers": {"TokenPooler": AbstractPooler}})
    with pytest.raises(PoolerNotFoundError) as caught:
        token_pooler(tree, "0.99.1")
    message = str(caught.value)
    assert "vLLM 0.99.1" in message and "engine_path='token_states'" in message
    for module, _names in vllm_plugin.POOLER_PLACES:
        assert module in message
    with pytest.raises(PoolerNotFoundError, match="vLLM 0.99.1|vLLM"):
        register(tree)


def test_the_installed_vllm_pooler_is_its_token_pooler() -> None:
    from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler

    assert token_pooler() is TokenPooler


def test_a_found_fake_pooler_answers_span_requests_with_sums() -> None:
    """The patch goes on the class found: a span request gets ``[n_spans, 2 * dim + 1]`` sums (the
    float64 sums by hand), a plain request its token rows unchanged."""
    cls = type("AllPooler", (ConcretePooler,), {})
    register(fake_tree({"vllm.model_executor.layers.pooler": {"AllPooler": cls}}))
    states = torch.arange(12, dtype=torch.float32).reshape(6, 2)  # two requests of 3 rows, dim 2
    meta = SimpleNamespace(
        bounds=[(0, 3), (3, 6)],
        pooling_params=[SimpleNamespace(extra_kwargs={SPANS_KEY: [0, 1, 1, 3]}), SimpleNamespace(extra_kwargs=None)],
    )
    spans, plain = cls().forward(states, meta)
    want = np.array([[0.0, 1.0], [2.0 + 4.0, 3.0 + 5.0]])  # rows 0, and 1..2 of the first request
    assert spans.shape == (2, 5)
    assert np.array_equal(spans[:, :2].double().numpy() + spans[:, 2:4].double().numpy(), want)
    assert spans[:, 4].tolist() == [1.0, 2.0]
    assert torch.equal(plain, states[3:6])
