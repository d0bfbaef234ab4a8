"""Ctrl-C and SIGTERM stop ooc cleanly, even when the signal lands inside a C callback.

Python runs a signal handler between bytecodes of the main thread. When that happens inside a
callback called from C (Numba's compiler notifies its cache through ctypes), the
``KeyboardInterrupt`` raised there (or in a finalizer, ``__del__``) is printed as "Exception
ignored" with a traceback and lost, and the command would run on as if the signal had never come.
The handlers here also remember the signal, :func:`check` (called by the run loop at every safe
point) raises it again, and meanwhile the lost exception is not printed.

While :func:`defer` is on (the run loop, while its newest checkpoint is older than its state) the
first signal only is remembered: the loop saves its state at the next safe point, then stops
(:func:`check`). A second signal, or ``DEFER_SECONDS`` without a safe point, stops at once.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

#: the stop signal received and not yet acted on (None: none)
_pending: int | None = None
#: whether a first stop signal waits for the run loop's next safe point (:func:`defer`)
_defer = False
#: the longest a deferred signal waits for a safe point before it stops the process anyway
DEFER_SECONDS = 2.0


def handler(signum, frame):
    """Remember the signal, then stop the main thread with ``KeyboardInterrupt`` (see :func:`defer`)."""
    global _pending
    first = _pending is None
    _pending = signum
    if _defer and first:
        # the run loop saves its state at its next safe point, then raises; never later than DEFER_SECONDS
        timer = threading.Timer(DEFER_SECONDS, _force, args=(signum,))
        timer.daemon = True
        timer.start()
        return
    raise KeyboardInterrupt(f"signal {signum}")


def _force(signum: int) -> None:
    """A deferred signal that found no safe point in time: stop the main thread now.

    The signal is sent to the main thread again (not ``_thread.interrupt_main``, which would not
    wake a wait in a system call): :func:`handler` then finds it pending and raises.
    """
    if _defer and _pending is not None:
        signal.pthread_kill(threading.main_thread().ident, signum)


def pending() -> bool:
    """Whether a stop signal is waiting to be acted on."""
    return _pending is not None


def check() -> None:
    """Raise ``KeyboardInterrupt`` for a stop signal not acted on yet (lost, or deferred)."""
    if _pending is not None:
        raise KeyboardInterrupt(f"signal {_pending}")


def defer(on: bool) -> None:
    """Whether a first stop signal waits for the next :func:`check` from now on (the main thread only).

    The caller polls :func:`pending` at its safe points, saves what it must, then calls
    :func:`check`; it turns this off again on every exit.
    """
    global _defer
    _defer = bool(on) and threading.current_thread() is threading.main_thread()


def _quiet_unraisable(previous):
    """A ``sys.unraisablehook`` that drops the ``KeyboardInterrupt`` of a remembered stop signal (raised
    inside a finalizer or a C callback, where Python would print it with a traceback and lose it:
    :func:`check` raises it again), and hands everything else to ``previous``."""
    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _pending is not None:
            return
        previous(unraisable)
    return hook


@contextlib.contextmanager
def stop_on_signals():
    """Within the block, SIGTERM stops the main thread like Ctrl-C, and both go through :func:`handler`.

    A SIGINT handler other than Python's default (an application's own) is left alone; outside
    the main thread nothing changes (only it can install handlers).
    """
    global _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, handler)}
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, handler):
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
    unraisable = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(unraisable)
    try:
        yield
    finally:
        sys.unraisablehook = unraisable
        for s, h in previous.items():
            signal.signal(s, h)
        if previous.get(signal.SIGINT) is not handler:  # the outermost block: the signal has been acted on
            _pending = None
