"""The tokenizer's one batch call, its output as numpy arrays (contract section 1's tokenization pass).

:func:`encodings` calls the fast tokenizer once for a batch of inputs and hands back, per input, its
ids, code-point offsets and special-token mask as arrays; :mod:`latechunk_dagster.core.tokenization`
turns them into :class:`~latechunk_dagster.core.tokenization.Tokenization` objects.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

ENCODE_KWARGS: dict[str, Any] = {
    "add_special_tokens": True,
    "return_offsets_mapping": True,
    "return_special_tokens_mask": True,
    "truncation": False,
    "padding": False,
    "verbose": False,
}


def rust_backend(tokenizer: Any) -> Any | None:
    """The Rust ``tokenizers.Tokenizer`` under a transformers fast tokenizer, when calling it
    directly gives exactly what ``tokenizer(texts, **ENCODE_KWARGS)`` gives; else ``None``.

    transformers' batch call (``TokenizersBackend._encode_plus``, transformers 5) turns truncation
    and padding off on the backend, sets its ``encode_special_tokens`` to the tokenizer's
    ``split_special_tokens``, calls ``encode_batch(texts, add_special_tokens=True)`` and then copies
    every encoding into Python lists (0.15 of 1.72 s of
    :func:`~latechunk_dagster.core.tokenization.tokenize_documents`, single-threaded,
    on ``bench/host_ceiling.py``'s 958,761-token corpus under cProfile; more under GIL contention).
    The direct call is taken only while the backend is in that state;
    otherwise the transformers call runs (and leaves the backend in it for the next batch).
    """
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch") or not _stock_batch_call(type(tokenizer)):
        return None
    try:
        if backend.truncation is not None or backend.padding is not None:
            return None
        if bool(backend.encode_special_tokens) != bool(getattr(tokenizer, "split_special_tokens", False)):
            return None
    except AttributeError:  # a tokenizers release without these properties
        return None
    return backend


#: Where transformers 5 defines the batch call that :func:`rust_backend` stands in for.
_STOCK_CALL = {
    "__call__": "transformers.tokenization_utils_base",
    "_encode_plus": "transformers.tokenization_utils_tokenizers",
}


def _stock_batch_call(cls: type) -> bool:
    """True when ``cls`` inherits transformers' own ``__call__`` and ``_encode_plus`` (a model's
    tokenizer class that overrides either one keeps its own call)."""
    for name, module in _STOCK_CALL.items():
        owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
        if owner is None or owner.__module__ != module:
            return False
    return True


#: One encoding as arrays: ids int64 ``[n]``, offsets int64 ``[n, 2]`` (code points into the
#: tokenizer's input), special-tokens mask bool ``[n]``.
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray]


def as_arrays(ids: Sequence[int], offsets: Sequence[tuple[int, int]], special_mask: Sequence[int]) -> Encoded:
    """One encoding's lists (what ``tokenizers`` hands to Python) as arrays, one ``np.fromiter`` each.

    ``tokenizers`` (0.23) has no array or buffer output: ``Encoding.ids`` / ``.offsets`` /
    ``.special_tokens_mask`` build Python lists (a tuple per offset). Each list is read into its
    array as soon as it is made, so the per-token objects die young, one document at a time, instead
    of the whole batch's being alive at once (``bench/token_arrays.py`` measures the options).
    """
    n = len(ids)
    pairs = np.fromiter(itertools.chain.from_iterable(offsets), dtype=np.int64, count=2 * len(offsets))
    return (
        np.fromiter(ids, dtype=np.int64, count=n),
        pairs.reshape(-1, 2),
        np.fromiter(special_mask, dtype=bool, count=len(special_mask)),
    )


def encodings(tokenizer: Any, inputs: list[str]) -> list[Encoded]:
    """The ids, code-point offsets and special-tokens mask of each input, from one batch call.

    Args:
        tokenizer: a Hugging Face fast tokenizer; its Rust backend is called directly when that gives
            what its own batch call gives (:func:`rust_backend`).
        inputs: the tokenizer's inputs (prefix + text, :func:`~latechunk_dagster.core.tokenization.encoder_text`).

    Returns:
        One :data:`Encoded` per input, in order: int64 ids ``[n]``, int64 offsets ``[n, 2]`` (code
        points into the input; ``(0, 0)`` for special tokens), bool special mask ``[n]``.
    """
    backend = rust_backend(tokenizer)
    if backend is not None:
        batch = backend.encode_batch(inputs, add_special_tokens=True)
        with gc_paused():
            return [as_arrays(e.ids, e.offsets, e.special_tokens_mask) for e in batch]
    enc = tokenizer(inputs, **ENCODE_KWARGS)
    with gc_paused():
        return [as_arrays(*e) for e in zip(enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"])]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the block runs (reference counting goes on).

    The encodings' lists make a tuple per token, and every few hundred of them the collector runs;
    in a process with millions of live objects (a Dagster or Airflow worker) its full passes walk
    them all, several times per batch. The lists and tuples hold only ints (no cycles), so nothing
    is left for the collector; it is enabled again on exit if it was enabled on entry (process-wide:
    a thread that disables it meanwhile finds it enabled again).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
