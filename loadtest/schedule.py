"""The sweep's schedule as data: pure functions of elapsed time, no Locust import.

A sweep is a list of ``Stage``s (users or an arrival rate, warm-up seconds, measured seconds)
laid end to end from a start time ``t0``. A closed-loop stage holds N users sending back to
back; an open-loop stage has ``users`` 0 and a ``rate`` (requests per second arriving on the
schedule of ``loadtest.arrivals``). Everything that needs to know "which step is this, warm-up
or measured?" — the shape, every user in every worker process, telemetry — asks the same
pure functions of elapsed time, so they agree without talking to each other. A request
belongs to the step and phase in which it *started* (an open-loop request: was *meant* to start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import LoadTestError
from core.lists import seconds_per_step
from core.rundir import LoadSettings
from core.wording import counted

# The arrivals an open-loop step's measured window holds on average when its window is rigbench's default:
# a poisson count of mean 30 falls under half of it (the sweep fails a step that ran under half its load,
# ``core.load_reached.FAIL_BELOW``) with a probability of 0.1 %, where a 3 s window at 1 req/s holds 3 and
# falls under half one time in five. Gamma arrivals of shape k < 1 are burstier (their count's variance is
# about mean / k), so their windows hold 30 / k; constant arrivals need only two (a window's count is then
# off by one at most).
ARRIVALS_PER_WINDOW = 30


@dataclass(frozen=True)
class Stage:
    users: int
    warmup: float
    measure: float
    rate: float | None = None  # an open-loop stage: requests per second (users is 0)

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

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
    rate: float | None = None


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


def make_rate_stages(rate_steps: list[float], warmup: float, measure: Measure) -> list[Stage]:
    """Open-loop stages: one per arrival rate (requests per second), each with ``users`` 0."""
    if not rate_steps:
        raise LoadTestError("no rate steps given; expected e.g. 1,2,4,8 requests per second")
    if any(rate <= 0 for rate in rate_steps):
        raise LoadTestError(f"rate steps must be above 0 requests per second, found {rate_steps}")
    windows = seconds_per_step(measure, len(rate_steps), kind="rate")
    if warmup < 0 or any(window <= 0 for window in windows):
        raise LoadTestError(f"expected warm-up >= 0 s and measured windows > 0 s, found {warmup} and {measure}")
    return [Stage(0, warmup, window, rate) for rate, window in zip(rate_steps, windows, strict=True)]


def open_loop_windows(rates: list[float], arrival: str, shape: float | None, floor: float) -> list[float]:
    """The default measured window of each rate step: ``floor`` seconds, or as long as its rate needs to
    hold ``ARRIVALS_PER_WINDOW`` arrivals on average (whole seconds), whichever is longer."""
    if arrival == "constant":
        needed = 2.0
    else:
        needed = ARRIVALS_PER_WINDOW / min(1.0, shape) if arrival == "gamma" and shape else ARRIVALS_PER_WINDOW
    return [max(floor, float(math.ceil(needed / rate))) for rate in rates]


def stages_for(settings: LoadSettings) -> list[Stage]:
    """The schedule a run's load settings describe, closed or open loop."""
    if settings.open_loop:
        return make_rate_stages(settings.rate_steps, settings.warmup_seconds, settings.measure_seconds)
    return make_stages(settings.user_steps, settings.warmup_seconds, settings.measure_seconds)


def stage_label(users: int, rate: float | None) -> str:
    """``8 users`` or ``2.5 req/s``: how a step is named in messages."""
    return f"{rate:g} req/s" if rate is not None else counted(users, "user")


def step_starts(stages: list[Stage]) -> list[float]:
    """Each stage's start, in seconds after the sweep's start."""
    starts, offset = [], 0.0
    for stage in stages:
        starts.append(offset)
        offset += stage.duration
    return starts


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
            return Position(index, stage.users, phase, offset, measure_start, end, stage.rate)
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
    return Position(
        len(stages) - 1, last.users, "measure", offset, offset + last.warmup, offset + last.duration, last.rate
    )


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
