"""The Locust shape that follows the sweep schedule (``loadtest.schedule``).

Kept apart from the schedule because importing Locust monkey-patches the process with
gevent: only the Locust process itself may import this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from locust import LoadTestShape

from loadtest.schedule import Position, Stage, locate, locate_or_last, total_duration


class SweepShape(LoadTestShape):
    """Steps through ``stages``; users jump to each step's count at once (spawn rate of
    ten times the user count: the whole step is up within ~0.1 s of the shape's tick).

    Locust ticks a shape once a second, so a step's users arrive up to ~1 s after its
    schedule start; the warm-up window absorbs that. After the last measured window the shape
    drains: it keeps the users (who send nothing more) until no request is in flight or
    ``drain_seconds`` have passed, so the last window's requests end with the server's counts
    instead of being cut; only then does Locust stop the users. ``stages`` is set by the locustfile
    from its command-line options before the test starts.

    An open-loop stage runs one ``open_loop_class`` user (a dispatcher) in each load process
    for as long as the sweep lasts: it follows the whole arrival schedule itself, so a step
    change needs no spawning and no tick's delay. Each tick names the user class, since the
    locustfile holds both kinds."""

    stages: list[Stage] = []
    spawn_factor: float = 10.0
    drain_seconds: float = 0.0
    in_flight: Callable[[float], int | None] | None = None  # requests streaming in every process (locustfile)
    drain_started: float | None = None
    closed_loop_class: type | None = None
    open_loop_class: type | None = None

    def reset_time(self) -> None:
        super().reset_time()
        self.drain_started = None
        on_start = getattr(self, "on_reset", None)
        if on_start is not None:
            on_start(time.time() - self.get_run_time())  # Locust's clock is monotonic; records use unix time

    def tick(self) -> tuple[int, float, list[type] | None] | None:
        position = locate(self.stages, self.get_run_time())
        if position is None:
            position = self._draining()
            if position is None:
                return None
        if position.rate is not None:
            dispatchers = load_processes(self.runner)
            return dispatchers, max(1.0, dispatchers * self.spawn_factor), _classes(self.open_loop_class)
        return position.users, max(1.0, position.users * self.spawn_factor), _classes(self.closed_loop_class)


    def _draining(self) -> Position | None:
        """After the last window: the last step's users stay (sending nothing: ``sweep_over``) while
        requests in flight run to their end, until none is left or ``drain_seconds`` have passed."""
        if not self.stages or self.drain_seconds <= 0:
            return None
        now = time.time()
        if self.drain_started is None:
            self.drain_started = now
        over = self.get_run_time() >= total_duration(self.stages) + self.drain_seconds
        left = self.in_flight(self.drain_started) if self.in_flight is not None else None
        if over or left == 0:
            return None
        return locate_or_last(self.stages, total_duration(self.stages))


def _classes(user_class: type | None) -> list[type] | None:
    return [user_class] if user_class is not None else None


def load_processes(runner: object) -> int:
    """How many processes send load: a master's workers, else this one process."""
    return max(1, getattr(runner, "worker_count", 1) or 1)
