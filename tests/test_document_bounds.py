"""Memory and time bounded per document (issue 47 kind 4; issue 49 item 3).

- A long text is tokenized in overlapping pieces (``core.tokenizer_call.encode_in_pieces``), joined
  where two pieces agree: the ids, offsets and special marks must equal one call's on the whole text,
  for the three tokenizer kinds the package meets (WordPiece: the shipped model's; SentencePiece
  Unigram with Metaspace and byte-level BPE: the replicas of ``tests/families.py``). The reference is
  the tokenizer's own single call, which the code under test does not use for these inputs.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from latechunk_dagster.core.tokenizer_call import _one_call, encodings, joined_pieces, rust_backend
from tests.families import MULTILINGUAL, byte_bpe_tokenizer, unigram_tokenizer, wordpiece_tokenizer

#: Pieces of text the long documents are drawn from: several scripts, emoji, combining marks, a
#: special token written in the text, runs of spaces, line breaks, a long word, digits, punctuation.
FRAGMENTS = [
    *MULTILINGUAL,
    "Cafe\u0301 na\u00efve re\u0301sume\u0301 ",
    "[SEP] </s> <s> [CLS] ",
    "a   b    c ",
    "\n\n# Heading\n\n- item one\n- item two\r\n",
    "Donaudampfschifffahrtsgesellschaftskapitän ",
    "3.14159 2,718 1e-9 #42 @user https://example.org/a?b=c ",
    "👩‍👩‍👧 🏳️‍🌈 ",
    "\t\tindented\tcode(x) -> y; ",
]


def long_text(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    n = 0
    while n < chars:
        piece = rng.choice(FRAGMENTS)
        out.append(piece)
        n += len(piece)
    return "".join(out)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> dict[str, object]:
    out = {}
    for name, build in (
        ("wordpiece", lambda d: wordpiece_tokenizer(d, minilm_dir)),
        ("unigram", unigram_tokenizer),
        ("byte_bpe", byte_bpe_tokenizer),
    ):
        d = tmp_path_factory.mktemp(name)
        build(d)
        out[name] = AutoTokenizer.from_pretrained(str(d))
    return out


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "byte_bpe"])
@pytest.mark.parametrize("piece_chars", [256, 1000, 4096])
def test_pieces_join_to_one_call(tokenizers: dict[str, object], kind: str, piece_chars: int) -> None:
    tok = tokenizers[kind]
    # the Rust backend's call where it stands in for transformers' (rust_backend), transformers' own otherwise
    backend = rust_backend(tok) if piece_chars != 1000 else None
    for seed in range(3):
        text = "passage: " + long_text(seed, 20_000)
        whole = _one_call(tok, backend, [text])[0]
        joined = joined_pieces(tok, backend, text, piece_chars)
        assert joined is not None, f"{kind}: pieces of {piece_chars} did not agree on ordinary text"
        for got, want, what in zip(joined, whole, ("ids", "offsets", "special")):
            assert got.shape == want.shape, (kind, piece_chars, seed, what, got.shape, want.shape)
            assert np.array_equal(got, want), (kind, piece_chars, seed, what)


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe"])
def test_pieces_that_disagree_fall_back_to_one_call(tokenizers: dict[str, object], kind: str) -> None:
    """What cannot be cut where two pieces agree comes back from one call, not guessed: for WordPiece a
    word of 3,000 characters (one ``[UNK]`` whose range each piece sees cut), for byte-level BPE 3,000
    spaces (one token). (WordPiece drops spaces, so it joins there; BPE's merges over a run of ``x``
    repeat, so its pieces agree there: both still equal one call, asserted below.)"""
    tok = tokenizers[kind]
    word, spaces = "start " + "x" * 3000 + " end " * 300, "start" + " " * 3000 + "end " * 300
    for text in (word, spaces):
        whole = _one_call(tok, rust_backend(tok), [text])[0]
        joined = joined_pieces(tok, rust_backend(tok), text, 1000)
        if (text is word) == (kind == "wordpiece"):
            assert joined is None
        [got] = encodings(tok, [text], piece_chars=1000)
        for g, w in zip(got, whole):
            assert np.array_equal(g, w)
