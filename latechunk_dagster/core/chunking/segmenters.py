"""Sentence segmenters: where sentences start in a text, as code-point offsets.

Two segmenters are selectable by name (the ``segmenter`` field of the token-budget
strategies):

- ``"sentencex"`` (the default): Wikimedia's rule-based segmenter, compiled from Rust,
  linear in the text, works offline. Chosen by measurement (``bench/segmenters.py``): on
  the hand-written boundary set ``tests/data/sentence_boundaries.json`` it scored 71/77
  against pySBD's 70/77, and on the demo corpus it segments about 23M characters/s
  against pySBD's 0.13M (about 180x), blingfire 3.6M (66/77), nupunkt 7.0M (62/77),
  syntok 0.34M (66/77). It splits at blank lines (paragraph breaks) and not at single
  line breaks, which suits wrapped prose.
- ``"pysbd"``: pySBD's "Golden Rules" segmenter, the former default. Pure Python; it
  splits at every line break (``clean=False``) and backtracks exponentially on some
  inputs (``...[484 216 622 139 651 592 379 228 242 355]``: minutes), which the
  chunker's per-document time bound turns into a rejection of that document alone.

Both report code-point offsets into the Python ``str`` they were given.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

#: Default segmenter of the token-budget strategies.
DEFAULT_SEGMENTER = "sentencex"

#: Languages with their own rules in sentencex 1.0.32 (``src/languages/*.rs`` of
#: wikimedia/sentencex), plus ``zh`` (its generic rules split at 。！？; checked by the
#: ``cjk`` cases of ``tests/data/sentence_boundaries.json``). sentencex silently falls back
#: to generic rules for any other code, so we refuse those instead of guessing.
SENTENCEX_LANGUAGES = frozenset(
    "am ar bg bn ca da de el en es fi fr gu hi hy it ja kk kn ml mr my nl pa pl pt ru sk ta te uk zh".split()
)

#: pySBD 0.3.4's languages (``pysbd.languages.LANGUAGE_CODES``); it raises on any other code.
PYSBD_LANGUAGES = frozenset("am ar bg da de el en es fa fr hi hy it ja kk mr my nl pl ru sk ur zh".split())

#: Segmenter name -> the language codes it supports.
SEGMENTER_LANGUAGES: dict[str, frozenset[str]] = {"sentencex": SENTENCEX_LANGUAGES, "pysbd": PYSBD_LANGUAGES}


def check_segmenter(segmenter: str, language: str) -> None:
    """Raise ``ValueError`` unless ``segmenter`` is known and supports ``language``.

    The message names the value given and the supported ones, e.g.
    ``language='xx' is not supported by the sentence segmenter 'sentencex'; supported: am, ar, ...``.
    """
    langs = SEGMENTER_LANGUAGES.get(segmenter)
    if langs is None:
        raise ValueError(f"segmenter={segmenter!r} is unknown; supported: {', '.join(sorted(SEGMENTER_LANGUAGES))}")
    if language not in langs:
        raise ValueError(
            f"language={language!r} is not supported by the sentence segmenter {segmenter!r}; "
            f"supported: {', '.join(sorted(langs))}"
        )


@lru_cache(maxsize=16)
def _pysbd(language: str) -> Any:
    import pysbd

    return pysbd.Segmenter(language=language, clean=False, char_span=True)


def _starts_pysbd(text: str, language: str) -> list[int]:
    return [piece.start for piece in _pysbd(language).segment(text)]


def _starts_sentencex(text: str, language: str) -> list[int]:
    from sentencex import get_sentence_boundaries

    return [b["start_index"] for b in get_sentence_boundaries(language, text) if not b["is_paragraph_break"]]


_STARTS: dict[str, Callable[[str, str], list[int]]] = {"sentencex": _starts_sentencex, "pysbd": _starts_pysbd}


def sentence_starts(text: str, language: str = "en", base: int = 0, segmenter: str = DEFAULT_SEGMENTER) -> list[int]:
    """Character offsets (into ``text``, plus ``base``) where sentences start.

    Args:
        text: any ``str``; offsets are code points.
        language: a code the segmenter supports (see :data:`SEGMENTER_LANGUAGES`).
        base: added to every offset (for a slice of a larger text).
        segmenter: ``"sentencex"`` (default) or ``"pysbd"``.

    Returns:
        Strictly increasing ``list[int]``; offsets a segmenter reports out of order are dropped.

    Raises:
        ValueError: unknown segmenter or unsupported language.
    """
    check_segmenter(segmenter, language)
    starts: list[int] = []
    for s in _STARTS[segmenter](text, language):
        s += base
        if not starts or s > starts[-1]:
            starts.append(s)
    return starts


#: Segmenter name -> the distribution that implements it (its version counts in ``vector_config``).
SEGMENTER_PACKAGES: dict[str, str] = {"sentencex": "sentencex", "pysbd": "pysbd"}


@cache
def segmenter_version(segmenter: str) -> str:
    """The installed version of the distribution behind ``segmenter`` (``"sentencex"`` ->
    ``"1.0.32"``), read from its package metadata; ``"unknown"`` when it is not installed. A new
    version may place sentence boundaries elsewhere, so it counts in ``vector_config`` (issue 36)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(SEGMENTER_PACKAGES.get(segmenter, segmenter))
    except PackageNotFoundError:
        return "unknown"
