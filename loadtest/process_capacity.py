"""A load process's capacity: the highest tok/s one load process followed faithfully on this machine.

``rigbench selftest`` measures it against the ground-truth server and saves it here, under the
cache root; a sweep reads it and warns when a step asked more of a load process than that
(its figures would then measure the load generator, not the server), and ``--processes auto``
divides a sweep's demand by it. (The card's batched ceiling, what the *server* can reach, is
``analysis.ceiling``'s; this is the load generator's own limit.)

A step's users have a bound of their own, checked before any run: ``MAX_USERS_PER_PROCESS`` per load
process, the cap an open loop keeps on one process's requests in flight (a closed-loop user holds one
stream at a time). Measured on a 2-core machine against the ground-truth server, with 2 s of warm-up:
one process started 8,192 users in time, at about 40 KB each; at 16,384 its core was saturated, at 25,000
8 % of the users had not started when the window opened, and at 100,000 87 % had not, while it grew to
0.8 GB. A step above the bound is refused naming ``--steps``, the bound and the ``--processes`` it needs.

An open-loop step (``--rates``, or a ``--trace`` at its mean rate) has one too: ``MAX_RATE_PER_PROCESS``
arrivals a second per load process, one second of the in-flight cap. Measured the same way (2 cores, the
ground-truth server beside it, 16-token replies): asked 1,000 req/s, one process started 87 % of its
measured requests more than 10 ms late; asked 100,000 it started about 3,400 a second, none of them inside
the measured window, while every process still built the whole schedule (warm-up and window: 4 million
arrivals at the default windows). Such a run ends failed, naming the shortfall, only once its drain is
over; a step above the bound is refused before it, naming ``--rates`` (or ``--trace``), the bound and the
``--processes`` it needs. Below the bound the sweep still judges the rate that ran (``core.load_reached``).
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

from core.cache import cache_root
from core.errors import UsageError
from core.rundir import utc_now
from core.wording import counted
from loadtest.dispatch_tally import MAX_IN_FLIGHT

CAPACITY_FILE_NAME = "selftest.json"
MAX_USERS_PER_PROCESS = MAX_IN_FLIGHT
MAX_RATE_PER_PROCESS = float(MAX_IN_FLIGHT)  # arrivals a second


def capacity_path() -> Path:
    return cache_root() / CAPACITY_FILE_NAME


def save_capacity(total_tok_s: float, processes: int, path: Path | None = None) -> dict:
    """Remember this machine's capacity (all processes together, and per process)."""
    entry = {
        "host": socket.gethostname(),
        "processes": processes,
        "capacity_tok_s": total_tok_s,
        "per_process_tok_s": total_tok_s / max(1, processes),
        "measured_at": utc_now(),
    }
    path = path or capacity_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=2) + "\n")
    return entry


def read_capacity(path: Path | None = None) -> float | None:
    """Per-process capacity from the last selftest on this machine, if any."""
    try:
        data = json.loads((path or capacity_path()).read_text())
    except (OSError, ValueError):
        return None
    if data.get("host") != socket.gethostname():
        return None
    value = data.get("per_process_tok_s")
    return float(value) if value else None


def require_capacity(per_process_tok_s: float | None) -> float:
    """The per-process capacity ``--processes auto`` works from; without one it is refused, before
    anything is built or asked of a server."""
    if per_process_tok_s is None or per_process_tok_s <= 0:
        raise UsageError(
            "--processes auto needs this machine's per-process capacity: run `rigbench selftest` once "
            "(it saves the capacity), or give --processes N"
        )
    return per_process_tok_s


def processes_for(demand_tok_s: float, per_process_tok_s: float | None, cores_free: int) -> tuple[int, str]:
    """How many load processes a sweep needs: enough that none is asked more than the capacity
    ``rigbench selftest`` measured per process here, and no more than the cores left free
    (a process beyond them would only take a core from another, or from a local server).
    Returns the count and one line saying how it was chosen, for the manifest."""
    per_process_tok_s = require_capacity(per_process_tok_s)
    needed = max(1, math.ceil(demand_tok_s / per_process_tok_s))
    chosen = max(1, min(needed, cores_free))
    line = (
        f"--processes auto: {chosen} (demand up to {demand_tok_s:.0f} tok/s, {per_process_tok_s:.0f} tok/s per "
        f"process measured here, {counted(cores_free, 'core')} free)"
    )
    if chosen < needed:
        line += f"; {needed} would be needed: the load generator may be the bottleneck at the top steps"
    return chosen, line


def _processes_said(processes: int | None, most: int) -> str:
    if processes is None:
        return f"--processes auto's at most {most} (this machine's cores)"
    return counted(processes, "load process", "load processes")


def check_users_per_process(user_steps: list[int], processes: int | None, cores: int) -> None:
    """Refuse, before any run, a step with more users than its load processes can start and hold
    (``processes`` None: ``--processes auto``, which never runs more than ``cores``)."""
    users = max(user_steps, default=0)
    most = processes if processes is not None else max(1, cores)
    if users <= most * MAX_USERS_PER_PROCESS:
        return
    needed = math.ceil(users / MAX_USERS_PER_PROCESS)
    given = _processes_said(processes, most)
    raise UsageError(
        f"--steps: a step of {users} users is more than {given} can start and hold: one holds at most "
        f"{MAX_USERS_PER_PROCESS} users (loadtest.process_capacity); give --processes {needed} or more, or fewer users"
    )


def check_rate_per_process(rate_steps: list[float], processes: int | None, cores: int, *, trace: bool = False) -> None:
    """Refuse, before any run, an open-loop step whose arrivals its load processes cannot start on time
    (``trace``: the one step is a trace's mean rate, refused naming ``--trace``)."""
    rate = max(rate_steps, default=0.0)
    most = processes if processes is not None else max(1, cores)
    if rate <= most * MAX_RATE_PER_PROCESS:
        return
    needed = math.ceil(rate / MAX_RATE_PER_PROCESS)
    step = (f"--trace: the trace's mean rate of {rate:g} req/s (at its --trace-speed)" if trace
            else f"--rates: a step of {rate:g} req/s")
    fewer = "a slower --trace-speed" if trace else "lower rates"
    raise UsageError(
        f"{step} is more than {_processes_said(processes, most)} can start on time: one starts at most "
        f"{MAX_RATE_PER_PROCESS:g} req/s (loadtest.process_capacity); give --processes {needed} or more, or {fewer}"
    )
