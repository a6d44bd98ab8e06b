"""The sweep's schedule as data: pure functions of elapsed time, no Locust import.

A sweep is a list of ``Stage``s (users, warm-up seconds, measured seconds) laid end to
end from a start time ``t0``. Everything that needs to know "which step is this, warm-up
or measured?" — the shape, every user in every worker process, telemetry — asks the same
pure functions of elapsed time, so they agree without talking to each other. A request
belongs to the step and phase in which it *started*.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import LoadTestError
from core.lists import seconds_per_step


@dataclass(frozen=True)
class Stage:
    users: int
    warmup: float
    measure: float

    @property
    def duration(self) -> float:
        return self.warmup + self.measure


@dataclass(frozen=True)
class Position:
    """Where an elapsed time falls: step index, that step's users, phase, offsets."""

    index: int
    users: int
    phase: str  # "warmup" or "measure"
    step_start: float
    measure_start: float
    measure_end: float


Measure = float | list[float]  # one measured window for every step, or one per step


def make_stages(user_steps: list[int], warmup: float, measure: Measure) -> list[Stage]:
    if not user_steps:
        raise LoadTestError("no user steps given; expected e.g. 1,2,4,8")
    if any(users < 1 for users in user_steps):
        raise LoadTestError(f"user steps must be >= 1, found {user_steps}")
    # Why one window per step: a request at 64 users takes many times as long as at one, and a
    # window shorter than a request measures no whole request.
    windows = seconds_per_step(measure, len(user_steps))
    if warmup < 0 or any(window <= 0 for window in windows):
        raise LoadTestError(f"expected warm-up >= 0 s and measured windows > 0 s, found {warmup} and {measure}")
    return [Stage(users, warmup, window) for users, window in zip(user_steps, windows, strict=True)]


def total_duration(stages: list[Stage]) -> float:
    return sum(stage.duration for stage in stages)


def locate(stages: list[Stage], elapsed: float) -> Position | None:
    """The step and phase at ``elapsed`` seconds after the sweep's start; None once over.

    Before the start (a request racing the first tick) counts as step 0's warm-up.
    """
    offset = 0.0
    for index, stage in enumerate(stages):
        end = offset + stage.duration
        if elapsed < end:
            measure_start = offset + stage.warmup
            phase = "measure" if elapsed >= measure_start else "warmup"
            return Position(index, stage.users, phase, offset, measure_start, end)
        offset = end
    return None


def locate_or_last(stages: list[Stage], elapsed: float) -> Position:
    """Like ``locate`` but a time after the end belongs to the last step's measured window
    (a request started in the final instants, before the runner stopped its user)."""
    position = locate(stages, elapsed)
    if position is not None:
        return position
    offset = total_duration(stages) - stages[-1].duration
    last = stages[-1]
    return Position(len(stages) - 1, last.users, "measure", offset, offset + last.warmup, offset + last.duration)


def boundaries(stages: list[Stage]) -> list[tuple[float, int, str]]:
    """(elapsed, step index, boundary) for every step start, measure start and end."""
    points = []
    offset = 0.0
    for index, stage in enumerate(stages):
        points.append((offset, index, "start"))
        points.append((offset + stage.warmup, index, "measure"))
        offset += stage.duration
        points.append((offset, index, "end"))
    return points
