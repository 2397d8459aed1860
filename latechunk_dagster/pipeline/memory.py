"""Give freed heap memory back to the OS between batches (glibc only; a no-op elsewhere).

Measured on the CPU engine here (all-MiniLM-L6-v2, batches of 250 small documents): a bare loop
of ``LateChunker.chunk`` calls grew RSS by +360 MB over 3,200 documents although nothing was
kept, because glibc's malloc keeps freed blocks of the per-batch token states in its arenas;
with ``malloc_trim(0)`` after each call the same loop grew by +23 MB.

A trim walks every arena and holds its lock, so other threads' allocations wait: after every
batch of the CPU default (8,192 tokens, ~12 MB of states) it took 0.3 s of a 3 s host-ceiling run
(``bench/host_ceiling.py``, 169 batches). :class:`FreedMemory` therefore trims once the batches
freed since the last trim add up to :data:`TRIM_EVERY_BYTES`: what glibc may keep stays below
that, and a GPU batch (131,072 tokens, ~200 MB) is still trimmed after each batch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

#: Bytes of token states freed between two trims (:class:`FreedMemory`).
TRIM_EVERY_BYTES = 64 << 20


@cache
def _libc_trim() -> object | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None


def release_freed_memory() -> bool:
    """``malloc_trim(0)``: return free heap pages of every arena to the OS. True when it ran."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)  # type: ignore[operator]
    return True


class FreedMemory:
    """Counts the bytes a stream frees and trims the heap (:func:`release_freed_memory`) once they
    reach ``every`` bytes (default :data:`TRIM_EVERY_BYTES`)."""

    def __init__(self, every: int = TRIM_EVERY_BYTES) -> None:
        self.every, self.pending = every, 0

    def freed(self, nbytes: int) -> bool:
        """Record ``nbytes`` freed; True when this call trimmed the heap."""
        self.pending += nbytes
        if self.pending < self.every:
            return False
        self.pending = 0
        return release_freed_memory()
