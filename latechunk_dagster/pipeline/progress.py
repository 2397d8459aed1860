"""Progress of one partition: documents and tokens done, tokens/s, estimated time left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """A snapshot of one partition's progress.

    Attributes:
        partition: the partition key.
        documents_done: documents finished (skipped, written or rejected).
        documents_expected: an estimate of the partition's documents, ``None`` when unknown.
        tokens_done: document tokens encoded so far.
        seconds: wall time since the partition started.
        final: True for the last snapshot.
    """

    partition: str
    documents_done: int
    documents_expected: int | None
    tokens_done: int
    seconds: float
    final: bool = False

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_done / self.seconds if self.seconds > 0 else 0.0

    @property
    def seconds_left(self) -> float | None:
        """Estimated seconds left, from the documents' rate so far; ``None`` without an estimate."""
        if not self.documents_expected or not self.documents_done or self.final:
            return None if not self.final else 0.0
        left = max(self.documents_expected - self.documents_done, 0)
        return self.seconds / self.documents_done * left

    def describe(self) -> str:
        total = f"/{self.documents_expected}" if self.documents_expected else ""
        eta = self.seconds_left
        eta_text = f", ~{eta:.0f} s left" if eta is not None and not self.final else ""
        return (
            f"partition {self.partition}: {self.documents_done}{total} documents, {self.tokens_done} tokens "
            f"encoded in {self.seconds:.1f} s ({self.tokens_per_second:,.0f} tokens/s){eta_text}"
        )


class ProgressMeter:
    """Calls ``callback`` with a :class:`Progress` at most every ``interval`` seconds, and once at the end."""

    def __init__(
        self, partition: str, expected: int | None, callback: Callable[[Progress], None] | None, interval: float
    ) -> None:
        self.partition, self.expected, self.callback, self.interval = partition, expected, callback, interval
        self.start = time.perf_counter()
        self._last = self.start
        self.documents = 0
        self.tokens = 0
        self._lock = threading.Lock()

    def add(self, documents: int, tokens: int) -> None:
        """Count finished documents and encoded tokens (thread-safe); report when the interval passed."""
        with self._lock:
            self.documents += documents
            self.tokens += tokens
            now = time.perf_counter()
            due = self.callback is not None and now - self._last >= self.interval
            if due:
                self._last = now
                snap = self.snapshot()
        if due:
            self.callback(snap)  # type: ignore[misc]

    def snapshot(self, final: bool = False) -> Progress:
        seconds = time.perf_counter() - self.start
        return Progress(self.partition, self.documents, self.expected, self.tokens, seconds, final)

    def complete(self) -> Progress:
        snap = self.snapshot(final=True)
        if self.callback is not None:
            self.callback(snap)
        return snap
