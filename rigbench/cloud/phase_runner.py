"""One phase of a rig as a child process, its output in the rig's log, stoppable from outside.

Every phase (``pulumi up``, each ``rigbench provision`` step, ``pulumi destroy``) is a
command the user could type, run in its own process group: the rig's thread waits on it,
and a Ctrl-C or SIGTERM of the loop stops it — ``pulumi`` gets SIGINT, which it handles by
cancelling the update and saving its state, everything else SIGTERM — so the thread can go
on to ``pulumi destroy``. Output goes to the rig's log, never to the shared screen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.2
GRACE_S = {signal.SIGINT: 120.0, signal.SIGTERM: 20.0}
TAIL_LINES = 12


@dataclass
class PhaseOutcome:
    returncode: int
    seconds: float
    output: str  # everything the phase printed (an error code may sit far above its last lines)
    cancelled: bool = False
    timed_out: bool = False

    @property
    def tail(self) -> str:
        return "\n".join(line for line in self.output.splitlines()[-TAIL_LINES:] if line.strip())

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.cancelled and not self.timed_out


def output_since(path: Path, since: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(since)
        return handle.read().decode(errors="replace")


def run_phase(argv: list[str], log: Path, cancel: threading.Event | None, timeout: float, cwd: Path | None = None,
              env: dict[str, str] | None = None, stop_signal: int = signal.SIGTERM, title: str = "") -> PhaseOutcome:
    """Run ``argv`` to its end, its timeout, or ``cancel`` being set; output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log, "ab") as handle:
        handle.write(f"\n===== {time.strftime('%H:%M:%S')} {title or argv[0]}: {' '.join(argv)}\n".encode())
        handle.flush()
        since = handle.tell()
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=cwd, env=env, start_new_session=True)
    cancelled = timed_out = False
    while process.poll() is None:
        if cancel is not None and cancel.is_set():
            cancelled = True
        elif time.monotonic() - started > timeout:
            timed_out = True
        if cancelled or timed_out:
            stop(process, stop_signal)
            break
        with contextlib.suppress(subprocess.TimeoutExpired):  # wakes as the phase ends: its seconds are exact
            process.wait(timeout=POLL_S)
    returncode = process.wait()
    return PhaseOutcome(returncode, time.monotonic() - started, output_since(log, since), cancelled, timed_out)


def stop(process: subprocess.Popen, first: int) -> None:
    """``first`` to the process group, then SIGKILL after the grace time."""
    try:
        os.killpg(process.pid, first)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=GRACE_S.get(first, 20.0))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
