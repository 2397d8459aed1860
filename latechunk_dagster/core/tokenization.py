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

from dataclasses import dataclass
from typing import Any

from latechunk_dagster.core.errors import (
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
    skip = bom_length(text)
    enc = tokenizer(
        prefix + text[skip:],
        add_special_tokens=True,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
        truncation=False,
        padding=False,
        verbose=False,
    )
    ids: list[int] = list(enc["input_ids"])
    special = [bool(s) for s in enc["special_tokens_mask"]]
    raw = enc["offset_mapping"]
    if len(raw) != len(ids):
        raise OffsetsError(index, doc_id, "tokenizer returned no offset for some tokens")
    n_pre = len(prefix)
    offsets: list[tuple[int, int] | None] = []
    n_prefix = 0
    last_start = 0
    for (start, end), is_special in zip(raw, special):
        if is_special or end <= start:
            offsets.append(None)
            continue
        if end <= n_pre:
            offsets.append(None)
            n_prefix += 1
            continue
        if start < n_pre:
            raise OffsetsError(index, doc_id, f"a token spans the prefix {prefix!r} and the text")
        start, end = start - n_pre + skip, end - n_pre + skip
        if start < last_start or end > len(text):
            raise OffsetsError(index, doc_id, f"token offsets out of order or outside the text at ({start}, {end})")
        last_start = start
        offsets.append((start, end))
    if all(o is None for o in offsets):
        raise NoContentTokensError(index, doc_id, "the tokenizer produced only special tokens")
    return Tokenization(token_ids=ids, offsets=offsets, special=special, n_prefix=n_prefix)
