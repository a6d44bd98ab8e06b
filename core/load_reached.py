"""Did a step run the load it names? Little's law over the records, one definition for the sweep and the analysis.

A closed-loop step of N users should hold N requests in flight through its measured window; an
open-loop step should send its rate. A step whose users could not all be started, or whose users
spent the window backing off, still "completes" with figures that look right for the load it
names. So the load that ran is measured: the mean number of requests in flight over the window
(each request's time between its start and its end inside the window, summed, over the window's
length) against the users, or the achieved send rate against the rate. Under ``MARK_BELOW`` the
report and summary.json mark the step; under ``FAIL_BELOW`` the sweep fails the run with the reason.
"""

from __future__ import annotations

import numpy as np

MARK_BELOW = 0.95
FAIL_BELOW = 0.5


def mean_in_flight(starts: np.ndarray, ends: np.ndarray, window_start: float, window_end: float) -> float:
    """Mean requests in flight over ``[window_start, window_end)``: every request's overlap with it, over its length."""
    overlap = np.clip(np.minimum(ends, window_end) - np.maximum(starts, window_start), 0.0, None)
    return float(np.nansum(overlap) / (window_end - window_start))


def sent_rate(starts: np.ndarray, window_start: float, window_end: float) -> float:
    """Requests per second started inside the window: an open-loop step's achieved rate (``starts``: its requests)."""
    return int(((starts >= window_start) & (starts < window_end)).sum()) / (window_end - window_start)


def load_reached(users: int, rate: float | None, in_flight: float, sent_rate: float | None) -> float | None:
    """The share of the named load that ran: sent/rate on an open-loop step, in flight/users on a closed one."""
    if rate is not None:
        return sent_rate / rate if sent_rate is not None and rate > 0 else None
    return in_flight / users if users > 0 else None


def describe_shortfall(label: str, reached: float, in_flight: float, sent: float | None, rate: float | None) -> str:
    """One line for a step that ran less load than it names."""
    ran = f"{sent:.3g} req/s sent" if rate is not None and sent is not None else (
        f"{in_flight:.1f} requests in flight on average")
    return f"{label}: the load that ran was {reached:.0%} of the load named ({ran})"
