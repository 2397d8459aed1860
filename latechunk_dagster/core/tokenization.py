"""The one tokenization pass of a document (SPEC section 1).

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
from dataclasses import dataclass
from typing import Any

from latechunk_dagster.core.errors import (
    DocumentError,
    EmptyDocumentError,
    InvalidUnicodeError,
    NoContentTokensError,
    OffsetsError,
)

#: The byte order mark as a code point (what ``"utf-8"`` decoding leaves of ``EF BB BF``).
BOM = "\ufeff"


def bom_length(text: str) -> int:
    """1 when ``text`` starts with a byte order mark (U+FEFF), else 0: where the text proper starts.

    Example:
        >>> bom_length("\ufeff# Title"), bom_length("# Title")
        (1, 0)
    """
    return 1 if text.startswith(BOM) else 0


@dataclass(frozen=True)
class Tokenization:
    """Token ids and per-token source ranges of one document.

    Attributes:
        token_ids: ``list[int]`` of length ``n_tokens``: the ids that are encoded and pooled,
            special tokens and instruction-prefix tokens included.
        offsets: ``list[tuple[int, int] | None]`` of length ``n_tokens``: half-open code-point
            range of each token in the document text, ``None`` for a token without a source
            range (special tokens, prefix tokens).
        special: ``list[bool]``: True for the tokenizer's special tokens ([CLS], [SEP], ...).
        n_prefix: number of instruction-prefix tokens (they follow the leading special tokens).
    """

    token_ids: list[int]
    offsets: list[tuple[int, int] | None]
    special: list[bool]
    n_prefix: int = 0

    def __len__(self) -> int:
        return len(self.token_ids)


def check_text(text: object, index: int, doc_id: str) -> str:
    """Return ``text`` if it can be late-chunked, else raise the error naming the document.

    Raises:
        InvalidUnicodeError: not a ``str`` or not encodable as UTF-8 (lone surrogates).
        EmptyDocumentError: empty or whitespace-only (a leading byte order mark aside).
    """
    if not isinstance(text, str):
        raise InvalidUnicodeError(index, doc_id, f"expected str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidUnicodeError(index, doc_id, f"not valid Unicode at code point {exc.start}: {exc.reason}") from None
    if not text[bom_length(text) :].strip():
        raise EmptyDocumentError(index, doc_id, "text is empty or whitespace only")
    return text


_ENCODE_KW: dict[str, Any] = {
    "add_special_tokens": True,
    "return_offsets_mapping": True,
    "return_special_tokens_mask": True,
    "truncation": False,
    "padding": False,
    "verbose": False,
}


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
        OffsetsError: a token straddles the prefix and the text, or offsets run backwards
            or outside the text.
        NoContentTokensError: no token has a source range.
    """
    enc = tokenizer(prefix + text[bom_length(text) :], **_ENCODE_KW)
    return _from_encoding(
        enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"], text, prefix, index, doc_id
    )


def tokenize_documents(
    tokenizer: Any, texts: Sequence[str], *, prefix: str = "", indices: Sequence[int], doc_ids: Sequence[str]
) -> list[Tokenization | DocumentError]:
    """Tokenize many checked documents with one batch call of the fast tokenizer.

    Each document is still tokenized exactly once (SPEC section 1), by the same call with
    the same arguments as :func:`tokenize_document`, so the results are identical (checked in
    ``tests/test_host_path.py``); the batch call runs the Rust tokenizer over the whole batch
    (in parallel threads where ``TOKENIZERS_PARALLELISM`` allows).

    Returns:
        One entry per text, in order: its :class:`Tokenization`, or the
        :class:`~latechunk_dagster.core.errors.DocumentError` that refuses it
        (``OffsetsError``, ``NoContentTokensError``).
    """
    if not texts:
        return []
    enc = tokenizer([prefix + t[bom_length(t) :] for t in texts], **_ENCODE_KW)
    out: list[Tokenization | DocumentError] = []
    for k, text in enumerate(texts):
        try:
            out.append(
                _from_encoding(
                    enc["input_ids"][k],
                    enc["offset_mapping"][k],
                    enc["special_tokens_mask"][k],
                    text,
                    prefix,
                    indices[k],
                    doc_ids[k],
                )
            )
        except DocumentError as exc:
            out.append(exc)
    return out


def _from_encoding(
    input_ids: Sequence[int],
    raw: Sequence[tuple[int, int]],
    special_mask: Sequence[int],
    text: str,
    prefix: str,
    index: int,
    doc_id: str,
) -> Tokenization:
    """Turn one encoding (ids, code-point offsets into ``prefix + text``, special mask) into a Tokenization."""
    ids: list[int] = list(input_ids)
    special = [bool(s) for s in special_mask]
    if len(raw) != len(ids):
        raise OffsetsError(index, doc_id, "tokenizer returned no offset for some tokens")
    n_pre = len(prefix)
    n_text = len(text)
    # The tokenizer saw prefix + text without a leading BOM: offsets move back by the prefix, on by the BOM.
    shift = bom_length(text) - n_pre
    offsets: list[tuple[int, int] | None] = []
    append = offsets.append
    n_prefix = 0
    last_start = 0
    for (start, end), is_special in zip(raw, special):
        if is_special or end <= start:
            append(None)
            continue
        if end <= n_pre:
            append(None)
            n_prefix += 1
            continue
        if start < n_pre:
            raise OffsetsError(index, doc_id, f"a token spans the prefix {prefix!r} and the text")
        if shift:
            start, end = start + shift, end + shift
        if start < last_start or end > n_text:
            raise OffsetsError(index, doc_id, f"token offsets out of order or outside the text at ({start}, {end})")
        last_start = start
        append((start, end))
    if len(offsets) == offsets.count(None):
        raise NoContentTokensError(index, doc_id, "the tokenizer produced only special tokens")
    return Tokenization(token_ids=ids, offsets=offsets, special=special, n_prefix=n_prefix)
