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


#: Inputs longer than this many characters are tokenized in pieces of this size (:func:`encodings`).
#: The Rust tokenizer holds ~150 bytes per character of its input while it runs (normalized strings with
#: per-byte alignments, pre-tokenized splits, per-token strings): a 2 MiB input peaked at +290 MiB of RSS in
#: one call, and at +8 MiB in 64 KiB pieces (measured on MiniLM's WordPiece tokenizer, issue 47 kind 4).
PIECE_CHARS = 1 << 16

#: Characters of text on each side of a cut that both pieces tokenize (:func:`_stitch`): a cut is taken
#: only where the two pieces' tokens agree on the middle half of this margin.
PIECE_MARGIN = 1 << 10


def encodings(tokenizer: Any, inputs: list[str], *, piece_chars: int = PIECE_CHARS) -> list[Encoded]:
    """The ids, code-point offsets and special-tokens mask of each input, from one batch call.

    Args:
        tokenizer: a Hugging Face fast tokenizer; its Rust backend is called directly when that gives
            what its own batch call gives (:func:`rust_backend`).
        inputs: the tokenizer's inputs (prefix + text, :func:`~latechunk_dagster.core.tokenization.encoder_text`).
        piece_chars: an input longer than this (characters; default :data:`PIECE_CHARS`) is tokenized in
            overlapping pieces of this size, one call each, stitched where two pieces agree
            (:func:`encode_in_pieces`), so the tokenizer's own memory is bounded by this, not by the input.

    Returns:
        One :data:`Encoded` per input, in order: int64 ids ``[n]``, int64 offsets ``[n, 2]`` (code
        points into the input; ``(0, 0)`` for special tokens), bool special mask ``[n]``.
    """
    backend = rust_backend(tokenizer)
    short = [k for k, text in enumerate(inputs) if len(text) <= piece_chars]
    out: list[Encoded | None] = [None] * len(inputs)
    for k, encoded in zip(short, _one_call(tokenizer, backend, [inputs[k] for k in short])):
        out[k] = encoded
    for k, text in enumerate(inputs):
        if out[k] is None:
            out[k] = encode_in_pieces(tokenizer, text, piece_chars=piece_chars, backend=backend)
    return out  # type: ignore[return-value]


def _one_call(tokenizer: Any, backend: Any | None, inputs: list[str]) -> list[Encoded]:
    """The inputs' :data:`Encoded` arrays from one batch call (the backend's, or the tokenizer's own)."""
    if not inputs:
        return []
    if backend is not None:
        batch = backend.encode_batch(inputs, add_special_tokens=True)
        with gc_paused():
            return [as_arrays(e.ids, e.offsets, e.special_tokens_mask) for e in batch]
    enc = tokenizer(inputs, **ENCODE_KWARGS)
    with gc_paused():
        return [as_arrays(*e) for e in zip(enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"])]


def encode_in_pieces(tokenizer: Any, text: str, *, piece_chars: int = PIECE_CHARS, backend: Any = None) -> Encoded:
    """What one call on ``text`` returns, from calls on overlapping pieces of at most ``piece_chars`` characters.

    Consecutive pieces share ``2 * margin`` characters (``margin``: :data:`PIECE_MARGIN`, at most a
    quarter of a piece). Around the middle of the shared stretch, each piece is at least ``margin``
    characters from its own cut edge, where a tokenizer's context (a normalizer's, a pre-tokenizer's
    word, a BPE merge or a Unigram lattice) reaches past the edge; the pieces are joined at a token
    there only when both give the same tokens (ids and ranges) over the middle half of the margin, so
    each side's tokens come from where it agrees with the other. The special tokens the tokenizer adds
    (those at either end, marked special, with the empty range ``(0, 0)``) are taken from the first
    piece (leading) and the last (trailing). Where two pieces do not agree (a single "word" longer than
    the margin, such as a run of whitespace that byte-level BPE makes one token), the whole text is
    tokenized in one call instead: the result is then exact, its memory that of one call.
    ``tests/test_document_bounds.py`` checks the joined tokens equal one call's on WordPiece,
    SentencePiece-Unigram and byte-level BPE tokenizers.

    Returns:
        The :data:`Encoded` arrays of ``text`` (offsets into ``text``).
    """
    backend = rust_backend(tokenizer) if backend is None else backend
    joined = joined_pieces(tokenizer, backend, text, piece_chars) if len(text) > piece_chars else None
    return _one_call(tokenizer, backend, [text])[0] if joined is None else joined


def joined_pieces(tokenizer: Any, backend: Any | None, text: str, piece_chars: int) -> Encoded | None:
    """The joined pieces of :func:`encode_in_pieces`, or ``None`` where two pieces do not agree (or
    ``piece_chars`` is under 16)."""
    margin = min(PIECE_MARGIN, piece_chars // 4)
    if margin < 4:
        return None
    kept: list[Encoded] = []
    lead: Encoded | None = None
    left: Encoded | None = None
    start = 0
    while True:
        end = min(len(text), start + piece_chars)
        ids, offsets, special = _one_call(tokenizer, backend, [text[start:end]])[0]
        n_lead, n_trail = _added_specials(offsets, special)
        n = len(ids)
        if lead is None:
            lead = (ids[:n_lead], offsets[:n_lead], special[:n_lead])
        body = (ids[n_lead : n - n_trail], offsets[n_lead : n - n_trail] + start, special[n_lead : n - n_trail])
        if left is None:
            right = body
        else:
            cut = _agreed_cut(left, body, start + margin, margin // 2)
            if cut is None:
                return None
            kept.append(_rows(left, 0, cut[0]))
            right = _rows(body, cut[1], len(body[0]))
        if end == len(text):
            trail = (ids[n - n_trail :], offsets[n - n_trail :], special[n - n_trail :])
            parts = [lead, *kept, right, trail]
            return (
                np.concatenate([p[0] for p in parts]),
                np.concatenate([p[1] for p in parts]).reshape(-1, 2),
                np.concatenate([p[2] for p in parts]),
            )
        left = right
        start = end - 2 * margin


def _rows(encoded: Encoded, lo: int, hi: int) -> Encoded:
    return encoded[0][lo:hi], encoded[1][lo:hi], encoded[2][lo:hi]


def _added_specials(offsets: np.ndarray, special: np.ndarray) -> tuple[int, int]:
    """How many special tokens the tokenizer added before and after one input's text: the runs at
    either end marked special with the empty range ``(0, 0)`` (a special token written in the text has
    its own range)."""
    added = special & (offsets[:, 0] == 0) & (offsets[:, 1] == 0)
    n = len(added)
    lead = n if added.all() else int(np.argmin(added))
    trail = 0 if lead == n else int(np.argmin(added[::-1]))
    return lead, trail


def _agreed_cut(left: Encoded, right: Encoded, centre: int, half: int) -> tuple[int, int] | None:
    """Where to join two overlapping pieces' tokens (offsets into the whole text): ``(k, m)`` such that
    ``left[:k] + right[m:]`` is the joined sequence, or ``None`` when they disagree near ``centre``.

    Both pieces' tokens overlapping ``[centre - half, centre + half)`` must be the same run of tokens
    (ids and ranges); the join is at the middle one. No token there in either piece (characters the
    tokenizer drops, such as whitespace for WordPiece): the join is at the stretch.
    """
    lo, hi = centre - half, centre + half
    sel = []
    for _ids, offsets, _special in (left, right):
        inside = np.flatnonzero((offsets[:, 1] > lo) & (offsets[:, 0] < hi))
        if len(inside) and inside[-1] - inside[0] + 1 != len(inside):
            return None  # not one run: ranges out of order
        sel.append(inside)
    (li, ri), (lids, loffs, _), (rids, roffs, _) = sel, left, right
    if len(li) != len(ri):
        return None
    if not len(li):
        return int(np.count_nonzero(loffs[:, 0] < lo)), int(np.count_nonzero(roffs[:, 0] < lo))
    if not (np.array_equal(lids[li], rids[ri]) and np.array_equal(loffs[li], roffs[ri])):
        return None
    mid = len(li) // 2
    return int(li[mid]), int(ri[mid])


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
