"""The machine's own noise over each step's measured window: how busy other processes kept its CPU, and
how the GPU's clocks held.

Why: two runs of one configuration can differ because the machine was not the same twice: another
tenant's job or a build beside the server takes cores; a card running hot or at its power cap lowers
its clock. With the noise read beside the figures, a comparison whose runs saw different contention
says so, instead of crediting the configuration with the difference.

Definitions:

- Other processes' CPU = ``rigbench_other_cpu_percent`` of the telemetry snapshots taken as the step's
  window closed (their reading covers the window; one snapshot per replica, all the same reading), mean
  over them: the machine's busy share, percent of all its cores (100 = every core busy), less the load
  processes and the server's processes where the server runs on the load machine (``loadtest.telemetry``).
  A server on another machine is not in it: that machine's noise is not measured. None where the run did
  not record it (runs made before it was), never 0.
- SM clock = mean and minimum of the SM clock over every GPU's samples inside the window that carry one.
- Clock event reasons = NVML's bit mask per sample (``nvmlClocksEventReason*``, the older
  ``nvmlClocksThrottleReason*``), each reason with the share of the window's samples that carried it.
  Slowdowns are the reasons that lower the clock under a limit the load met (power, heat, the board, a
  hardware signal); idle, sync boost and the applications or display clock settings are the card's state
  or its configuration, not contention.
- Runs saw different contention (``contention_sentence``) when, at a step both measured (the same load
  and context), other processes' CPU differs by more than 10 points, or the mean SM clocks by more than
  5% of the higher, or one run's GPU slowed for a reason another's, also sampled, never showed there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from tabulate import tabulate

from analysis.figures import RunFigures
from analysis.report_model import RunSection
from analysis.run_name import short_names
from analysis.step import StepFigures
from core.rundir import TelemetrySnapshot
from core.rundir.hardware import FOLDER, GPU_SAMPLES, read_gpu_samples
from core.rundir.jsonl import forms
from core.wording import counted, listed

OTHER_CPU_METRIC = "rigbench_other_cpu_percent"  # loadtest.telemetry's names, as the run directory holds them
SERVER_CPU_METRIC = "rigbench_server_cpu_percent"
MACHINE_CPU_METRIC = "rigbench_machine_cpu_percent"
TITLE = "### Machine noise"
OTHER_CPU_APART_POINTS = 10.0
SM_CLOCK_APART_SHARE = 0.05

# NVML's clock event reasons by bit, named as the nvidia-ml-py binding names them
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
NOT_SLOWDOWNS = {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}


def set_bits(mask: int) -> list[int]:
    return [1 << place for place in range(mask.bit_length()) if mask >> place & 1]


def reason_name(bit: int) -> str:
    """A bit's reason; one NVML did not name here as hex (``0x800``)."""
    return CLOCK_EVENT_REASONS.get(bit, f"{bit:#x}")


def is_slowdown(reason: str) -> bool:
    """Whether a reason lowers the clock under a limit (an unnamed bit is not claimed to)."""
    return reason in CLOCK_EVENT_REASONS.values() and reason not in NOT_SLOWDOWNS


@dataclass(frozen=True)
class StepContention:
    """One step's measured window: the machine's noise over it. A figure the run did not record is None."""

    index: int
    users: int
    rate: float | None
    context_tokens: int
    other_cpu_pct: float | None  # percent of all cores that processes other than the load and the server kept busy
    server_cpu_pct: float | None  # the server's processes, same scale; None where none was seen on this machine
    machine_cpu_pct: float | None
    sm_clock_mean_mhz: float | None
    sm_clock_min_mhz: float | None
    reason_samples: int = 0  # samples in the window carrying a clock event mask
    reasons: dict[str, float] = field(default_factory=dict)  # reason -> share of those samples showing it

    @property
    def slowdowns(self) -> dict[str, float]:
        return {reason: share for reason, share in self.reasons.items() if is_slowdown(reason)}

    @property
    def key(self) -> tuple[bool, float, int]:
        """What pairs it with another run's step: the same kind and load, the same context."""
        return self.rate is not None, self.rate if self.rate is not None else float(self.users), self.context_tokens

    @property
    def at(self) -> str:
        """The step's load as a sentence says it: ``1 user``, ``8 users``, ``2 req/s``."""
        load = f"{self.rate:g} req/s" if self.rate is not None else counted(self.users, "user")
        return f"{load} with {self.context_tokens:,} context tokens" if self.context_tokens else load


@dataclass(frozen=True)
class ClockTrace:
    """Every GPU's samples of the SM clock and of the clock event mask, each with its own times (NaN-free)."""

    clock_t: np.ndarray
    clock_mhz: np.ndarray
    mask_t: np.ndarray
    masks: np.ndarray


def _metric_mean(telemetry: Sequence[TelemetrySnapshot], index: int, metric: str) -> float | None:
    values = [snapshot.metrics[metric] for snapshot in telemetry
              if snapshot.step == index and snapshot.boundary == "end" and metric in snapshot.metrics]
    return float(np.mean(values)) if values else None


@lru_cache(maxsize=8)
def _read_clock_trace(folders: tuple[Path, ...], _stamp: tuple[tuple[str, int, int], ...]) -> ClockTrace:
    """The runs' GPU shards' clocks and masks, read once per version of the files (``_stamp``: each form's path,
    mtime and size): a report reads them for its section and again for its comparison."""
    samples = [sample for folder in folders for sample in read_gpu_samples(folder)]
    clocked = [s for s in samples if s.sm_clock_mhz is not None]
    masked = [s for s in samples if s.throttle_reasons is not None]
    return ClockTrace(np.asarray([s.t for s in clocked], dtype=float),
                      np.asarray([s.sm_clock_mhz for s in clocked], dtype=float),
                      np.asarray([s.t for s in masked], dtype=float),
                      np.asarray([s.throttle_reasons for s in masked], dtype=np.int64))


def clock_trace(figures: RunFigures) -> ClockTrace | None:
    """The run's GPU clocks and masks, None where it sampled no GPU (``RunFigures.gpu_traces`` says so without
    reading the shard again)."""
    if not figures.gpu_traces:
        return None
    folders = tuple(figures.run.folders)  # a resumed sweep's steps were sampled in the runs of its chain
    try:  # each shard plain or packed (``core.rundir.jsonl``), each form there stamped
        stamp = tuple((str(form), (stat := os.stat(form)).st_mtime_ns, stat.st_size)
                      for folder in folders for form in forms(folder / FOLDER / GPU_SAMPLES))
    except OSError:
        return None
    return _read_clock_trace(folders, stamp) if stamp else None


def step_contention(figures: RunFigures, step: StepFigures, trace: ClockTrace | None) -> StepContention:
    telemetry = figures.run.telemetry
    start, end = step.window_start, step.window_end
    clock_mean = clock_min = None
    reasons: dict[str, float] = {}
    masked = 0
    if trace is not None:
        clocks = trace.clock_mhz[(trace.clock_t >= start) & (trace.clock_t <= end)]
        if len(clocks):
            clock_mean, clock_min = float(clocks.mean()), float(clocks.min())
        masks = trace.masks[(trace.mask_t >= start) & (trace.mask_t <= end)]
        masked = len(masks)
        for bit in set_bits(int(np.bitwise_or.reduce(masks)) if masked else 0):
            reasons[reason_name(bit)] = float(np.count_nonzero(masks & bit)) / masked
    return StepContention(
        index=step.index, users=step.users, rate=step.rate, context_tokens=step.context_tokens,
        other_cpu_pct=_metric_mean(telemetry, step.index, OTHER_CPU_METRIC),
        server_cpu_pct=_metric_mean(telemetry, step.index, SERVER_CPU_METRIC),
        machine_cpu_pct=_metric_mean(telemetry, step.index, MACHINE_CPU_METRIC),
        sm_clock_mean_mhz=clock_mean, sm_clock_min_mhz=clock_min, reason_samples=masked, reasons=reasons,
    )


def run_contention(section: RunSection | RunFigures) -> list[StepContention]:
    """Each measured step's noise, in the run's step order (a report's section, or a run's figures)."""
    figures = section.figures if isinstance(section, RunSection) else section
    trace = clock_trace(figures)
    return [step_contention(figures, step, trace) for step in figures.steps]


def _cell(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def _reasons_cell(shares: dict[str, float]) -> str:
    return ", ".join(f"{reason} {share:.0%}" for reason, share in sorted(shares.items(), key=lambda item: -item[1]))


def contention_lines(section: RunSection) -> list[str]:
    """The report's "Machine noise" subsection for one run: a row per step; empty for a run that recorded no noise
    (made before the controller read it, and without GPU samples)."""
    steps = run_contention(section)
    cpu = any(step.other_cpu_pct is not None for step in steps)
    gpu = any(step.sm_clock_mean_mhz is not None or step.reason_samples for step in steps)
    if not cpu and not gpu:
        return []
    open_loop = section.figures.open_loop
    rows = []
    for step in steps:
        row = {"req/s" if open_loop else "users": f"{step.rate:g}" if step.rate is not None else str(step.users)}
        if any(s.context_tokens for s in steps):
            row["context"] = f"{step.context_tokens:,}"
        row |= {
            "other processes' CPU %": _cell(step.other_cpu_pct, ".0f"),
            "server CPU %": _cell(step.server_cpu_pct, ".0f"),
            "machine CPU %": _cell(step.machine_cpu_pct, ".0f"),
            "SM clock MHz (mean)": _cell(step.sm_clock_mean_mhz, ",.0f"),
            "SM clock MHz (min)": _cell(step.sm_clock_min_mhz, ",.0f"),
            "slowdowns (share of samples)": _reasons_cell(step.slowdowns) or ("none" if step.reason_samples else "-"),
        }
        rows.append(row)
    lines = ["", TITLE, "",
             "Over each measured window, percent of all the load machine's cores: what processes other than the load "
             "and the server kept busy, the server's own processes where it runs here, and the whole machine; then "
             "the GPUs' SM clock over their samples and the clock event reasons that lower it under a limit "
             "(power, heat, the board).", ""]
    if cpu and all(step.server_cpu_pct is None for step in steps):
        lines += ["The server's processes were not seen on the load machine: it served from another machine, whose "
                  "noise is not measured here (or, where the warnings say so, ran here unseen and is counted with "
                  "the others).", ""]
    return [*lines, tabulate(rows, headers="keys", tablefmt="github"), ""]


def _cpu_clause(runs: list[tuple[str, list[StepContention]]]) -> str:
    """Where other processes' CPU differs most between two runs at one step, beyond the threshold."""
    widest: tuple[float, str] | None = None
    for key, at in _shared_steps(runs):
        given = [(name, step.other_cpu_pct) for name, step in _at_key(runs, key) if step.other_cpu_pct is not None]
        if len(given) < 2:
            continue
        (low_name, low), (high_name, high) = min(given, key=lambda g: g[1]), max(given, key=lambda g: g[1])
        if high - low > OTHER_CPU_APART_POINTS and (widest is None or high - low > widest[0]):
            widest = (high - low, f"other processes kept {low:.0f}% of the CPU busy in {low_name} and {high:.0f}% "
                                  f"in {high_name} at {at}")
    return widest[1] if widest else ""


def _clock_clause(runs: list[tuple[str, list[StepContention]]]) -> str:
    """Where the mean SM clocks differ most between two runs at one step, beyond the threshold."""
    widest: tuple[float, str] | None = None
    for key, at in _shared_steps(runs):
        given = [(name, step.sm_clock_mean_mhz) for name, step in _at_key(runs, key)
                 if step.sm_clock_mean_mhz is not None]
        if len(given) < 2:
            continue
        (low_name, low), (high_name, high) = min(given, key=lambda g: g[1]), max(given, key=lambda g: g[1])
        apart = (high - low) / high if high > 0 else 0.0
        if apart > SM_CLOCK_APART_SHARE and (widest is None or apart > widest[0]):
            widest = (apart, f"{low_name}'s SM clock averaged {low:,.0f} MHz against {high:,.0f} MHz in {high_name} "
                             f"at {at}")
    return widest[1] if widest else ""


def _slowdown_clauses(runs: list[tuple[str, list[StepContention]]]) -> list[str]:
    """Each slowdown one run's GPU showed at a step where another run's, also sampled, never did: where it was
    most frequent."""
    found: dict[tuple[str, str], tuple[float, str, list[str]]] = {}  # (run, reason) -> share, step, runs without
    for key, at in _shared_steps(runs):
        sampled = [(name, step) for name, step in _at_key(runs, key) if step.reason_samples]
        for name, step in sampled:
            for reason, share in step.slowdowns.items():
                without = [other for other, theirs in sampled if reason not in theirs.reasons]
                if without and share > found.get((name, reason), (0.0, "", []))[0]:
                    found[(name, reason)] = (share, at, without)
    clauses = []
    for (name, reason), (share, at, without) in found.items():
        clauses.append(f"{name}'s GPU slowed for {reason} (in {share:.0%} of its samples at {at}; "
                       f"{listed(without)} did not)")
    return clauses


def _shared_steps(runs: list[tuple[str, list[StepContention]]]) -> list[tuple[tuple[bool, float, int], str]]:
    """The steps at least two runs measured, in the first run's order, each with how a sentence says it."""
    counts: dict[tuple[bool, float, int], list[StepContention]] = {}
    for _, steps in runs:
        for step in steps:
            counts.setdefault(step.key, []).append(step)
    return [(key, steps[0].at) for key, steps in counts.items() if len(steps) > 1]


def _at_key(runs: list[tuple[str, list[StepContention]]], key: tuple[bool, float, int]
            ) -> list[tuple[str, StepContention]]:
    return [(name, step) for name, steps in runs for step in steps if step.key == key]


def contention_sentence(sections: Sequence[RunSection]) -> str:
    """One sentence for a comparison's headline when its runs saw different contention (definitions above):
    the widest gap in other processes' CPU, each slowdown one run's GPU showed and another's did not, and the
    widest gap in mean SM clock; empty when the runs saw alike contention, or for fewer than two runs."""
    if len(sections) < 2:
        return ""
    _, names = short_names([section.figures.run.manifest for section in sections])
    runs = [(name, run_contention(section)) for name, section in zip(names, sections, strict=True)]
    clauses = [_cpu_clause(runs), *_slowdown_clauses(runs), _clock_clause(runs)]
    said = [clause for clause in clauses if clause]
    return f"The runs saw different contention: {'; '.join(said)}." if said else ""
