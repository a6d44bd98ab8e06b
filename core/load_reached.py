"""Did a step run the load it names? Little's law over the records, one definition for the sweep and the analysis.

A closed-loop step of N users should hold N requests in flight through its measured window; an
open-loop step should send its rate. A step whose users could not all be started, or whose users
spent the window backing off, still "completes" with figures that look right for the load it
names. So the load that ran is measured: the mean number of requests in flight over the window
(each request's time between its start and its end inside the window, summed, over the window's
length) against the users, or the achieved send rate against the rate. Under ``MARK_BELOW`` the
report and summary.json mark the step; under ``FAIL_BELOW`` the sweep fails the run with the reason.

A user running conversations (``--sessions``) thinks between its turns: the think time is its load
too (the load named is N users, each sending or thinking), so a turn holds its user until the user's
next request starts, its last one until the sweep stops sending (``user_held_until``), and the users
busy that way are set against N.
"""

from __future__ import annotations

import numpy as np

MARK_BELOW = 0.95
FAIL_BELOW = 0.5
SESSION_BUSY = "users in a turn or thinking"  # what a sessions step's load counts (``user_held_until``)


def mean_in_flight(starts: np.ndarray, ends: np.ndarray, window_start: float, window_end: float) -> float:
    """Mean requests in flight over ``[window_start, window_end)``: every request's overlap with it, over its length."""
    overlap = np.clip(np.minimum(ends, window_end) - np.maximum(starts, window_start), 0.0, None)
    return float(np.nansum(overlap) / (window_end - window_start))


def session_users(conversations: np.ndarray) -> np.ndarray:
    """One code per simulated user from the records' conversation ids (``<shard>/u<user>/c<n>``: the part
    before the conversation's number), -1 for a request of no conversation."""
    users = np.array([c.rsplit("/c", 1)[0] if isinstance(c, str) else "" for c in conversations], dtype=object)
    codes = np.full(len(users), -1)
    named = users != ""
    if named.any():
        codes[named] = np.unique(users[named], return_inverse=True)[1]
    return codes


def user_held_until(users: np.ndarray, starts: np.ndarray, ends: np.ndarray, load_end: float) -> np.ndarray:
    """When each request let its user go: a session user's request at the start of that user's next one
    (it thought in between, or began its next conversation at once), its last request at ``load_end``
    (the end of the last measured window: it was thinking when the sweep stopped sending), every other
    request (a one-shot prompt) at its end. ``users``: codes, negative for a request of no user's session."""
    held = np.array(ends, dtype=float, copy=True)
    rows = np.flatnonzero(np.asarray(users) >= 0)
    if not len(rows):
        return held
    order = rows[np.lexsort((starts[rows], users[rows]))]
    first, then = order[:-1], order[1:]
    same = users[then] == users[first]
    held[first[same]] = np.fmax(held[first[same]], starts[then[same]])
    last = np.append(first[~same], order[-1])
    held[last] = np.fmax(held[last], load_end)
    return held


def sent_rate(starts: np.ndarray, window_start: float, window_end: float) -> float:
    """Requests per second started inside the window: an open-loop step's achieved rate (``starts``: its requests)."""
    return int(((starts >= window_start) & (starts < window_end)).sum()) / (window_end - window_start)


def load_reached(users: int, rate: float | None, in_flight: float, sent_rate: float | None) -> float | None:
    """The share of the named load that ran: sent/rate on an open-loop step, in flight/users on a closed one."""
    if rate is not None:
        return sent_rate / rate if sent_rate is not None and rate > 0 else None
    return in_flight / users if users > 0 else None


def describe_shortfall(label: str, reached: float, in_flight: float, sent: float | None, rate: float | None,
                       busy: str = "requests in flight") -> str:
    """One line for a step that ran less load than it names; ``busy`` names what ``in_flight`` counts."""
    ran = f"{sent:.3g} req/s sent" if rate is not None and sent is not None else (
        f"{in_flight:.1f} {busy} on average")
    return f"{label}: the load that ran was {reached:.0%} of the load named ({ran})"
