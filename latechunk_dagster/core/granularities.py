"""Several chunkings of one encoder pass: granularities, their shared atoms, and parent links.

A late chunk's vector is the head applied to the mean of the token states in its span, so every
chunking of a document can be pooled from the same states: only the spans differ. Each
granularity (a named strategy) cuts the document into spans that tile its tokens; the *atoms*
are the common refinement of all of them (the token ranges between any two consecutive
boundaries of any granularity). The states are summed once per atom (on the host, or in the
engine on the span path) and each span's sum is the float64 sum of its atoms' sums
(:func:`granularity_means`). With one granularity the atoms are its spans and the sums are the
very same numbers as before.

**Parents (small-to-big).** Granularities are listed finest first. Each chunk of a granularity
records its *parent*: the chunk of the next granularity in the list that contains it. A chunk
that straddles a boundary of the next granularity belongs to the chunk holding most of its
tokens (the earlier one on a tie) (:func:`parent_indices`). The last granularity has no parents.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from latechunk_dagster.core.chunking.base import ChunkingStrategy, Span
from latechunk_dagster.core.chunking.fixed import FixedTokens

#: What a granularity name may be: it becomes part of a table name and of chunk ids.
GRANULARITY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,62}")

#: The name of the one granularity of a single-strategy call.
SINGLE = ""


@dataclass(frozen=True, eq=False)
class Granularities(Mapping[str, ChunkingStrategy]):
    """The checked granularities of a call: named strategies, finest first; built once at an edge.

    The one value the chunker and the pipeline pass around in place of the old
    ``ChunkingStrategy | Mapping[str, ChunkingStrategy]`` union: build it with :meth:`of` where the
    caller's strategy enters (run config, component YAML, operator, the public API) and pass it on;
    every consumer reads :attr:`single`, :attr:`names`, :meth:`parent` instead of re-checking.
    :meth:`of` also takes a ``Granularities`` (returned as is), so an edge may be crossed twice.

    Example::

        g = Granularities.of({"sentence": Sentences(), "paragraph": Paragraphs()})
        g.names                    # ('sentence', 'paragraph')
        g.parent("sentence")       # 'paragraph' (the next, coarser granularity)
        Granularities.of(FixedTokens(64)).single   # True: one strategy, named SINGLE ("")

    It is a read-only ``Mapping`` of name to strategy (``g["sentence"]``, ``g.items()``, equal to
    a dict of the same pairs), so code written for ``{name: strategy}`` reads it as it is.

    Attributes:
        pairs: ``(name, strategy)`` pairs in order, finest first. A single strategy is the one pair
            ``(SINGLE, strategy)``, :attr:`single` true: its results are plain ``ChunkedDocument``s,
            never wrapped in ``{SINGLE: ...}``.
    """

    pairs: tuple[tuple[str, ChunkingStrategy], ...]

    @classmethod
    def of(cls, strategies: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy]) -> Granularities:
        """The checked value of a strategy, a ``{name: strategy}`` mapping, or a ``Granularities``.

        Args:
            strategies: one strategy (the single granularity :data:`SINGLE`), or a mapping of names
                (:data:`GRANULARITY_NAME`: letters, digits, ``_``; at most 63) to strategies, in order
                finest first (the parent of a chunk is in the next one).

        Raises:
            TypeError: not a strategy nor a mapping of them (naming the bad entry).
            ValueError: an empty mapping, or a name that is not a :data:`GRANULARITY_NAME`.
        """
        if isinstance(strategies, Granularities):
            return strategies
        if isinstance(strategies, ChunkingStrategy):
            return cls(((SINGLE, strategies),))
        if not isinstance(strategies, Mapping):
            raise TypeError(
                f"strategy must be a ChunkingStrategy (e.g. FixedTokens(64)) or a mapping of them, got {strategies!r}"
            )
        if not strategies:
            raise ValueError("no granularities given: pass at least one {name: strategy}")
        for name, strategy in strategies.items():
            if not isinstance(name, str) or not GRANULARITY_NAME.fullmatch(name):
                raise ValueError(
                    f"granularity name {name!r} must be 1-63 letters, digits or '_' (not first): it names a table"
                )
            if not isinstance(strategy, ChunkingStrategy):
                raise TypeError(f"granularity {name!r}: expected a ChunkingStrategy, got {strategy!r}")
        return cls(tuple(strategies.items()))

    @property
    def single(self) -> bool:
        """True for a single-strategy call (one granularity named :data:`SINGLE`)."""
        return len(self.pairs) == 1 and self.pairs[0][0] == SINGLE

    @property
    def names(self) -> tuple[str, ...]:
        """The granularity names, finest first (``("",)`` for a single strategy)."""
        return tuple(name for name, _ in self.pairs)

    @property
    def strategy(self) -> ChunkingStrategy:
        """The strategy of a one-granularity value.

        Raises:
            TypeError: there are several granularities (read :meth:`as_dict`).
        """
        if len(self.pairs) != 1:
            raise TypeError(f"this batch has {len(self.pairs)} granularities: read .strategies")
        return self.pairs[0][1]

    @property
    def native_strategy(self) -> FixedTokens | None:
        """The ``FixedTokens`` strategy of a one-granularity value: what an engine's native path
        pools (``None`` for several granularities or another strategy)."""
        if len(self.pairs) != 1:
            return None
        only = self.pairs[0][1]
        return only if isinstance(only, FixedTokens) else None

    def parent(self, name: str) -> str | None:
        """The granularity after ``name`` (its chunks are the parents of ``name``'s), ``None`` for the last.

        Raises:
            KeyError: ``name`` is not one of :attr:`names`.
        """
        names = self.names
        n = names.index(name) if name in names else -1
        if n < 0:
            raise KeyError(f"no granularity {name!r} among {list(names)}")
        return names[n + 1] if n + 1 < len(names) else None

    def as_dict(self) -> dict[str, ChunkingStrategy]:
        """``{name: strategy}``, finest first (a new dict: the caller may change it)."""
        return dict(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __getitem__(self, name: str) -> ChunkingStrategy:
        for n, strategy in self.pairs:
            if n == name:
                return strategy
        raise KeyError(name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Granularities):
            return self.pairs == other.pairs
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self.names)


def check_granularities(
    strategies: Granularities | ChunkingStrategy | Mapping[str, ChunkingStrategy],
) -> dict[str, ChunkingStrategy]:
    """The granularities of a call as ``{name: strategy}``, finest first: :meth:`Granularities.of`
    as a dict (kept for callers of the union; new code holds the :class:`Granularities` value).

    Raises:
        TypeError, ValueError: as :meth:`Granularities.of`.
    """
    return Granularities.of(strategies).as_dict()


@dataclass(frozen=True)
class DocumentSpans:
    """One document's spans of every granularity, and the atoms they are pooled from.

    Attributes:
        spans: per granularity, spans tiling ``[0, n_tokens)`` (what the chunks own).
        atoms: the pooled token ranges, in order, tiling ``[prompt, n_tokens)``: the common
            refinement of every granularity's pooled spans (the document prompt left out where the
            model's Pooling has ``include_prompt=false``).
        first_atom: per granularity, int64 ``[n_spans]``: the index of each span's first atom
            (the indices :func:`numpy.add.reduceat` takes).
        lengths: per granularity, float64 ``[n_spans]``: the tokens each span's mean divides by.
    """

    spans: dict[str, list[Span]]
    atoms: list[Span]
    first_atom: dict[str, np.ndarray]
    lengths: dict[str, np.ndarray]

    @property
    def single(self) -> list[Span]:
        """The spans of a single-granularity document."""
        [spans] = self.spans.values()
        return spans


def document_spans(spans: Mapping[str, Sequence[Span]], prompt_tokens: int = 0) -> DocumentSpans:
    """The :class:`DocumentSpans` of one document.

    Args:
        spans: per granularity, spans tiling ``[0, n_tokens)`` in order, each granularity's first
            span ending after ``prompt_tokens`` (the chunker checks both).
        prompt_tokens: leading tokens left out of every mean (``include_prompt=false``), else 0.

    Returns:
        The atoms: every start of every granularity's pooled spans (the first moved to
        ``prompt_tokens``), sorted, made into consecutive ranges.
    """
    cuts = sorted({max(s.start, prompt_tokens) for g in spans.values() for s in g})
    n_tokens = next(iter(spans.values()))[-1].end
    edges = np.array([*cuts, n_tokens], dtype=np.int64)
    atoms = [Span(a, b) for a, b in zip(edges[:-1].tolist(), edges[1:].tolist())]
    first: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    for name, g in spans.items():
        starts = np.fromiter((max(s.start, prompt_tokens) for s in g), dtype=np.int64, count=len(g))
        ends = np.fromiter((s.end for s in g), dtype=np.int64, count=len(g))
        first[name] = np.searchsorted(edges, starts)
        lengths[name] = (ends - starts).astype(np.float64)
    return DocumentSpans({k: list(v) for k, v in spans.items()}, atoms, first, lengths)


def granularity_means(atom_sums: np.ndarray, doc: DocumentSpans) -> dict[str, np.ndarray]:
    """Each granularity's span means from the float64 sums of the document's atoms.

    Args:
        atom_sums: float64 ``[len(doc.atoms), dim]``, the sum of the token states of each atom.
        doc: the document's :class:`DocumentSpans`.

    Returns:
        Per granularity, float64 ``[n_spans, dim]``: each span's atoms added in float64 (one
        :func:`numpy.add.reduceat`), divided by its length (contract section 3).
    """
    return {
        name: np.add.reduceat(atom_sums, doc.first_atom[name], axis=0) / doc.lengths[name][:, None]
        for name in doc.spans
    }


def parent_indices(fine: Sequence[Span], coarse: Sequence[Span]) -> list[int]:
    """The index of each fine span's parent among the coarse spans (both tiling the same tokens).

    The parent holds the most of the fine span's tokens; on a tie, the earlier one. A fine span
    inside one coarse span (the usual case) has that one.

    Returns:
        ``list[int]`` of ``len(fine)`` indices into ``coarse``.
    """
    c_start = np.fromiter((s.start for s in coarse), dtype=np.int64, count=len(coarse))
    c_end = np.fromiter((s.end for s in coarse), dtype=np.int64, count=len(coarse))
    out: list[int] = []
    for s in fine:
        lo = int(np.searchsorted(c_end, s.start, side="right"))  # first coarse span ending after s.start
        hi = int(np.searchsorted(c_start, s.end, side="left"))  # past the last coarse span starting before s.end
        overlap = np.minimum(c_end[lo:hi], s.end) - np.maximum(c_start[lo:hi], s.start)
        out.append(lo + int(np.argmax(overlap)))  # argmax: the first of equal maxima
    return out
