"""The CPU of a tool's whole process tree while it runs, sampled, so it can be read over any span."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SAMPLE_SECONDS = 0.2  # CPU sampling period: a process that exits loses at most this much of its CPU


@dataclass
class CpuTrace:
    """Cumulative CPU-seconds (user + system) of a process tree, sampled: (unix time, seconds)."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    lifetime_seconds: float | None = None  # from the kernel's accounting of waited-for children

    def at(self, when: float) -> float:
        """Cumulative CPU at ``when``, linear between samples, clamped at the ends."""
        if not self.samples:
            return 0.0
        times = [t for t, _ in self.samples]
        i = bisect_left(times, when)
        if i == 0:
            return self.samples[0][1]
        if i >= len(self.samples):
            return self.samples[-1][1]
        (t0, c0), (t1, c1) = self.samples[i - 1], self.samples[i]
        return c0 + (c1 - c0) * ((when - t0) / (t1 - t0) if t1 > t0 else 1.0)

    def between(self, start: float, end: float) -> float:
        return max(0.0, self.at(end) - self.at(start))


def _tree_cpu(root: psutil.Process, seen: dict[tuple[int, float], float]) -> float:
    """Add the tree's current CPU times to ``seen`` (keyed by pid and start time, so a reused pid
    is a new process) and return the sum over every process ever seen."""
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        processes = [root]
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                seen[(process.pid, process.create_time())] = times.user + times.system
        except psutil.Error:
            continue
    return sum(seen.values())


@dataclass
class Outcome:
    returncode: int | None
    seconds: float
    cpu: CpuTrace
    timed_out: bool
    log_tail: str


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def run_measured(command: list[str], cwd: Path, log_path: Path, timeout: float, env: dict | None = None) -> Outcome:
    """Run a tool to its end with its output in ``log_path``, sampling its tree's CPU."""
    seen: dict[tuple[int, float], float] = {}
    trace = CpuTrace()
    before = _children_cpu()
    started = time.time()
    timed_out = False
    with open(log_path, "wb") as log:
        process = psutil.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None:
            trace.samples.append((time.time(), _tree_cpu(process, seen)))
            if time.time() - started > timeout:
                timed_out = True
                with contextlib.suppress(psutil.Error):
                    for child in process.children(recursive=True):
                        child.kill()
                    process.kill()
                break
            time.sleep(SAMPLE_SECONDS)
        returncode = process.wait()
    trace.samples.append((time.time(), sum(seen.values())))
    trace.lifetime_seconds = _children_cpu() - before
    tail = log_path.read_text(errors="replace")[-3000:]
    return Outcome(returncode, time.time() - started, trace, timed_out, tail)
