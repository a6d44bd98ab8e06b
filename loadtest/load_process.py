"""One load process's state, hung off its Locust environment (nothing of it lives in a module).

What outlasts one user: the load context (made on first use, after ``--processes`` has forked,
and made again when a new start brings other options: the web UI's custom parameters), the live
per-step tallies and the dispatch tally (a master also holds its workers' merged ones), the
watchdog of every client's read timeout, and whether an open-loop dispatcher already sends this
process's share of the schedule. No Locust import: the controller in the master reads it too.
"""

from __future__ import annotations

import threading
from typing import Any

from loadtest.dispatch_tally import DispatchTally
from loadtest.live_stats import LiveStats
from loadtest.load_context import LoadContext
from loadtest.stall_watch import StallWatch

ATTRIBUTE = "rigbench_load_process"  # the environment's attribute that holds it


class LoadProcess:
    """The state one Locust environment's users, session, listeners and controller share."""

    def __init__(self) -> None:
        self.live = LiveStats()
        self.dispatch = DispatchTally()
        self.stall_watch = StallWatch()
        self.dispatching = False  # an open-loop dispatcher sends this process's share
        self.in_flight = 0  # requests this process is streaming now
        # a master's workers' in-flight counts: client id -> (count, when its report came)
        self.worker_in_flight: dict[str, tuple[int, float]] = {}
        self._context: LoadContext | None = None
        # making a context asks the server (a long context's /tokenize), which yields under gevent:
        # users starting together wait for the one context instead of each making its own
        self._context_lock = threading.Lock()

    def context(self, environment: Any) -> LoadContext:
        """The context for the environment's current options (the old one's writer is left open:
        a user of the last start may still be ending its request; every line is flushed as written)."""
        with self._context_lock:
            options = environment.parsed_options
            if self._context is None or not self._context.made_for(options):
                self._context = LoadContext(options, environment.host)
            return self._context


def load_process(environment: Any) -> LoadProcess:
    """The environment's load-process state, made on first use."""
    state = getattr(environment, ATTRIBUTE, None)
    if state is None:
        state = LoadProcess()
        setattr(environment, ATTRIBUTE, state)
    return state
