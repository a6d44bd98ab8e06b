"""The local rig's servers watched while the load runs: an end written where the sweep reads it.

The sweep runs in a Locust process that sees a dead server only as refused connections, which it
rides out (``--ride-out``) as it would a supervised server's restart. Nothing restarts a server the
local rig started, and only the local rig can read its exit code: so the moment one exits on its own,
its end (``core.rundir.server_ended``) is written into the run directory under way, and into each run
made after it, and the sweep there stops at once naming the exit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from core.errors import RunDirError
from core.rundir import RunDir
from core.rundir.server_ended import ServerEnded
from llamacpp.server import LocalServer

POLL_SECONDS = 0.2  # the sweep looks once a second: a fraction of that is soon enough


@contextlib.contextmanager
def ends_written(servers: list[tuple[str, LocalServer]], runs: list[str]) -> Iterator[None]:
    """While the block runs: the first of ``servers`` (name, server) whose process exits on its own has its end
    written into every run of ``runs`` (run directories, filled as the sweep makes them) still running. The
    watch stops before the block's caller stops the servers, so a stop made here is never taken for an end."""
    stop = threading.Event()

    def watch() -> None:
        ended: ServerEnded | None = None
        told: set[str] = set()
        while not stop.wait(POLL_SECONDS):
            ended = ended or next((end for name, server in servers if (end := server.ended(name))), None)
            if ended is None:
                continue
            for path in [path for path in list(runs) if path not in told]:
                told.add(path)
                with contextlib.suppress(OSError, RunDirError):  # a run that cannot take it rides the outage out
                    if RunDir(path).read_manifest().status == "running":
                        ended.write(Path(path))

    watcher = threading.Thread(target=watch, name="server-ends", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
