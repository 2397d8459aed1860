"""The one tokenization pass of a document (contract section 1).

Token ids and character offsets come from a single call of the model's *fast*
tokenizer (Hugging Face ``tokenizers``), with the model's special tokens and the
instruction prefix tokenized in the same pass. Offsets are Python ``str``
indices (code points) into the document's own text; special tokens and prefix
tokens have no source range (``None``).

A leading byte order mark (U+FEFF) is not part of the text, as with Python's
``utf-8-sig`` codec: it is not tokenized (some tokenizers drop it, byte-level and
SentencePiece ones would encode it), and offsets still index the text *as passed*, so a
document that starts with a BOM has its first token at offset 1. Every strategy follows
the same rule (:func:`bom_length`). A U+FEFF anywhere else is text (a zero-width no-break space).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from latechunk_dagster.core.encoding import foreign_encoding
from latechunk_dagster.core.errors import (
    DocumentError,
    EmptyDocumentError,
    InvalidQueryError,
    InvalidUnicodeError,
    NoContentTokensError,
    OffsetsError,
)
from latechunk_dagster.core.tokenizer_call import Encoded, encodings

#: The byte order mark as a code point (what ``"utf-8"`` decoding leaves of ``EF BB BF``).
BOM = "\ufeff"


def bom_length(text: str) -> int:
    """1 when ``text`` starts with a byte order mark (U+FEFF), else 0: where the text proper starts.

    Example:
        >>> bom_length("\ufeff# Title"), bom_length("# Title")
        (1, 0)
    """
    return 1 if text.startswith(BOM) else 0


def encoder_text(prefix: str, text: str) -> str:
    """What the tokenizer (ours, or vLLM's on the native path) is given: ``prefix`` + the text without
    a leading byte order mark.

    Example:
        >>> encoder_text("passage: ", "\ufeffBerlin")
        'passage: Berlin'
    """
    return prefix + text[bom_length(text) :]


class Tokenization:
    """Token ids and per-token source ranges of one document, held in numpy arrays.

    Attributes:
        ids: int64 ``[n_tokens]``: the ids that are encoded and pooled, special tokens and
            instruction-prefix tokens included.
        special_mask: bool ``[n_tokens]``: True for the tokenizer's special tokens ([CLS], [SEP], ...).
        starts, ends: int64 ``[n_tokens]``: half-open code-point range of each token in the document
            text, ``-1`` for a token without a source range (special tokens, prefix tokens).
        n_prefix: number of instruction-prefix tokens (they follow the leading special tokens).

    The list views :attr:`token_ids` (``list[int]``), :attr:`special` (``list[bool]``) and
    :attr:`offsets` (``list[tuple[int, int] | None]``) are built from the arrays on first use and
    cached; the host path itself reads the arrays (no Python object per token).

    Build it from ``offsets`` (tuples) or from ``starts`` / ``ends``, not both; ``token_ids`` and
    ``special`` may be lists or arrays. Two tokenizations are equal when their ids, ranges, special
    marks and prefix lengths are. Treat it as read-only: the arrays are shared with slices.

    Raises:
        ValueError: at construction, neither or both of ``offsets`` and ``starts`` / ``ends``, or
            arrays of different lengths.
    """

    __slots__ = ("ids", "special_mask", "n_prefix", "_offsets", "_arrays", "_token_ids", "_special")

    def __init__(
        self,
        token_ids: Sequence[int] | np.ndarray,
        offsets: list[tuple[int, int] | None] | None = None,
        special: Sequence[bool] | np.ndarray | None = None,
        n_prefix: int = 0,
        *,
        starts: np.ndarray | None = None,
        ends: np.ndarray | None = None,
    ) -> None:
        if (offsets is None) == (starts is None or ends is None):
            raise ValueError("Tokenization needs offsets, or starts and ends, not both")
        self.ids: np.ndarray = _int64_array(token_ids)
        n = len(self.ids)
        self._token_ids: list[int] | None = token_ids if isinstance(token_ids, list) else None
        if special is None:
            self.special_mask: np.ndarray = np.zeros(n, dtype=bool)
        else:
            self.special_mask = np.asarray(special, dtype=bool).reshape(-1)
        self._special: list[bool] | None = special if isinstance(special, list) else None
        self.n_prefix = n_prefix
        self._offsets = offsets
        self._arrays = None if starts is None or ends is None else (starts, ends)
        lengths = {n, len(self.special_mask), len(offsets) if offsets is not None else len(starts)}  # type: ignore[arg-type]
        if self._arrays is not None:
            lengths.add(len(self._arrays[1]))
        if len(lengths) != 1:
            raise ValueError(f"Tokenization: ids, special marks and ranges differ in length ({sorted(lengths)})")

    @property
    def token_ids(self) -> list[int]:
        """:attr:`ids` as ``list[int]`` (built once; the engines' prompts and the results take lists)."""
        if self._token_ids is None:
            self._token_ids = self.ids.tolist()
        return self._token_ids

    @property
    def special(self) -> list[bool]:
        """:attr:`special_mask` as ``list[bool]`` (built once)."""
        if self._special is None:
            self._special = self.special_mask.tolist()
        return self._special

    @property
    def starts(self) -> np.ndarray:
        """int64 ``[n_tokens]``: first code point of each token's range, ``-1`` where unsourced."""
        return self.offset_arrays()[0]

    @property
    def ends(self) -> np.ndarray:
        """int64 ``[n_tokens]``: end (exclusive) of each token's range, ``-1`` where unsourced."""
        return self.offset_arrays()[1]

    def __len__(self) -> int:
        return len(self.ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tokenization):
            return NotImplemented
        (s1, e1), (s2, e2) = self.offset_arrays(), other.offset_arrays()
        return (
            np.array_equal(self.ids, other.ids)
            and np.array_equal(self.special_mask, other.special_mask)
            and self.n_prefix == other.n_prefix
            and np.array_equal(s1, s2)
            and np.array_equal(e1, e2)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Tokenization({len(self)} tokens, n_prefix={self.n_prefix})"

    def __getstate__(self) -> tuple:
        return (self.ids, self.special_mask, self.n_prefix, self.offset_arrays())

    def __setstate__(self, state: tuple) -> None:
        ids, special, self.n_prefix, self._arrays = state
        self.ids = _int64_array(ids)
        self.special_mask = np.asarray(special, dtype=bool)
        self._token_ids = self._special = self._offsets = None

    @property
    def offsets(self) -> list[tuple[int, int] | None]:
        """Per-token code-point ranges (``None``: no source range), built from the arrays once."""
        if self._offsets is None:
            starts, ends = self.offset_arrays()
            pairs: list[tuple[int, int] | None] = list(zip(starts.tolist(), ends.tolist()))
            for k in np.flatnonzero(starts < 0).tolist():
                pairs[k] = None
            self._offsets = pairs
        return self._offsets

    def offset_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The ranges as two int64 arrays ``(starts, ends)`` of length ``n_tokens``, ``-1`` where unsourced.

        Made by the tokenizer pass (or from ``offsets`` on first use) and cached; the strategies'
        token maps and the chunk ranges use them instead of the tuples.
        """
        if self._arrays is None:
            offsets = self._offsets  # the constructor took offsets when it took no arrays
            assert offsets is not None
            n = len(offsets)
            starts = np.fromiter((-1 if o is None else o[0] for o in offsets), dtype=np.int64, count=n)
            ends = np.fromiter((-1 if o is None else o[1] for o in offsets), dtype=np.int64, count=n)
            self._arrays = (starts, ends)
        return self._arrays

    def sourced(self) -> np.ndarray:
        """bool ``[n_tokens]``: True for tokens with a source range in the text."""
        return self.offset_arrays()[0] >= 0

    def slice(self, lo: int, hi: int) -> Tokenization:
        """Tokens ``[lo, hi)`` as a tokenization of their own (views of these arrays; ranges still
        index the whole text; its ``n_prefix`` is 0)."""
        starts, ends = self.offset_arrays()
        return Tokenization(self.ids[lo:hi], None, self.special_mask[lo:hi], starts=starts[lo:hi], ends=ends[lo:hi])


def _int64_array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    """``values`` as an int64 ``[n]`` array (no copy when it already is one)."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False).reshape(-1)
    return np.fromiter(values, dtype=np.int64, count=len(values))


#: What a byte that is not UTF-8 most likely means, by where the text came from (:func:`unicode_problem`).
FILE_HINT = "a file in Latin-1 or another legacy encoding? convert it to UTF-8"
QUERY_HINT = "typed in a terminal set to Latin-1 or another legacy encoding? send the query as UTF-8"


def unicode_problem(text: str, hint: str = FILE_HINT) -> str | None:
    """Why ``text`` cannot be encoded as UTF-8, naming the first bad character; ``None`` when it can.

    A byte that is not UTF-8, as a store reader or the command line escapes it (``surrogateescape``:
    U+DC80-U+DCFF), is named as that byte, followed by ``hint``, unless the text is UTF-16 / UTF-32
    read as UTF-8 (a byte order mark ``FF FE``...: :func:`~latechunk_dagster.core.encoding.foreign_encoding`),
    which is named instead of guessing Latin-1; any other lone surrogate (a JSON ``"\\ud800"``, half
    an emoji cut by a UTF-16 client) as a lone surrogate.

    Example:
        >>> unicode_problem("caf\\udce9", "a hint")
        'not valid UTF-8: byte 0xe9 at character 3 (a hint)'
        >>> unicode_problem("a \\ud83d"), unicode_problem("café")
        ('not valid Unicode: a lone surrogate U+D83D at character 2', None)
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        if 0xDC80 <= code <= 0xDCFF:
            encoding = foreign_encoding(text)  # UTF-16 / UTF-32 read as UTF-8: named, not guessed to be Latin-1
            if encoding is not None:
                return f"not UTF-8: {encoding.text_detail()}"
            return f"not valid UTF-8: byte 0x{code - 0xDC00:02x} at character {exc.start} ({hint})"
        return f"not valid Unicode: a lone surrogate U+{code:04X} at character {exc.start}"
    return None


def check_text(text: object, index: int, doc_id: str) -> str:
    """Return ``text`` if it can be late-chunked, else raise the error naming the document.

    Raises:
        InvalidUnicodeError: not a ``str``, not encodable as UTF-8 (lone surrogates), or UTF-16 /
            UTF-32 bytes read as UTF-8 (a NUL between its characters, which search never matches;
            :func:`~latechunk_dagster.core.encoding.foreign_encoding`).
        EmptyDocumentError: empty or whitespace-only (a leading byte order mark aside).
    """
    if not isinstance(text, str):
        raise InvalidUnicodeError(index, doc_id, f"expected str, got {type(text).__name__}")
    problem = unicode_problem(text)
    if problem:
        raise InvalidUnicodeError(index, doc_id, problem)
    encoding = foreign_encoding(text)  # valid UTF-8, but UTF-16 / UTF-32 bytes: a NUL between characters
    if encoding is not None:
        raise InvalidUnicodeError(index, doc_id, f"not UTF-8: {encoding.text_detail()}")
    if not text[bom_length(text) :].strip():
        raise EmptyDocumentError(index, doc_id, "text is empty or whitespace only")
    return text


def check_query(query: object, index: int | None = None) -> str:
    """Return ``query`` if it can be embedded as a query, else raise the error naming it.

    The same Unicode rule as a document's (:func:`check_text`), checked before the tokenizer sees
    the query (which raises a bare ``TypeError`` on a lone surrogate); and a query with no visible
    character (empty, whitespace or control characters only: it would embed as the special tokens
    alone) is refused. :meth:`~latechunk_dagster.core.chunker.LateChunker.embed_queries` also refuses
    a query the tokenizer makes no token of.

    Args:
        index: the query's position in a batch call, named in the error (``None``: a single query).

    Raises:
        InvalidQueryError: not a ``str``, not encodable as UTF-8 (a lone surrogate; the message
            names the character and its position), or without a visible character.
    """
    if not isinstance(query, str):
        raise InvalidQueryError(query, f"expected str, got {type(query).__name__}", index)
    problem = unicode_problem(query, QUERY_HINT)
    if problem:
        raise InvalidQueryError(query, problem, index)
    if not any(ch.isprintable() and not ch.isspace() for ch in query):
        raise InvalidQueryError(query, "the query is empty (only whitespace or control characters)", index)
    return query


def tokenize_document(
    tokenizer: Any, text: str, *, prefix: str = "", index: int = 0, doc_id: str = "0"
) -> Tokenization:
    """Tokenize ``prefix + text`` once, with special tokens, and map offsets to ``text``.

    A leading byte order mark of ``text`` is left out of the tokenizer input; offsets
    still index ``text`` itself (they start at 1 then).

    Args:
        tokenizer: a Hugging Face fast tokenizer (``PreTrainedTokenizerFast``).
        text: the document text (already checked by :func:`check_text`).
        prefix: instruction prefix tokenized in the same pass (e.g. ``"passage: "``).

    Returns:
        The :class:`Tokenization`; its offsets index ``text``, not ``prefix + text``.

    Raises:
        OffsetsError: offsets run backwards or outside the text. (A token that straddles the
            prefix and the text is a text token, its range clamped to start at the text.)
        NoContentTokensError: no token has a source range.
    """
    [encoded] = encodings(tokenizer, [encoder_text(prefix, text)])
    return _from_encoding(encoded, text, prefix, index, doc_id)


def tokenize_documents(
    tokenizer: Any, texts: Sequence[str], *, prefix: str = "", indices: Sequence[int], doc_ids: Sequence[str]
) -> list[Tokenization | DocumentError]:
    """Tokenize many checked documents with one batch call of the fast tokenizer.

    Each document is still tokenized exactly once (contract section 1), by the same call with
    the same arguments as :func:`tokenize_document`, so the results are identical (checked in
    ``tests/test_host_path.py``); the batch call runs the Rust tokenizer over the whole batch
    (in parallel threads unless ``TOKENIZERS_PARALLELISM`` is false; the host worker processes of
    :mod:`latechunk_dagster.pipeline.hostpool` share the cores out instead).

    Returns:
        One entry per text, in order: its :class:`Tokenization`, or the
        :class:`~latechunk_dagster.core.errors.DocumentError` that refuses it
        (``OffsetsError``, ``NoContentTokensError``).
    """
    if not texts:
        return []
    out: list[Tokenization | DocumentError] = []
    batch = encodings(tokenizer, [encoder_text(prefix, t) for t in texts])
    for k, encoded in enumerate(batch):
        try:
            out.append(_from_encoding(encoded, texts[k], prefix, indices[k], doc_ids[k]))
        except DocumentError as exc:
            out.append(exc)
    return out


def _from_encoding(
    encoded: Encoded,
    text: str,
    prefix: str,
    index: int,
    doc_id: str,
) -> Tokenization:
    """Turn one encoding (ids, code-point offsets into ``prefix + text``, special mask) into a Tokenization.

    Vectorized with numpy (the per-token Python loop was the host's largest cost); the checks and
    their first-offender messages are those of the token-by-token rule: a special token or an
    empty range has no source; a token ending inside the prefix is a prefix token; a token that
    starts inside the prefix and ends after it is a text token whose range starts where the text
    does (contract section 1); sourced starts must not decrease and ends must stay inside the text.
    """
    ids, pairs, special_arr = encoded
    n = len(ids)
    if len(pairs) != n or len(special_arr) != n:
        raise OffsetsError(index, doc_id, "tokenizer returned no offset for some tokens")
    starts, ends = pairs[:, 0], pairs[:, 1]
    n_pre = len(prefix)
    # The tokenizer saw prefix + text without a leading BOM: offsets move back by the prefix, on by the BOM.
    shift = bom_length(text) - n_pre
    unsourced = special_arr | (ends <= starts)
    in_prefix = ~unsourced & (ends <= n_pre)
    unsourced |= in_prefix
    src = np.flatnonzero(~unsourced)
    if not len(src):
        raise NoContentTokensError(index, doc_id, "the tokenizer produced only special tokens")
    # A token that starts inside the prefix and ends inside the text (byte-level BPE merges the prefix's
    # trailing space into the first word) is a text token: its range is clamped to where the text starts.
    s_src, e_src = np.maximum(starts[src], n_pre) + shift, ends[src] + shift
    bad = e_src > len(text)
    bad[0] |= s_src[0] < 0
    bad[1:] |= s_src[1:] < s_src[:-1]
    if bad.any():
        k = int(np.argmax(bad))
        raise OffsetsError(
            index, doc_id, f"token offsets out of order or outside the text at ({int(s_src[k])}, {int(e_src[k])})"
        )
    out_s = np.full(n, -1, dtype=np.int64)
    out_e = np.full(n, -1, dtype=np.int64)
    out_s[src], out_e[src] = s_src, e_src
    return Tokenization(ids, None, special_arr, int(in_prefix.sum()), starts=out_s, ends=out_e)
