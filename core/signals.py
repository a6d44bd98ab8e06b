"""SIGTERM handled like Ctrl-C, so a command stopped by ``kill`` or a supervisor still runs its
``finally`` blocks: the servers it started are stopped and its manifest says ``interrupted``."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_keyboard_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGTERM, previous)
