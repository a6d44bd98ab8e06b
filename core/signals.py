"""Stop signals handled like Ctrl-C, so a command stopped by ``kill``, a supervisor or a closed
terminal still runs its ``finally`` blocks: the servers it started are stopped (none is left
orphaned, still answering) and its manifest says ``interrupted``.

SIGINT, SIGTERM and SIGHUP each raise :class:`Stopped`, a ``KeyboardInterrupt`` that names its
signal: every ``except KeyboardInterrupt`` already written handles all three, and a command
that ends on one can exit with the shell's status for it (``128 + N``: 130, 143, 129).
A signal the parent set to be ignored stays ignored: ``nohup`` means no SIGHUP, and a script's
``cmd &`` means no SIGINT.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived: Ctrl-C, ``kill`` or the terminal closing."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The shell's status for a process ended by the signal: 128 + its number (a plain
    ``KeyboardInterrupt``, raised by Python's own Ctrl-C handler, is SIGINT's 130)."""
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)


def signal_name(interrupt: KeyboardInterrupt) -> str:
    return signal.Signals(interrupt.signum).name if isinstance(interrupt, Stopped) else "SIGINT"


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals_as_keyboard_interrupt() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise :class:`Stopped`; the handlers before
    it are put back after. Only the main thread can set handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _raise_stopped)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signum, handler)
