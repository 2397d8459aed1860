"""Object-store reads tried again: 503 (SlowDown), 500 and requests not answered in time are retried
with exponential backoff within a bounded total time (issue 49 item 4), on top of pyarrow's own
retries (3 attempts a request). The one home of what counts as transient and of the budget."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TypeVar

T = TypeVar("T")

#: Seconds a file's read is retried for when the object store answers 503 (SlowDown), 500, or not
#: in time, after pyarrow's own retries (3 attempts a request, AWS's standard strategy); default of
#: :func:`read_retry_seconds`, ``LATECHUNK_READ_RETRY_SECONDS`` overrides it.
READ_RETRY_SECONDS = 30.0

#: What a transient object-store error says (pyarrow's AWS, GCS and Azure messages): throttling, a
#: server error, a connection lost or a request not answered in time. Anything else (404, 403, a bad
#: request) is not retried.
_TRANSIENT = re.compile(
    r"HTTP status 5\d\d|SLOW_DOWN|SlowDown|THROTTL|Throttl|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|"
    r"NETWORK_CONNECTION|REQUEST_TIMEOUT|Timeout was reached|timed out|curlCode: (?:7|28|52|55|56)\b|"
    r"Connection reset|Broken pipe"
)


def read_retry_seconds() -> float:
    """:data:`READ_RETRY_SECONDS`, or ``LATECHUNK_READ_RETRY_SECONDS`` when set.

    Raises:
        ValueError: the variable is not a number of seconds >= 0 (naming it)."""
    text = os.environ.get("LATECHUNK_READ_RETRY_SECONDS", "").strip()
    if not text:
        return READ_RETRY_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"LATECHUNK_READ_RETRY_SECONDS={text!r}: expected seconds >= 0 (e.g. 30)")
    return value


def is_transient(exc: BaseException) -> bool:
    """Whether an object store's error is worth trying again (:data:`_TRANSIENT`); a file replaced
    while it was read is not (its message matches none: its reader decides)."""
    return isinstance(exc, OSError) and bool(_TRANSIENT.search(str(exc)))


def retried(read: Callable[[], T], file: PurePath, budget: float | None = None) -> T:
    """``read()``, tried again with exponential backoff (0.1 s doubling, at most 5 s a wait, jittered)
    while it raises a transient error (:func:`is_transient`) and ``budget`` seconds (default
    :func:`read_retry_seconds`) have not passed since the first try: the total time is bounded by the
    budget plus one try. Local files (a :class:`~pathlib.Path`) are read once.

    Raises:
        OSError: the last error, its message prefixed with how many tries it took and for how long.
    """
    if isinstance(file, Path):  # local; an object store's path is a PurePosixPath (storage.ObjectPath)
        return read()
    budget = read_retry_seconds() if budget is None else budget
    start, wait, tries = time.monotonic(), 0.1, 0
    while True:
        tries += 1
        try:
            return read()
        except OSError as exc:
            spent = time.monotonic() - start
            if not is_transient(exc) or spent + wait > budget:
                if tries == 1 or not is_transient(exc):
                    raise
                raise OSError(f"{first_line(exc)} (the last of {tries} tries in {spent:.1f} s)") from None
            time.sleep(wait * random.uniform(0.5, 1.0))
            wait = min(wait * 2, 5.0)


def first_line(exc: BaseException) -> str:
    """An error's message, first line (pyarrow's AWS errors carry the request's details after it)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
