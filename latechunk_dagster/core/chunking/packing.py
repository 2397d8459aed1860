"""Packing a document's units into chunks a reader would draw (issue 46), shared by every boundary strategy.

The units are what a strategy packs (sentences, or whole blocks), read from the document's Markdown
structure (:mod:`~latechunk_dagster.core.chunking.structure`):

- a heading is never a chunk's last unit while its section follows: it is glued to the unit after it
  (and a heading line is never cut, nor is a ``1.3.`` in it a sentence end);
- a code block, a table and a list item are one unit each when they fit (a code block too long is cut
  between lines, a table between rows, a list between items, an item between sentences);
- a unit still too long is cut between words (:func:`~latechunk_dagster.core.chunking.words.split_at_words`);
- a chunk under the minimum, or holding no letter or digit, joins a neighbour of the same section.

Every chunk carries the heading path of its start (``()`` before the first heading); a chunk that
starts with headings carries the path of the text after them (``# Spec`` then ``## 1.3. Terms``:
``("Spec", "1.3. Terms")``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from latechunk_dagster.core.chunking.base import Span, segment_of_each_token, segment_of_starts, spans_from_segments
from latechunk_dagster.core.chunking.segmenters import sentence_starts
from latechunk_dagster.core.chunking.structure import Block, drop_number_ends, heading_paths, markdown_blocks
from latechunk_dagster.core.chunking.words import split_at_words, token_features
from latechunk_dagster.core.tokenization import Tokenization, bom_length

#: What an oversized unit of each kind is cut into (None: between words).
_CHILD = {"code": "line", "table": "line", "list": "item", "paragraph": "sentence", "other": "sentence"}
_CHILD["item"] = "sentence"


@dataclass(slots=True)
class Unit:
    """A run of tokens the packer keeps whole when it fits.

    Attributes:
        span: its tokens (``headings``: the path of its start).
        kind: ``"sentence"``, ``"line"``, ``"item"``, or a :class:`Block` kind.
        region: its characters ``(start, end)``; ``body`` is where its text starts after glued headings.
        parts: where a list, table or code block may be cut (character offsets).
        sections: the sections (heading indices, -1 before the first) of its first and last character.
        word_cut: it ends inside a word (a piece of a word longer than the budget).
    """

    span: Span
    kind: str
    region: tuple[int, int]
    body: int
    parts: tuple[int, ...]
    sections: tuple[int, int]
    word_cut: bool = False


@dataclass(frozen=True)
class Packer:
    """One document's packing: its text, tokens, budget and segmenter (see the module docstring).

    Attributes:
        min_tokens: chunks under this many tokens join a neighbour of the same section when the
            merge fits the budget; a chunk without a letter or digit joins one whatever its size.
    """

    text: str
    tokens: Tokenization
    max_tokens: int
    min_tokens: int
    language: str
    segmenter: str

    def spans(self, by: str, within_sections: bool) -> list[Span]:
        """The document's chunks: ``by`` ``"sentences"`` packs sentences (and whole blocks that are not
        prose), ``"blocks"`` packs whole blocks; ``within_sections`` never packs two sections together."""
        blocks = markdown_blocks(self.text)
        heads = [b for b in blocks if b.kind == "heading"]
        self_paths = heading_paths(heads)
        head_starts = [h.start for h in heads]
        units = self._top_units(blocks, by)
        if not units:
            return [Span(0, len(self.tokens))]
        starts = [u[0] for u in units]
        seg = segment_of_each_token(self.tokens, starts[1:])
        built: list[Unit] = []
        for s in spans_from_segments(seg):
            j = int(seg[s.start])
            start, kind, parts = units[j]
            region = (0 if j == 0 else start, starts[j + 1] if j + 1 < len(starts) else len(self.text))
            sec = bisect_right(head_starts, region[0]) - 1
            path = self_paths[sec] if sec >= 0 else ()
            built.append(Unit(Span(s.start, s.end, path), kind, region, region[0], parts, (sec, sec)))
        chunks = self._pack(_glue_headings(built), within_sections)
        return [Span(u.span.start, u.span.end, u.span.headings, u.word_cut) for u in self._merge_small(chunks)]

    def _top_units(self, blocks: list[Block], by: str) -> list[tuple[int, str, tuple[int, ...]]]:
        """``(char start, kind, parts)`` of each top-level unit, in order."""
        out: list[tuple[int, str, tuple[int, ...]]] = []
        sents = self.sentences if by == "sentences" and blocks else []
        for b in blocks:
            if by == "sentences" and b.kind in ("paragraph", "other"):
                inside = sents[bisect_right(sents, b.start) : bisect_right(sents, b.end - 1)]
                out.extend((s, "sentence", ()) for s in [b.start, *drop_number_ends(self.text, inside, b.start)])
            elif by == "sentences" and b.kind == "list":
                out.extend((s, "item", ()) for s in (b.start, *b.parts))
            else:
                out.append((b.start, b.kind, b.parts))
        return out

    def _pack(self, units: list[Unit], within_sections: bool) -> list[Unit]:
        """Greedy packing; a unit over the budget becomes the chunks of its own parts (never merged here)."""
        out: list[Unit] = []
        first: Unit | None = None  # the current chunk runs from first to last (joined once, when it closes)
        last: Unit | None = None
        budget = self.max_tokens
        for u in units:
            if first is not None and last is not None:
                fits = u.span.end - first.span.start <= budget and len(u.span) <= budget
                if fits and not (within_sections and u.sections[0] != last.sections[1]):
                    last = u
                    continue
                out.append(first if first is last else _joined(first, last))
                first = last = None
            if len(u.span) > budget:
                # a word piece over the budget holds headings that fill it: it stays as it is
                out.extend([u] if u.kind == "word" else self._pack(self._split(u), True))
            else:
                first = last = u
        if first is not None and last is not None:
            out.append(first if first is last else _joined(first, last))
        return out

    def _split(self, u: Unit) -> list[Unit]:
        """The parts of an oversized unit (lines, rows, items, sentences), or its pieces cut between words."""
        child = _CHILD.get(u.kind)
        a, b = u.region
        if child == "sentence":
            sents = self.sentences
            cuts = drop_number_ends(self.text, sents[bisect_right(sents, u.body) : bisect_left(sents, b)], u.body)
        else:
            cuts = [p for p in u.parts if u.body < p < b] if child else []
        pieces = _cut(self.tokens.offset_arrays()[0], u.span, cuts) if cuts else []
        if len(pieces) <= 1:
            first = u.span.start
            if u.body > a:  # glued headings: never cut in or right after them
                starts = self.tokens.offset_arrays()[0][u.span.start : u.span.end]
                after = np.flatnonzero(starts >= u.body)
                first = u.span.start + int(after[0]) if len(after) else u.span.end
            words = split_at_words(self.features[0], u.span, self.max_tokens, first)
            return [
                Unit(w, "word", u.region, u.body, (), u.sections, w.word_cut or (k == len(words) - 1 and u.word_cut))
                for k, w in enumerate(words)
            ]
        out: list[Unit] = []
        for span, j in pieces:
            lo = a if j == 0 else cuts[j - 1]
            hi = cuts[j] if j < len(cuts) else b
            out.append(Unit(span, child or "word", (lo, hi), max(lo, u.body), (), u.sections))
        return out

    def _merge_small(self, chunks: list[Unit]) -> list[Unit]:
        """Chunks under ``min_tokens`` join the previous (else the next) chunk of their section when the
        merge fits the budget; a chunk without a letter or digit then joins its neighbour whatever the
        section or size (the previous one; the next one at a document's start)."""
        words_before = self.features[1]
        ends = np.fromiter(
            (x for c in chunks for x in (c.span.start, c.span.end)), dtype=np.int64, count=2 * len(chunks)
        )
        bare = (words_before[ends[1::2]] == words_before[ends[0::2]]).tolist()
        if not any(bare) and all(len(c.span) >= self.min_tokens for c in chunks):
            return chunks
        out: list[Unit] = []
        out_bare: list[bool] = []
        for c, b in zip(chunks, bare):
            low = self.min_tokens
            small = b or len(c.span) < low or bool(out and (out_bare[-1] or len(out[-1].span) < low))
            if out and small and _fits(out[-1], c, self.max_tokens):
                out[-1] = _joined(out[-1], c)
                out_bare[-1] = out_bare[-1] and b
            else:
                out.append(c)
                out_bare.append(b)
        final: list[Unit] = []
        lead: Unit | None = None  # bare chunks at the start, waiting for the first chunk with a word
        for c, b in zip(out, out_bare):
            if b and final:
                final[-1] = _joined(final[-1], c)
            elif b:
                lead = c if lead is None else _joined(lead, c)
            else:
                final.append(c if lead is None else _joined(lead, c))
                lead = None
        if lead is not None:  # no chunk has a word: keep them as one
            final.append(lead)
        return final

    @cached_property
    def sentences(self) -> list[int]:
        """Where the document's sentences start (the segmenter on the whole text, once; a leading BOM is
        not text: pySBD would split ``"\ufeffMr."`` off)."""
        skip = bom_length(self.text)
        return sentence_starts(self.text[skip:], self.language, base=skip, segmenter=self.segmenter)

    @cached_property
    def features(self) -> tuple[np.ndarray, np.ndarray]:
        """The rank of a cut before each token (:func:`~latechunk_dagster.core.chunking.words.token_features`),
        and how many tokens before each position start with a letter or digit (int ``[n + 1]``)."""
        ranks, wordlike = token_features(self.text, self.tokens.offset_arrays()[0])
        return ranks, np.concatenate(([0], np.cumsum(wordlike)))


def _fits(a: Unit, b: Unit, max_tokens: int) -> bool:
    """``a`` and the next chunk ``b`` may merge: one section where they meet, within the budget."""
    return a.sections[1] == b.sections[0] and b.span.end - a.span.start <= max_tokens


def _joined(a: Unit, b: Unit) -> Unit:
    """``a`` and the unit after it as one (``a``'s kind, headings and start; ``b``'s end)."""
    span = Span(a.span.start, b.span.end, a.span.headings)
    sections = (a.sections[0], b.sections[1])
    return Unit(span, a.kind, (a.region[0], b.region[1]), a.body, a.parts + b.parts, sections, b.word_cut)


def _glue_headings(units: list[Unit]) -> list[Unit]:
    """Each heading unit joined to the unit after it, whose kind, parts and heading path it takes (a run
    of headings with no text between them joins the first text after them, and their chunk carries
    the path of that text's section); a heading with nothing after it stays alone."""
    out: list[Unit] = []
    pending: Unit | None = None
    for u in units:
        if pending is not None:
            span = Span(pending.span.start, u.span.end, u.span.headings)  # the path of its text
            sections = (pending.sections[0], u.sections[1])
            u = Unit(span, u.kind, (pending.region[0], u.region[1]), u.body, u.parts, sections, u.word_cut)
            pending = None
        if u.kind == "heading":
            pending = u
        else:
            out.append(u)
    if pending is not None:
        out.append(pending)
    return out


def _cut(starts: np.ndarray, span: Span, cuts: list[int]) -> list[tuple[Span, int]]:
    """Tokens of ``span`` (the document's token ``starts``) cut at characters ``cuts`` (contract section 2);
    each piece with its segment index."""
    seg = segment_of_starts(starts[span.start : span.end], cuts)
    pieces = spans_from_segments(seg)
    return [(Span(span.start + p.start, span.start + p.end, span.headings), int(seg[p.start])) for p in pieces]
