"""Tokens as arrays (issue 37): a tokenization's arrays hold what the model's own tokenizer call gives,
its list views agree with them, and the tokenizer pass leaves the garbage collector as it found it."""

from __future__ import annotations

import gc
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latechunk_dagster.core.tokenization import Tokenization, tokenize_documents

TEXTS = ["Berlin is the capital of Germany.", "Grüße aus 😀 Köln!\n\nZweiter Absatz.", "x" * 600 + " tail words"]


@pytest.fixture(scope="module")
def tok(minilm_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm_dir))


def test_arrays_hold_the_tokenizers_own_output(tok: Any) -> None:
    """ids, special mask and ranges as arrays equal transformers' own call (offsets as it gives them,
    specials unsourced), and the list views are the same values."""
    got = tokenize_documents(tok, TEXTS, indices=range(3), doc_ids=["a", "b", "c"])
    enc = tok(TEXTS, return_offsets_mapping=True, return_special_tokens_mask=True, truncation=False)
    for k, t in enumerate(got):
        assert isinstance(t, Tokenization)
        assert t.ids.dtype == np.int64 and t.ids.tolist() == enc["input_ids"][k] == t.token_ids
        assert t.special_mask.dtype == bool and t.special_mask.tolist() == [
            bool(m) for m in enc["special_tokens_mask"][k]
        ]
        want = [None if m else tuple(o) for o, m in zip(enc["offset_mapping"][k], enc["special_tokens_mask"][k])]
        assert t.offsets == want
        assert [None if s < 0 else (s, e) for s, e in zip(t.starts.tolist(), t.ends.tolist())] == want


def test_a_tokenization_pickles_and_slices_as_arrays(tok: Any) -> None:
    """A round trip through pickle (the host workers) keeps every field; a slice is views of the arrays."""
    [t] = tokenize_documents(tok, TEXTS[:1], indices=[0], doc_ids=["a"])
    assert isinstance(t, Tokenization)
    back = pickle.loads(pickle.dumps(t))
    assert back == t and back.token_ids == t.token_ids and back.offsets == t.offsets and back.special == t.special
    part = t.slice(1, 4)
    assert np.shares_memory(part.ids, t.ids) and part.token_ids == t.token_ids[1:4]
    assert part.offsets == t.offsets[1:4] and part.n_prefix == 0
    from_lists = Tokenization(t.token_ids, t.offsets, t.special, t.n_prefix)
    assert from_lists == t and from_lists.token_ids is not None
    with pytest.raises(ValueError, match="differ in length"):
        Tokenization([1, 2], [(0, 1)])


@pytest.mark.parametrize("enabled", [True, False])
def test_the_tokenizer_pass_leaves_the_collector_as_it_was(tok: Any, enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        tokenize_documents(tok, TEXTS, indices=range(3), doc_ids=["a", "b", "c"])
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
