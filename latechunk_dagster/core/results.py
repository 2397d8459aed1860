"""Plain data classes returned by the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document.

    Attributes:
        index: position of the chunk in its document (0-based).
        token_range: half-open ``(start, end)`` into the document's ``token_ids``.
        char_range: half-open ``(start, end)`` in code points into the document text,
            ``None`` for a chunk of special / prefix tokens only.
        text: ``document[char_start:char_end]``, ``None`` when ``char_range`` is ``None``.
        headings: heading path (``MarkdownSections``), outermost first; empty otherwise.
    """

    index: int
    token_range: tuple[int, int]
    char_range: tuple[int, int] | None
    text: str | None
    headings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ChunkedDocument:
    """The late-chunked form of one document.

    Attributes:
        index: position in the ``chunk()`` call; ``doc_id``: the caller's id.
        chunks: the chunks, in order, tiling ``[0, len(token_ids))``.
        vectors: ``np.ndarray`` float32, shape ``[len(chunks), embedding_dim]``.
        token_ids: the one tokenization that was pooled (special and prefix tokens included).
        path: ``"native"`` (vLLM reduced the spans in the worker) or ``"token_states"``.
        windows: number of encoder inputs (1 unless the document is longer than the model).
        opt_ins: model refusals the caller overrode (``"causal"``, ``"pooling=cls"``).
    """

    index: int
    doc_id: str
    chunks: list[Chunk]
    vectors: np.ndarray
    token_ids: list[int]
    path: str
    windows: int = 1
    opt_ins: tuple[str, ...] = ()
