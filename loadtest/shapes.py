"""The Locust shape that follows the sweep schedule (``loadtest.schedule``).

Kept apart from the schedule because importing Locust monkey-patches the process with
gevent: only the Locust process itself may import this module.
"""

from __future__ import annotations

import time

from locust import LoadTestShape

from loadtest.schedule import Stage, locate


class SweepShape(LoadTestShape):
    """Steps through ``stages``; users jump to each step's count at once (spawn rate of
    ten times the user count: the whole step is up within ~0.1 s of the shape's tick).

    Locust ticks a shape once a second, so a step's users arrive up to ~1 s after its
    schedule start; the warm-up window absorbs that. ``stages`` is set by the locustfile
    from its command-line options before the test starts."""

    stages: list[Stage] = []
    spawn_factor: float = 10.0

    def reset_time(self) -> None:
        super().reset_time()
        on_start = getattr(self, "on_reset", None)
        if on_start is not None:
            on_start(time.time() - self.get_run_time())  # Locust's clock is monotonic; records use unix time

    def tick(self) -> tuple[int, float] | None:
        position = locate(self.stages, self.get_run_time())
        if position is None:
            return None
        return position.users, max(1.0, position.users * self.spawn_factor)
