"""Test hooks that kill the process at named points of a partition's run (crash-safety tests only)."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator

import pyarrow as pa

#: Test hook: when this environment variable names a point, the process SIGKILLs itself there
#: (``before_engine``: before the first engine call; ``during_encode``: in the encode loop, after the
#: first engine call returned and its results went to the staging writer; ``during_commit``: inside the LanceDB
#: commit, after it has read the first staged record batch; ``between_commits``: after the chunk-table
#: commit, before the rejected-table commit). ``point@partition`` kills only that partition's run.
#: For crash-safety tests only.
TEST_KILL_ENV = "LATECHUNK_TEST_KILL_AT"

#: With :data:`TEST_KILL_ENV`: a file path; the process kills itself only if it can create that file
#: (so only the first run that reaches the point dies, and a retry of it goes through).
TEST_KILL_ONCE_ENV = "LATECHUNK_TEST_KILL_ONCE"


def kills_here(point: str, partition: str) -> bool:
    """Whether the :data:`TEST_KILL_ENV` hook asks to die at ``point`` of ``partition`` now
    (creating the :data:`TEST_KILL_ONCE_ENV` file when that is set)."""
    at, _, only = os.environ.get(TEST_KILL_ENV, "").partition("@")
    if at != point or (only and only != partition):
        return False
    once = os.environ.get(TEST_KILL_ONCE_ENV)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


def kill_point(point: str, partition: str) -> None:
    """The :data:`TEST_KILL_ENV` hook: SIGKILL this process at ``point`` when the hook asks for it."""
    if kills_here(point, partition):
        os.kill(os.getpid(), signal.SIGKILL)


def killing_after_first(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """Yields ``reader``'s first batch, then SIGKILLs the process when LanceDB asks for more."""
    yield from itertools.islice(reader, 1)
    os.kill(os.getpid(), signal.SIGKILL)
