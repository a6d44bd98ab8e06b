"""``--processes N|auto``: how many load processes a sweep on this machine runs.

``auto`` is measured, not guessed: the per-process capacity ``rigbench selftest`` saved for this
machine, one user's decode rate from a probe reply of the server (batched users only decode
slower, so users x that rate bounds a closed-loop step's demand; an open-loop step offers at
most rate x reply tokens), and the cores left after a server that runs here.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from core.errors import UsageError
from loadtest.preflight import probe_decode_rate
from loadtest.process_capacity import processes_for, read_capacity, require_capacity

PROCESSES_HELP = (
    "load processes on this machine (Locust --processes), or auto: enough for the top step's demand at the "
    "per-process capacity `rigbench selftest` measured here, within the cores a local server leaves"
)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parse_processes(text: str) -> int | None:
    """A count, or None for ``auto``; anything else is refused naming the flag."""
    if text.strip().lower() == "auto":
        return None
    try:
        count = int(text)
    except ValueError:
        raise UsageError(f"--processes: {text!r} is neither a whole number nor auto; e.g. --processes 2") from None
    if count < 1:
        raise UsageError(f"--processes: {count} is below 1; give 1 or more, or auto")
    return count


def server_cores_here(url: str, server_threads: int | None) -> int:
    """Cores a server on this machine takes: its thread count when rigbench starts it, one when a
    URL on loopback names a server of unknown size, none for a remote one."""
    if server_threads is not None:
        return server_threads
    return 1 if urlsplit(url).hostname in LOOPBACK else 0


def auto_processes(
    url: str,
    model_name: str,
    *,
    user_steps: list[int],
    rate_steps: list[float],
    max_tokens: int,
    server_threads: int | None = None,
) -> tuple[int, str]:
    """The count for ``--processes auto`` and the line that says how it was chosen."""
    capacity = read_capacity()
    require_capacity(capacity)  # none saved: refused before the server is asked anything
    demand = max(rate_steps) * max_tokens if rate_steps else max(user_steps) * probe_decode_rate(url, model_name)
    cores_free = max(1, (os.cpu_count() or 1) - server_cores_here(url, server_threads))
    return processes_for(demand, capacity, cores_free)
