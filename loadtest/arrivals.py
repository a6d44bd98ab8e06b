"""Open-loop arrival times: a pure, seeded function of the schedule, the same in every load process.

Why open loop: N users that each wait for their reply before sending the next never ask more
of a slow server than it gives, so a queue forms without a trace in the latency (coordinated
omission). An open-loop step sends requests at their scheduled times whatever the server's
state, and latency counts from the schedule's time (``RequestRecord.t_intended``).

Every load process computes the whole sweep's arrivals from the same inputs (stages, arrival
kind, seed) and takes its share: process ``k`` of ``n`` takes arrivals ``k, k + n, k + 2n, ...``.
The shares merge back into exactly the one-process schedule, so ``--processes`` changes who
sends a request, never when. A step's arrivals are seeded by the run's seed and the step's
rate (rates are unique in a sweep), not by the step's index: a resumed sweep, or another sweep
with that rate, replays the same arrival times.

``gamma`` arrivals are poisson's generalisation: gaps drawn from a gamma distribution of shape
``k`` and mean 1/rate, so their coefficient of variation is 1/sqrt(k). k = 1 is poisson; k < 1
sends bursts separated by lulls at the same mean rate (real chat traffic is burstier than
poisson, and a server's queue grows with the variance of arrivals, not only with their rate);
k > 1 is smoother, towards constant.
"""

from __future__ import annotations

import math

import numpy as np

from core.rundir import LoadSettings
from loadtest.schedule import Stage, step_starts
from loadtest.trace import trace_arrivals

# A request that starts more than this after its scheduled time means the load generator fell behind.
LATE_START_S = 0.010
RATE_KEY_SCALE = 1_000_000  # a rate's part of its step's seed: micro-requests per second


def step_arrivals(rate: float, duration: float, arrival: str, seed: int, shape: float | None = None) -> np.ndarray:
    """Arrival offsets in ``[0, duration)`` seconds of one step at ``rate`` requests per second.

    ``poisson``: exponential gaps of mean 1/rate from ``numpy.random.default_rng`` seeded by
    (seed, rate), the first gap after the step's start; ``gamma``: gamma gaps of shape ``shape``
    and scale 1/(rate x shape) (mean 1/rate), seeded the same way; ``constant``: one arrival every
    1/rate seconds from the step's start."""
    if rate <= 0 or duration <= 0:
        return np.empty(0)
    if arrival == "constant":
        offsets = np.arange(math.ceil(duration * rate) + 1) / rate
        return offsets[offsets < duration]
    if arrival == "poisson":
        def gaps(rng: np.random.Generator, size: int) -> np.ndarray:
            return rng.exponential(1.0 / rate, size=size)
    elif arrival == "gamma":
        if shape is None or shape <= 0:
            raise ValueError(f"gamma arrivals need a shape above 0, found {shape!r}")
        def gaps(rng: np.random.Generator, size: int) -> np.ndarray:
            return rng.gamma(shape, 1.0 / (rate * shape), size=size)
    else:
        raise ValueError(f"unknown arrival kind {arrival!r}; expected poisson, gamma or constant")
    rng = np.random.default_rng([seed % 2**64, round(rate * RATE_KEY_SCALE)])
    expected = rate * duration
    chunk = int(expected + 6 * math.sqrt(expected) + 16)  # enough at once, nearly always
    offsets = np.cumsum(gaps(rng, chunk))
    while offsets[-1] < duration:  # a long draw (or a bursty gamma's lull): more of the same stream
        offsets = np.concatenate([offsets, offsets[-1] + np.cumsum(gaps(rng, chunk))])
    return offsets[offsets < duration]


def sweep_arrivals(stages: list[Stage], arrival: str, seed: int, shape: float | None = None) -> np.ndarray:
    """Every open-loop arrival of the sweep, in seconds after its start, ascending (``shape``: gamma's k)."""
    parts = [
        start + step_arrivals(stage.rate, stage.duration, arrival, seed, shape)
        for stage, start in zip(stages, step_starts(stages), strict=True)
        if stage.rate is not None
    ]
    return np.concatenate(parts) if parts else np.empty(0)


def run_arrivals(stages: list[Stage], settings: LoadSettings) -> np.ndarray:
    """Every open-loop arrival of a run, in seconds after its start: its trace's rows
    (``loadtest.trace.trace_arrivals``: a trace run is one step), or its rates' schedule."""
    if settings.trace is None:
        return sweep_arrivals(stages, settings.arrival, settings.arrival_seed, settings.arrival_shape)
    parts = [start + trace_arrivals(settings.trace, stage.duration)
             for stage, start in zip(stages, step_starts(stages), strict=True)]
    return np.concatenate(parts) if parts else np.empty(0)


def window_rate(stages: list[Stage], settings: LoadSettings, index: int) -> float | None:
    """The arrivals a step's measured window was scheduled to receive, per second: its rate, except on a
    replayed trace, whose rate varies along it (the trace's mean would call a quiet stretch a shortfall)."""
    stage = stages[index]
    if settings.trace is None or stage.rate is None:
        return stage.rate
    start = step_starts(stages)[index]
    times = run_arrivals(stages, settings)
    scheduled = np.count_nonzero((times >= start + stage.warmup) & (times < start + stage.duration))
    return float(scheduled) / stage.measure


def process_share(times: np.ndarray, index: int, processes: int) -> tuple[np.ndarray, np.ndarray]:
    """(global arrival numbers, times) that load process ``index`` of ``processes`` sends."""
    if processes < 1 or not 0 <= index < processes:
        raise ValueError(f"process {index} of {processes}: expected 0 <= index < processes")
    numbers = np.arange(index, len(times), processes)
    return numbers, times[numbers]
