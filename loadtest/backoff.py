"""How long a closed-loop user waits after a refusal before its next request.

A user that answers a refusal with its next request at once turns an overloaded server's 503s
into thousands of requests a second, and the error-rate rule then stops the sweep on a storm
the load generator made. So, as a good HTTP client does: after a refused connection or an
overload answer (429, 502, 503, 504) the user waits, doubling from ``FIRST_S`` up to ``CAP_S``
with full jitter (a random share of the doubled wait, so users that were refused together do
not return together), and never less than the server's ``Retry-After`` (itself bounded by
``RETRY_AFTER_CAP_S``, so a server asking for an hour does not end the step in silence). Any
other answer resets the wait. An open loop does not back off: its arrival schedule is the load.

A refused connection doubles only up to ``CONNECT_CAP_S``: nothing listens, so a retry costs the
server nothing (its kernel answers), and a server that restarts (``LoadSettings.outage_seconds``,
``--ride-out``) gets its users back within a second of listening again, not after up to 5 s more
of an outage that is over.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass, field

FIRST_S = 0.05
CAP_S = 5.0
CONNECT_CAP_S = 1.0
RETRY_AFTER_CAP_S = 30.0
# The answers that mean "not now": the server is gone, overloaded or asks the client to slow down.
REFUSAL_KINDS = frozenset({"connect", "http_429", "http_502", "http_503", "http_504"})


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from now (delta-seconds or an HTTP-date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class Backoff:
    """One user's wait before its next request, fed the kind of each answer it gets."""

    wait_s: float = 0.0
    ceiling_s: float = 0.0  # the doubling bound the jitter draws under
    rng: random.Random = field(default_factory=random.Random)

    def after(self, error_kind: str | None, retry_after_s: float | None = None) -> float:
        """The wait after an answer of ``error_kind`` (None: a success)."""
        if error_kind not in REFUSAL_KINDS:
            self.wait_s = self.ceiling_s = 0.0
            return 0.0
        cap = CONNECT_CAP_S if error_kind == "connect" else CAP_S
        self.ceiling_s = min(cap, max(FIRST_S, self.ceiling_s * 2))
        wait = self.rng.uniform(FIRST_S, self.ceiling_s)
        if retry_after_s is not None:
            wait = max(wait, min(retry_after_s, RETRY_AFTER_CAP_S))
        self.wait_s = wait
        return wait
