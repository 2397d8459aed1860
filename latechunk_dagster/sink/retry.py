"""Bounded retries with backoff for LanceDB commits that lost a race with a concurrent writer.

What LanceDB 0.40 (lance 13) does by itself, measured with 2-8 writer processes on one table:

* ``merge_insert`` rebases and retries inside LanceDB when a concurrent commit touched the same
  fragments (``MergeResult.num_attempts`` > 1); retries stop 30 s after the first attempt with
  ``RuntimeError("... merge insert timed out")``.
* ``add`` never conflicts (an append touches no existing fragment); ``delete`` of disjoint rows
  rebases on its own.
* ``optimize`` (compaction) loses against a concurrent delete or update of the fragments it
  rewrote: ``RuntimeError("lance error: Retryable commit conflict for version N: ... Please retry.")``.
* A commit whose read version is older than a concurrent **Overwrite** is refused outright:
  ``RuntimeError("lance error: Incompatible transaction: This Update transaction is incompatible
  with concurrent transaction Overwrite at version N.")``. Creating a table is an Overwrite in
  lance: when several writers create a missing table at once (``create_table(exist_ok=True)``), the
  second create lands as version 2, and a writer whose handle read version 1 is refused so (seen
  in a CI run of ``tests/test_concurrent_writers.py``). Our commits replace one partition's rows
  against the latest version, so they are retried too. (A create that lands after another
  writer's rows would overwrite them: :mod:`latechunk_dagster.sink.creation` puts them back.)
* Two ``merge_insert`` inserting the **same new keys** both commit (duplicate rows) unless the key
  column carries the ``lance-schema:unenforced-primary-key`` field metadata; with it the second
  one conflicts, retries and becomes an update (lance-format/lance#4585, #8949).

:func:`retry_commit` adds our own bounded retry around a whole commit for the errors LanceDB
gives up on: attempt ``k`` (from 1) sleeps a random time in ``[0, min(cap, base * 2**(k-1))]``
("full jitter", AWS Architecture Blog, *Exponential Backoff And Jitter*, 2015) before the next,
refreshing the table handle to the latest version first.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Attempts of one commit at most (the first one included).
COMMIT_ATTEMPTS = 6
#: Backoff before attempt k+1 is uniform in [0, min(BACKOFF_CAP, BACKOFF_BASE * 2**(k-1))] seconds.
BACKOFF_BASE = 0.25
BACKOFF_CAP = 8.0

#: Messages of LanceDB errors that mean "another writer committed first; the same commit may succeed now".
_CONFLICT = re.compile(
    r"commit conflict|too many concurrent writers|write contention|please retry|merge insert timed out"
    r"|incompatible with concurrent transaction",
    re.IGNORECASE,
)

#: Field metadata that makes lance detect two concurrent inserts of the same key (module docstring).
PRIMARY_KEY_METADATA = {"lance-schema:unenforced-primary-key": "true"}


class CommitConflictError(RuntimeError):
    """A commit still conflicted with concurrent writers after :data:`COMMIT_ATTEMPTS` attempts.

    Attributes:
        what: the commit; attempts: how many were made.
    """

    def __init__(self, what: str, attempts: int, last: BaseException) -> None:
        self.what, self.attempts = what, attempts
        super().__init__(
            f"{what}: still conflicting with concurrent writers after {attempts} attempts "
            f"(nothing of this commit was written): {last}"
        )


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a LanceDB commit conflict worth retrying (module docstring)."""
    return isinstance(exc, (RuntimeError, OSError)) and bool(_CONFLICT.search(str(exc)))


def retry_commit(
    commit: Callable[[], T],
    *,
    what: str,
    refresh: Callable[[], object] | None = None,
    attempts: int = COMMIT_ATTEMPTS,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """Run ``commit`` until it does not conflict, at most ``attempts`` times, with jittered backoff.

    Args:
        commit: makes the whole commit (builds its source afresh each time: a consumed stream
            cannot be replayed).
        what: names the commit in logs and errors (table and partition).
        refresh: called before each retry (e.g. ``table.checkout_latest``), so the retry plans
            against the version that won.
        attempts, base, cap: the bound and the backoff (seconds; module docstring).
        sleep: the sleeping function (tests pass their own).

    Returns:
        ``(commit's result, attempts made)``.

    Raises:
        CommitConflictError: still conflicting after ``attempts`` attempts.
        Exception: any other error of ``commit``, at once.
    """
    for attempt in range(1, attempts + 1):
        try:
            return commit(), attempt
        except Exception as exc:
            if not is_commit_conflict(exc):
                raise
            if attempt == attempts:
                raise CommitConflictError(what, attempt, exc) from exc
            delay = random.uniform(0.0, min(cap, base * 2 ** (attempt - 1)))
            log.warning(
                "%s: commit conflict (attempt %d of %d), retrying in %.2f s: %s", what, attempt, attempts, delay, exc
            )
            sleep(delay)
            if refresh is not None:
                refresh()
    raise AssertionError("unreachable")  # pragma: no cover
