"""Long steps on a terminal (the demo's phases): a line when one starts, one every interval while it
runs, and its wall time when it ends (issue 51: no phase silent for more than 30 s).

Here, not in :mod:`latechunk_dagster.pipeline.progress` (a partition's progress, logged by the
run), because importing the pipeline package takes seconds (34 s on a loaded machine): the demo
prints its first phase line before that import.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Phase:
    """A long step on a terminal: one line when it starts, a line every ``interval`` seconds while it
    runs (so no step is silent longer than that), and one line with its wall time when it ends.

    Use as ``with Phase("encoding 6 shards", out=print):``; the lines go to ``out`` (default: stdout,
    flushed). ``interval`` (seconds, default 20: below the 30 s the demo promises between lines) must
    be positive. ``status``, when given, is called for each "still running" line and its answer
    appended (e.g. ``"3/12 shards written"``); one that raises is left out of that line.
    :meth:`note` prints a line of the phase's own (e.g. how far it got) and restarts the
    interval. A phase that raises prints ``... stopped after N s`` and re-raises.

    Raises:
        ValueError: ``interval`` is not positive.
    """

    def __init__(
        self,
        name: str,
        *,
        interval: float = 20.0,
        out: Callable[[str], None] | None = None,
        status: Callable[[], str] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"Phase {name!r}: interval must be positive seconds, got {interval}")
        self.name, self.interval, self.status = name, interval, status
        self.out = out if out is not None else (lambda line: print(line, flush=True))
        self.start = time.perf_counter()
        self._stop = threading.Event()
        self._noted = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def note(self, line: str) -> None:
        """Print ``line`` under the phase now; the next "still running" line waits a whole interval."""
        self.out(f"  {line}")
        self._noted.set()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            if self._noted.is_set():  # a line of the phase's own within this interval
                self._noted.clear()
                continue
            line = f"  {self.name}: still running, {self.seconds:.0f} s"
            try:
                line += f": {self.status()}" if self.status is not None else ""
            except Exception:  # noqa: BLE001 - a status that cannot be read must not stop the lines
                pass
            self.out(line)

    def __enter__(self) -> Phase:
        self.start = time.perf_counter()
        self.out(f"{self.name} ...")
        self._thread = threading.Thread(target=self._beat, name=f"phase {self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.out(f"{self.name}: {'done in' if exc_type is None else 'stopped after'} {self.seconds:.1f} s")
