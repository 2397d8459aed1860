"""Documents longer than the model: overlapping windows (contract section 5).

A document's tokens are ``header + body + footer``: ``header`` = its leading special
tokens and instruction-prefix tokens, ``footer`` = its trailing special tokens. Each
window is ``header + body[s : s + W] + footer`` with ``W = max_len - len(header) -
len(footer)``, so every window carries the model's own special tokens and the prefix.
Each body token takes its state from the window where it has the most context on
both sides; the header takes its states from the first window and the footer from
the last, so inserted window specials never reach a span.

Consecutive windows share ``overlap`` body tokens (the window start advances by ``W - overlap``);
the last window ends at the end of the body, so it may share more with the one before it. The
overlap is one number per chunker (:attr:`latechunk_dagster.LateChunker.settings`), resolved there
from :func:`default_overlap` when unset, so the number recorded in lineage is the one planned with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from latechunk_dagster.core.tokenization import Tokenization


@dataclass(frozen=True)
class WindowPlan:
    """How one document is encoded.

    Attributes:
        windows: token ids of each encoder input, each at most ``max_len`` long.
        source: int64 ``[n_tokens, 2]``: for each document token, ``(window index, position in
            that window)`` of the state it takes. ``None`` for a document
            that fits one window (then token ``i`` takes row ``i`` of window 0).
    """

    windows: list[list[int]]
    source: np.ndarray | None

    def gather(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """The document's token states from its windows' rows.

        Args:
            rows: one array ``[len(window), dim]`` per window, in order.

        Returns:
            ``[n_tokens, dim]``, same dtype: ``rows[0]`` itself (no copy) for a one-window
            document, else the rows picked by :attr:`source` (one fancy-indexing copy).
        """
        if self.source is None:
            return rows[0]
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        first = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        src = np.asarray(self.source, dtype=np.int64)  # shape: [n_tokens, 2]
        return np.concatenate(rows)[first[src[:, 0]] + src[:, 1]]

    def segments(self) -> np.ndarray:
        """Runs of document tokens that take consecutive rows of one window.

        Returns:
            int64 ``[n_runs, 4]``: ``(doc_start, doc_end, window, row_start)`` per run, in order and
            tiling ``[0, n_tokens)``: document tokens ``doc_start..doc_end-1`` take rows
            ``row_start..`` of ``window``. One run for a one-window document (``source`` ``None``);
            for a windowed one, one per change of window (the header, each window's stretch of the
            body, the footer), because :attr:`source` picks consecutive rows within a window.
        """
        if self.source is None:
            return np.array([[0, len(self.windows[0]) if self.windows else 0, 0, 0]], dtype=np.int64)
        src = np.asarray(self.source, dtype=np.int64)
        n = len(src)
        # a run breaks where the window changes or the row is not the previous one's next
        brk = np.flatnonzero((src[1:, 0] != src[:-1, 0]) | (src[1:, 1] != src[:-1, 1] + 1)) + 1
        starts = np.concatenate(([0], brk))
        ends = np.append(starts[1:], n)
        return np.stack([starts, ends, src[starts, 0], src[starts, 1]], axis=1)


def default_overlap(max_len: int) -> int:
    """Default overlap between windows: an eighth of the window length ``max_len`` (the whole encoder
    input, special and prefix tokens included), at least 1, in tokens: 32 for 256-token windows.

    Chosen by measurement (``bench/window_overlap.py``, all-MiniLM-L6-v2, 190 demo documents
    of <= 256 tokens forced into 128-token windows, compared with their single pass): the
    99th percentile of per-token cosine distance falls from 0.339 (no overlap) to 0.324 at
    16 tokens and no further with more, while the mean distance of 16-token chunks is flat
    (0.112-0.119) and rises slightly with overlap (absolute positions shift). Overlap costs
    ``W / (W - overlap)`` encoded tokens on long documents, so a small one wins.
    """
    return max(1, max_len // 8)


def plan_windows(tokens: Tokenization, max_len: int, overlap: int) -> WindowPlan:
    """Plan the encoder inputs for one document (one window when it fits).

    Args:
        tokens: the document's one tokenization.
        max_len: the window length in tokens (at most the model's maximum input length).
        overlap: body tokens shared by consecutive windows, exactly this many (the last window,
            aligned to the end of the body, may share more); no default here: the caller resolves
            it once (:attr:`latechunk_dagster.LateChunker.resolved_window_overlap`) and records it.

    Raises:
        ValueError: ``max_len`` leaves no room for body tokens beside this document's special and
            prefix tokens, or ``overlap`` is not in ``[0, W)``.
    """
    n = len(tokens)
    if n <= max_len:
        return WindowPlan([tokens.token_ids], None)
    ids, special = tokens.ids, tokens.special_mask
    plain = np.flatnonzero(~special)  # the leading / trailing special tokens are those outside it
    lead = int(plain[0]) if len(plain) else n
    trail = n - 1 - int(plain[-1]) if len(plain) else 0
    head_len = lead + tokens.n_prefix
    header, body, footer = ids[:head_len], ids[head_len : n - trail], ids[n - trail :]
    width = max_len - len(header) - len(footer)
    if width < 1:
        raise ValueError(
            f"a window of {max_len} tokens leaves no room for document tokens beside "
            f"{len(header) + len(footer)} special/prefix tokens"
        )
    if not 0 <= overlap < width:
        raise ValueError(
            f"window_overlap={overlap} must be in [0, {width}): a window of {max_len} tokens holds {width} "
            f"document tokens beside {len(header) + len(footer)} special/prefix tokens"
        )
    stride = width - overlap
    nb = len(body)
    count = 1 + math.ceil(max(nb - width, 0) / stride)
    starts = [min(k * stride, nb - width) for k in range(count)]
    windows = [shared_ints(np.concatenate((header, body[s : s + width], footer))) for s in starts]
    return WindowPlan(windows, _best_sources(starts, width, nb, len(header), len(footer), len(windows[-1])))


#: Body tokens whose window is chosen at once by :func:`_best_sources` (its temporaries, ~100 bytes a
#: token, are this many tokens long, not the document's length).
SOURCE_BLOCK = 1 << 16


_INTS: np.ndarray = np.arange(1 << 15, dtype=object)  # 0..n-1 as Python ints, shared by every window


def shared_ints(ids: np.ndarray) -> list[int]:
    """``ids.tolist()`` whose ints are shared objects, one per id value: 8 bytes a token in the list
    instead of 36 (a pointer to a new 28-byte int each; token ids above 256 are not cached by Python),
    which for a long document's windows was the largest per-token object (issue 47 kind 4)."""
    global _INTS
    top = int(ids.max()) + 1 if len(ids) else 0
    if top > len(_INTS):
        _INTS = np.arange(max(top, 2 * len(_INTS)), dtype=object)
    return _INTS[ids].tolist()  # type: ignore[no-any-return]


def _best_sources(starts: list[int], width: int, nb: int, n_header: int, n_footer: int, last_len: int) -> np.ndarray:
    """``[n_tokens, 2]`` int64 ``(window, position)`` of each token's state (the rule of :func:`plan_windows`).

    Body token ``j`` takes the window with the most context on both sides, ``min(j - start,
    start + width - 1 - j)``, a document edge counting as infinite context; ties go to the
    earlier window. The windows holding ``j`` are contiguous from the first one that ends after
    ``j``, so each token compares at most ``ceil(width / stride)`` candidates, the tokens of a block
    of :data:`SOURCE_BLOCK` at once.
    """
    ws = np.asarray(starts, dtype=np.int64)
    count = len(ws)
    source = np.empty((n_header + nb + n_footer, 2), dtype=np.int64)
    source[:n_header, 0] = 0
    source[:n_header, 1] = np.arange(n_header)
    for lo in range(0, nb, SOURCE_BLOCK):
        j = np.arange(lo, min(nb, lo + SOURCE_BLOCK), dtype=np.int64)
        best = _best_windows(ws, j, width, nb)
        source[n_header + j, 0] = best
        source[n_header + j, 1] = n_header + j - ws[best]
    source[n_header + nb :, 0] = count - 1
    source[n_header + nb :, 1] = last_len - n_footer + np.arange(n_footer)
    return source


def _best_windows(ws: np.ndarray, j: np.ndarray, width: int, nb: int) -> np.ndarray:
    """The window (index into the starts ``ws``) each body token ``j`` takes (:func:`_best_sources`)."""
    count = len(ws)
    first = np.searchsorted(ws + width, j, side="right")  # first window that ends after j
    best = first.copy()
    best_ctx = np.full(len(j), -1.0)
    for d in range(count):
        m = first + d
        ok = m < count
        if not ok.any():
            break
        m = np.minimum(m, count - 1)
        s = ws[m]
        ok &= s <= j
        if not ok.any():
            break
        left = np.where(s == 0, np.inf, j - s)
        right = np.where(s + width >= nb, np.inf, s + width - 1 - j)
        ctx = np.minimum(left, right)
        better = ok & (ctx > best_ctx)
        best = np.where(better, m, best)
        best_ctx = np.where(better, ctx, best_ctx)
    return best
