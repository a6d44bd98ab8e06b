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
"""

from __future__ import annotations

import math

import numpy as np

from loadtest.schedule import Stage, step_starts

# A request that starts more than this after its scheduled time means the load generator fell behind.
LATE_START_S = 0.010
RATE_KEY_SCALE = 1_000_000  # a rate's part of its step's seed: micro-requests per second


def step_arrivals(rate: float, duration: float, arrival: str, seed: int) -> np.ndarray:
    """Arrival offsets in ``[0, duration)`` seconds of one step at ``rate`` requests per second.

    ``poisson``: exponential gaps of mean 1/rate from ``numpy.random.default_rng`` seeded by
    (seed, rate), the first gap after the step's start; ``constant``: one arrival every 1/rate
    seconds from the step's start."""
    if rate <= 0 or duration <= 0:
        return np.empty(0)
    if arrival == "constant":
        offsets = np.arange(math.ceil(duration * rate) + 1) / rate
        return offsets[offsets < duration]
    if arrival != "poisson":
        raise ValueError(f"unknown arrival kind {arrival!r}; expected poisson or constant")
    rng = np.random.default_rng([seed % 2**64, round(rate * RATE_KEY_SCALE)])
    expected = rate * duration
    chunk = int(expected + 6 * math.sqrt(expected) + 16)  # enough at once, nearly always
    gaps = rng.exponential(1.0 / rate, size=chunk)
    offsets = np.cumsum(gaps)
    while offsets[-1] < duration:  # a rare long draw: more of the same stream
        offsets = np.concatenate([offsets, offsets[-1] + np.cumsum(rng.exponential(1.0 / rate, size=chunk))])
    return offsets[offsets < duration]


def sweep_arrivals(stages: list[Stage], arrival: str, seed: int) -> np.ndarray:
    """Every open-loop arrival of the sweep, in seconds after its start, ascending."""
    parts = [
        start + step_arrivals(stage.rate, stage.duration, arrival, seed)
        for stage, start in zip(stages, step_starts(stages), strict=True)
        if stage.rate is not None
    ]
    return np.concatenate(parts) if parts else np.empty(0)


def process_share(times: np.ndarray, index: int, processes: int) -> tuple[np.ndarray, np.ndarray]:
    """(global arrival numbers, times) that load process ``index`` of ``processes`` sends."""
    if processes < 1 or not 0 <= index < processes:
        raise ValueError(f"process {index} of {processes}: expected 0 <= index < processes")
    numbers = np.arange(index, len(times), processes)
    return numbers, times[numbers]
