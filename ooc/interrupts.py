"""Ctrl-C and SIGTERM stop ooc cleanly, even when the signal lands inside a C callback.

Python runs a signal handler between bytecodes of the main thread. When that happens inside a
callback called from C (Numba's compiler notifies its cache through ctypes), the
``KeyboardInterrupt`` raised there is printed as "Exception ignored" and lost, and the command
would run on as if the signal had never come. The handlers here also remember the signal, and
:func:`check` (called by the run loop at every safe point) raises it again.
"""

from __future__ import annotations

import contextlib
import signal
import threading

#: the stop signal received and not yet acted on (None: none)
_pending: int | None = None


def handler(signum, frame):
    """Remember the signal, then stop the main thread with ``KeyboardInterrupt``."""
    global _pending
    _pending = signum
    raise KeyboardInterrupt(f"signal {signum}")


def check() -> None:
    """Raise ``KeyboardInterrupt`` for a stop signal whose exception was lost (see the module docstring)."""
    if _pending is not None:
        raise KeyboardInterrupt(f"signal {_pending}")


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
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if previous.get(signal.SIGINT) is not handler:  # the outermost block: the signal has been acted on
            _pending = None
