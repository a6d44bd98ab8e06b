"""Per-step figures while a sweep runs: output tok/s and TTFT percentiles, for Locust's web UI and CSV.

Why: Locust's own statistics know requests and response times, not tokens; a person watching
a sweep in the web UI wants each step's output tokens a second and time to first token. The
report is still the figure (it counts tokens in the measured window, with intervals); this is
the live view, built from the same records as they end.

Each load process tallies the records it wrote (its ``LiveStats`` hangs off its Locust
environment: ``loadtest.load_process``); a ``--processes``/worker process sends what it tallied
since its last report to the master with Locust's own worker reports, and the master, which owns
the web UI and the CSV files, merges them.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass, field

from core.rundir import RequestRecord

COLUMNS = (
    ("step", "Step"),
    ("users", "Users"),
    ("requests", "Requests"),
    ("errors", "Errors"),
    ("output_tokens", "Output tokens"),
    ("output_tok_s", "Output tok/s (live)"),
    ("ttft_p50_s", "TTFT p50 s"),
    ("ttft_p90_s", "TTFT p90 s"),
)


@dataclass
class StepTally:
    """What the measured requests of one step that have ended add up to."""

    users: int = 0
    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    first_end: float | None = None
    last_end: float | None = None

    def add(self, record: RequestRecord) -> None:
        self.users = record.users
        self.requests += 1
        self.errors += 0 if record.ok else 1
        self.output_tokens += record.completion_tokens or 0
        if record.ok and record.t_first_token is not None:
            self.ttft_ms.append((record.t_first_token - record.t_start) * 1000.0)
        self.first_end = record.t_end if self.first_end is None else min(self.first_end, record.t_end)
        self.last_end = record.t_end if self.last_end is None else max(self.last_end, record.t_end)

    def merge(self, other: dict) -> None:
        self.users = other["users"] or self.users
        self.requests += other["requests"]
        self.errors += other["errors"]
        self.output_tokens += other["output_tokens"]
        self.ttft_ms.extend(other["ttft_ms"])
        for name, pick in (("first_end", min), ("last_end", max)):
            theirs, ours = other[name], getattr(self, name)
            setattr(self, name, theirs if ours is None else ours if theirs is None else pick(ours, theirs))

    def as_message(self) -> dict:
        return {
            "users": self.users,
            "requests": self.requests,
            "errors": self.errors,
            "output_tokens": self.output_tokens,
            "ttft_ms": self.ttft_ms,
            "first_end": self.first_end,
            "last_end": self.last_end,
        }


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


class LiveStats:
    """The tallies of one process, by step index (measured requests only)."""

    def __init__(self) -> None:
        self.steps: dict[int, StepTally] = {}

    def add(self, record: RequestRecord) -> None:
        if record.phase == "measure" and not record.interrupted:
            self.steps.setdefault(record.step, StepTally()).add(record)

    def take(self) -> dict[int, dict]:
        """What was tallied since the last call, as a message for the master (and forget it)."""
        taken = {index: tally.as_message() for index, tally in self.steps.items()}
        self.steps = {}
        return taken

    def merge(self, message: dict) -> None:
        for index, tally in message.items():
            self.steps.setdefault(int(index), StepTally()).merge(tally)

    def rows(self) -> list[dict]:
        rows = []
        for index in sorted(self.steps):
            tally = self.steps[index]
            span = (tally.last_end - tally.first_end) if tally.first_end is not None else 0.0
            p50, p90 = percentile(tally.ttft_ms, 0.5), percentile(tally.ttft_ms, 0.9)
            rows.append({
                "step": index,
                "users": tally.users,
                "requests": tally.requests,
                "errors": tally.errors,
                "output_tokens": tally.output_tokens,
                "output_tok_s": round(tally.output_tokens / span, 1) if span > 0 else None,
                "ttft_p50_s": round(p50 / 1000.0, 3) if p50 is not None else None,  # seconds, as the report says
                "ttft_p90_s": round(p90 / 1000.0, 3) if p90 is not None else None,
            })
        return rows

    def csv_text(self) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=[key for key, _ in COLUMNS], lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows())
        return buffer.getvalue()
