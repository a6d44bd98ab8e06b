"""Did the load generator keep to an open-loop schedule? Counted from the records after the run.

An open-loop request has its scheduled start (``t_intended``) and the time it was written to
the socket (``t_start``). A start more than ``LATE_START_S`` after the schedule means the load
generator, not the server, fell behind (a busy CPU, the in-flight cap): the run's latency from
``t_intended`` still counts that wait, but the manifest says how often it happened, per step.
Only measured requests count: the warm-up is where a sweep's first dispatch settles.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field

from core.rundir import RunDir, StepWindow
from loadtest.arrivals import LATE_START_S
from loadtest.schedule import stage_label


@dataclass
class LateStarts:
    """Per step: measured open-loop requests, those that started late, and the largest lag."""

    threshold_s: float = LATE_START_S
    measured: dict[int, int] = field(default_factory=dict)
    late: dict[int, int] = field(default_factory=dict)
    worst_s: dict[int, float] = field(default_factory=dict)

    def add(self, record: dict) -> None:
        """One record as read from a shard (a dict: a million records are not made into models)."""
        intended = record.get("t_intended")
        if intended is None or record.get("phase") != "measure":
            return
        step = record.get("step", -1)
        self.measured[step] = self.measured.get(step, 0) + 1
        lag = record.get("t_start", intended) - intended
        if lag > self.threshold_s:
            self.late[step] = self.late.get(step, 0) + 1
        self.worst_s[step] = max(self.worst_s.get(step, 0.0), lag)

    def warnings(self, steps: list[StepWindow]) -> list[str]:
        labels = {step.index: stage_label(step.users, step.rate) for step in steps}
        return [
            f"step {index} ({labels.get(index, '?')}): {late} of {self.measured[index]} measured requests started "
            f"more than {self.threshold_s * 1000:.0f} ms after their scheduled time (worst "
            f"{self.worst_s[index] * 1000:.0f} ms): the load generator fell behind its arrival schedule; "
            "use --processes N, or lower rates"
            for index, late in sorted(self.late.items())
        ]


def note_late_starts(run: RunDir) -> None:
    """Read a run's records once and add the late-start warnings to its manifest (a hand-run
    Locust's end; ``rigbench sweep`` counts them in the one pass it makes over the records)."""
    late = LateStarts()
    for path in run.shard_paths():
        for _, line, _ in run.iter_record_lines(path):
            with contextlib.suppress(ValueError):
                late.add(json.loads(line))
    manifest = run.read_manifest()
    found = [warning for warning in late.warnings(manifest.steps) if warning not in manifest.warnings]
    if found:
        run.update_manifest(warnings=[*manifest.warnings, *found])
