"""Did the load generator keep to an open-loop schedule? Counted from the records after the run.

An open-loop request has its scheduled start (``t_intended``) and the time it was written to
the socket (``t_start``). A start more than ``LATE_START_S`` after the schedule means the load
generator, not the server, fell behind (a busy CPU, the in-flight cap): the run's latency from
``t_intended`` still counts that wait, but the manifest says how often it happened, per step.
Only measured requests count: the warm-up is where a sweep's first dispatch settles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.rundir import RunDir, StepWindow
from core.rundir.columns import read_record_table
from core.wording import counted
from loadtest.arrivals import LATE_START_S
from loadtest.schedule import stage_label


def is_measured(table: pa.Table) -> np.ndarray:
    """Which records of a run's table were sent in a measured window (``phase`` is dictionary-encoded)."""
    return pc.equal(table.column("phase").cast(pa.string()), "measure").to_numpy(zero_copy_only=False)


@dataclass
class LateStarts:
    """Per step: measured open-loop requests, those that started late, and the largest lag."""

    threshold_s: float = LATE_START_S
    measured: dict[int, int] = field(default_factory=dict)
    late: dict[int, int] = field(default_factory=dict)
    worst_s: dict[int, float] = field(default_factory=dict)

    @classmethod
    def of_table(cls, table: pa.Table, threshold_s: float = LATE_START_S) -> LateStarts:
        """Counted over a run's record table (core.rundir.columns); closed-loop records have no schedule."""
        intended = table.column("t_intended").to_numpy()
        chosen = is_measured(table) & ~np.isnan(intended)
        steps = table.column("step").to_numpy()[chosen].astype(int)
        lags = table.column("t_start").to_numpy()[chosen] - intended[chosen]
        found = cls(threshold_s=threshold_s)
        for step in np.unique(steps):
            lag = lags[steps == step]
            found.measured[int(step)] = len(lag)
            found.worst_s[int(step)] = max(0.0, float(lag.max()))
            if (late := int((lag > threshold_s).sum())) > 0:
                found.late[int(step)] = late
        return found

    def warnings(self, steps: list[StepWindow]) -> list[str]:
        labels = {step.index: stage_label(step.users, step.rate) for step in steps}
        return [
            f"step {index} ({labels.get(index, '?')}): {late} of {counted(self.measured[index], 'measured request')} "
            "started "
            f"more than {self.threshold_s * 1000:.0f} ms after their scheduled time (worst "
            f"{self.worst_s[index] * 1000:.0f} ms): the load generator fell behind its arrival schedule; "
            "use --processes N, or lower rates"
            for index, late in sorted(self.late.items())
        ]


def note_late_starts(run: RunDir) -> None:
    """Read a run's records once and add the late-start warnings to its manifest (a hand-run
    Locust's end; ``rigbench sweep`` counts them in the one pass it makes over the records)."""
    manifest = run.read_manifest()
    late = LateStarts.of_table(read_record_table(run, manifest).table)
    found = [warning for warning in late.warnings(manifest.steps) if warning not in manifest.warnings]
    if found:
        run.update_manifest(warnings=[*manifest.warnings, *found])
