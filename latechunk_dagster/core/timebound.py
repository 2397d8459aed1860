"""A time bound that really stops a runaway call (a strategy on one document).

Python cannot interrupt a thread from outside, so a bound that only *waits* (a thread with
``join(timeout)``) would leave a runaway segmenter burning a core and holding the GIL. Two
mechanisms really stop it:

1. **SIGALRM** (``signal.setitimer(ITIMER_REAL)``), used when the caller is the main thread
   of the process (signal handlers only run there), the platform has ``setitimer``, no
   other real-time timer is armed and no other SIGALRM handler is installed. The handler
   raises :class:`TimeLimitExceeded` in the running Python code at the next bytecode
   boundary; CPython's regular-expression engine also checks for signals while it
   backtracks, so pySBD's exponential backtracking is stopped too (measured: a
   0.5 s bound stopped it after 0.50 s). Cost: two ``setitimer`` calls per document.
   Code that runs long inside a C extension without checking signals is only stopped
   when it returns to Python; the default segmenter (sentencex) is linear-time.
2. **A worker process** otherwise (a caller in another thread: Dagster's in-process
   executor threads, an overlap thread): the call runs in a one-process
   ``multiprocessing`` pool (``spawn`` context: forking a process that hosts an engine's
   threads is unsafe) and the pool is terminated when the bound passes, which kills the
   runaway; the next call starts a fresh pool. Arguments and results are pickled, so
   this path is slower; the pool is started (and its start-up not counted) before the
   first bounded call, and terminated at interpreter exit (:func:`shutdown_worker`, an ``atexit``
   hook), so no "unclosed running multiprocessing pool" is left to ``Pool.__del__``.
"""

from __future__ import annotations

import atexit
import multiprocessing
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class TimeLimitExceeded(Exception):
    """The call did not finish within its time bound (it has been stopped)."""


class WorkerCallError(Exception):
    """The call raised in the worker process; the message names the original exception type."""

    def __init__(self, type_name: str, message: str, detail: str | None) -> None:
        self.type_name = type_name
        self.detail = detail
        super().__init__(f"{type_name}: {message}")


def _on_alarm(signum: int, frame: object) -> None:
    raise TimeLimitExceeded


def alarm_usable() -> bool:
    """True when :func:`call_with_time_limit` can use SIGALRM here (see the module doc)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        return False
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, _on_alarm)


def _call_with_alarm(fn: Callable[..., T], args: tuple, seconds: float) -> T:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _worker_call(fn: Callable[..., Any], args: tuple) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as exc:  # sent back as plain data: not every exception pickles
        return False, (type(exc).__name__, str(exc), getattr(exc, "detail", None))


def _noop() -> None:
    return None


def _worker_start() -> None:
    """The worker's own SIGTERM: the default (die). A spawned process inherits an ignored SIGTERM,
    and Dagster maps SIGTERM to SIGINT's handler, which is "ignore" in a process started in the
    background by a shell (``nohup ... &``): the pool's terminate() could then not stop a runaway."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


_pool_lock = threading.Lock()
_pool: Any = None
_exit_hook = False


def _get_pool() -> Any:
    global _pool, _exit_hook
    if _pool is None:
        _pool = multiprocessing.get_context("spawn").Pool(1, initializer=_worker_start)
        if not _exit_hook:  # closed at interpreter exit, before the pool's __del__ would warn it still ran
            atexit.register(shutdown_worker)
            _exit_hook = True
        _pool.apply(_noop)  # start-up is not part of any call's bound
    return _pool


def _call_in_worker(fn: Callable[..., T], args: tuple, seconds: float) -> T:
    global _pool
    with _pool_lock:  # one bounded call at a time in the worker
        pool = _get_pool()
        pending = pool.apply_async(_worker_call, (fn, args))
        try:
            ok, value = pending.get(timeout=seconds)
        except multiprocessing.TimeoutError:
            pool.terminate()  # kills the runaway
            _pool = None
            raise TimeLimitExceeded from None
    if not ok:
        raise WorkerCallError(*value)
    return value


def call_with_time_limit(fn: Callable[..., T], args: tuple, seconds: float | None) -> T:
    """Return ``fn(*args)``, stopping it after ``seconds`` of wall time.

    Args:
        fn, args: the call; in the worker-process case both must pickle (strategies and
            :class:`~latechunk_dagster.core.tokenization.Tokenization` do).
        seconds: the bound; ``None`` or ``<= 0`` calls ``fn`` directly, unbounded.

    Raises:
        TimeLimitExceeded: the call ran longer than ``seconds`` and was stopped.
        WorkerCallError: worker-process case only, ``fn`` raised (type name and message kept).
        Exception: SIGALRM or unbounded case, whatever ``fn`` raised.
    """
    if seconds is None or seconds <= 0:
        return fn(*args)
    if alarm_usable():
        return _call_with_alarm(fn, args, seconds)
    return _call_in_worker(fn, args, seconds)


def shutdown_worker() -> None:
    """Terminate the worker process of the fallback path, if one was started."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.terminate()
            _pool = None
