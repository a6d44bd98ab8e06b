"""What an open-loop dispatcher met that the records cannot show, kept apart from the dispatcher.

Why a module of its own: the dispatcher is a Locust ``User`` (importing it imports Locust, which
monkey-patches the process with gevent), while the sweep controller and the tests that read the
tally must be importable anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_IN_FLIGHT = 4096  # requests streaming at once in one load process


@dataclass
class DispatchTally:
    """What a process's dispatcher met that the records cannot show: arrivals that waited for
    the in-flight cap. Sent to the master with Locust's worker reports, like the live tallies."""

    cap_waits: int = 0
    late_logged: bool = False

    def take(self) -> dict:
        message = {"cap_waits": self.cap_waits}
        self.cap_waits = 0
        return message

    def merge(self, other: dict) -> None:
        self.cap_waits += int(other.get("cap_waits", 0))
