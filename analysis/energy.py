"""Energy per output token, per step, from the run's hardware samples.

A step's energy is read from the card's own cumulative counter where it has one (NVML's total
energy, interpolated at the window's edges) and otherwise integrated from power samples
(trapezoids, the power interpolated at the edges): the counter does not miss what happens between
samples. Joules per output token is the window's energy over its output tokens, and its 95%
interval comes from the same sub-windows as the throughput's: each sub-window is one paired
observation (its joules, its tokens) of a ratio of sums. Idle power is the median of the samples
before the load began. Electricity per million tokens is J/token x 10^6 / 3.6 x 10^6 J per kWh x the
price per kWh; a card bought outright adds its price spread over its years of service.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from analysis import intervals
from analysis.intervals import Estimate
from core.rundir.hardware import CpuEnergySample, GpuSample
from core.strict import Strict

J_PER_KWH = 3.6e6
HOURS_PER_YEAR = 8766.0  # 365.25 days


@dataclass(frozen=True)
class WindowEnergy:
    """One device's (a GPU, or a RAPL domain) energy over a window, and how it was read."""

    joules: float | None
    method: str  # "counter", "integrated power" or "no samples"
    mean_w: float | None
    peak_w: float | None


TRACE_FIELDS = ("power_w", "energy_j", "sm_util_pct", "memory_used_mib")


@dataclass(frozen=True)
class GpuTrace:
    """One GPU's samples as arrays sorted by time (NaN where a sample lacks a field), made once per run: a
    step's window and each of its sub-windows then read slices of them instead of sorting the samples again."""

    gpu: int
    t: np.ndarray
    fields: dict[str, np.ndarray]

    def series(self, field: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of the samples that carry ``field``."""
        values = self.fields[field]
        given = ~np.isnan(values)
        return self.t[given], values[given]

    def within(self, field: str, start: float, end: float) -> np.ndarray:
        times, values = self.series(field)
        return values[(times >= start) & (times <= end)]


def gpu_traces(samples: Sequence[GpuSample]) -> dict[int, GpuTrace]:
    """Every GPU's trace, by GPU index."""
    grouped: dict[int, list[GpuSample]] = defaultdict(list)
    for sample in samples:
        grouped[sample.gpu].append(sample)
    traces = {}
    for gpu, series in sorted(grouped.items()):
        series.sort(key=lambda sample: sample.t)
        fields = {name: np.asarray([np.nan if getattr(s, name) is None else getattr(s, name) for s in series],
                                   dtype=float) for name in TRACE_FIELDS}
        traces[gpu] = GpuTrace(gpu, np.asarray([s.t for s in series], dtype=float), fields)
    return traces


def _covers(times: np.ndarray, start: float, end: float) -> bool:
    return len(times) >= 2 and times[0] <= start and times[-1] >= end


def counter_joules(times: np.ndarray, counter: np.ndarray, start: float, end: float) -> float | None:
    """A cumulative counter's increase over [start, end], interpolated at both edges; None when the samples do
    not reach both edges."""
    if not _covers(times, start, end):
        return None
    return float(np.interp(end, times, counter) - np.interp(start, times, counter))


def integrated_joules(times: np.ndarray, power: np.ndarray, start: float, end: float) -> float | None:
    """Power integrated over [start, end] by trapezoids, the power interpolated at the edges."""
    if not _covers(times, start, end):
        return None
    inside = (times > start) & (times < end)
    t = np.concatenate(([start], times[inside], [end]))
    p = np.concatenate(([np.interp(start, times, power)], power[inside], [np.interp(end, times, power)]))
    return float(np.trapezoid(p, t))


def gpu_window_energy(trace: GpuTrace | None, start: float, end: float) -> WindowEnergy:
    """One GPU over [start, end]: the counter where it covers the window, else integrated power."""
    if trace is None:
        return WindowEnergy(None, "no samples", None, None)
    inside = trace.within("power_w", start, end)
    mean_w = float(inside.mean()) if len(inside) else None
    peak_w = float(inside.max()) if len(inside) else None
    joules = counter_joules(*trace.series("energy_j"), start, end)
    if joules is not None:
        return WindowEnergy(joules, "counter", mean_w, peak_w)
    joules = integrated_joules(*trace.series("power_w"), start, end)
    return WindowEnergy(joules, "integrated power" if joules is not None else "no samples", mean_w, peak_w)


def cpu_window_joules(samples: Sequence[CpuEnergySample], start: float, end: float) -> dict[str, float | None]:
    """Each RAPL domain's energy over [start, end] from its (unwrapped) counter."""
    domains: dict[str, list[CpuEnergySample]] = defaultdict(list)
    for sample in samples:
        domains[sample.domain].append(sample)
    found = {}
    for domain, series in domains.items():
        times = np.asarray([s.t for s in series], dtype=float)
        counter = np.asarray([s.energy_j for s in series], dtype=float)
        found[domain] = counter_joules(times, counter, start, end)
    return found


def idle_power_w(traces: dict[int, GpuTrace], before: float) -> float | None:
    """All GPUs' idle power together: the sum of each GPU's median power before the load began (None when the
    sampler started with it)."""
    medians = []
    for trace in traces.values():
        times, power = trace.series("power_w")
        values = power[times < before]
        if len(values):
            medians.append(float(np.median(values)))
    return sum(medians) if medians else None


def joules_per_token(joules: Sequence[float], tokens: Sequence[float]) -> Estimate:
    """J per output token over a window's sub-windows: sum(J) / sum(tokens), a ratio of sums with its 95%
    interval, each sub-window one paired observation."""
    return intervals.ratio_of_sums(np.asarray(joules, dtype=float), np.asarray(tokens, dtype=float))


def sub_window_joules(traces: dict[int, GpuTrace], edges: Sequence[float]) -> list[float] | None:
    """All GPUs' joules per sub-window between consecutive ``edges``; None when any GPU's samples do not cover
    a sub-window."""
    per_window = np.zeros(len(edges) - 1)
    for trace in traces.values():
        for index, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            energy = gpu_window_energy(trace, a, b).joules
            if energy is None:
                return None
            per_window[index] += energy
    return per_window.tolist()


def electricity_usd_per_mtok(j_per_token: float, usd_per_kwh: float) -> float:
    return j_per_token * 1e6 / J_PER_KWH * usd_per_kwh


def card_usd_per_hour(card_usd: float, years: float) -> float:
    """A card bought outright, its price spread evenly over its years of service."""
    return card_usd / (years * HOURS_PER_YEAR)


@dataclass(frozen=True)
class EnergyPrices:
    """What a local card's energy and purchase cost (``--kwh-price``, ``--card-usd``, ``--card-years``)."""

    usd_per_kwh: float | None = None
    card_usd: float | None = None
    card_years: float = 3.0

    @property
    def given(self) -> bool:
        return self.usd_per_kwh is not None or self.card_usd is not None


class GpuStepEnergy(Strict):
    """One GPU over a step's measured window."""

    gpu: int
    joules: float | None
    method: str
    mean_w: float | None
    peak_w: float | None
    sm_util_pct: float | None = Field(None, description="mean over the window's samples")
    memory_used_mib: float | None = Field(None, description="the most the window's samples saw")


class StepEnergy(Strict):
    """What the step's window cost in energy: every GPU, their total, and per output token with its interval."""

    gpus: list[GpuStepEnergy]
    joules: float | None = Field(description="all GPUs over the window")
    mean_w: float | None = Field(description="all GPUs' mean power together")
    j_per_token: Estimate | None = Field(description="all GPUs' joules per output token (lower is better)")
    cpu_joules: dict[str, float | None] = Field(default_factory=dict, description="per RAPL domain")
    cpu_j_per_token: float | None = None


def _mean(trace: GpuTrace, field: str, start: float, end: float) -> float | None:
    values = trace.within(field, start, end)
    return float(values.mean()) if len(values) else None


def _most(trace: GpuTrace, field: str, start: float, end: float) -> float | None:
    values = trace.within(field, start, end)
    return float(values.max()) if len(values) else None


def step_energy(traces: dict[int, GpuTrace], cpu_samples: Sequence[CpuEnergySample], start: float,
                end: float, tokens: float, sub_window_tokens: Sequence[float]) -> StepEnergy | None:
    """The window's energy, or None when no sample reaches into it. ``tokens``: the step's output tokens (as
    its aggregate counts them); ``sub_window_tokens``: the same window cut into equal sub-windows, whose
    J/token ratios give the interval (scaled so that its value is the window's own)."""
    gpus = []
    for index, trace in traces.items():
        window = gpu_window_energy(trace, start, end)
        gpus.append(GpuStepEnergy(gpu=index, joules=window.joules, method=window.method, mean_w=window.mean_w,
                                  peak_w=window.peak_w, sm_util_pct=_mean(trace, "sm_util_pct", start, end),
                                  memory_used_mib=_most(trace, "memory_used_mib", start, end)))
    cpu = cpu_window_joules(cpu_samples, start, end)
    if not gpus and not cpu:
        return None
    measured = [gpu.joules for gpu in gpus]
    joules = sum(measured) if measured and all(j is not None for j in measured) else None  # type: ignore[misc]
    powers = [gpu.mean_w for gpu in gpus]
    mean_w = sum(powers) if powers and all(p is not None for p in powers) else None  # type: ignore[misc]
    per_token = None
    if joules is not None and tokens > 0:
        edges = np.linspace(start, end, len(sub_window_tokens) + 1)
        sub_joules = sub_window_joules(traces, edges.tolist())
        value = joules / tokens
        if sub_joules is not None:
            spread = joules_per_token(sub_joules, sub_window_tokens)
            scale = value / spread.value if spread.value else 1.0
            per_token = Estimate(value, None if spread.low is None else spread.low * scale,
                                 None if spread.high is None else spread.high * scale, spread.n,
                                 f"{spread.method} over {spread.n} sub-windows")
        else:
            per_token = Estimate(value, None, None, 1, "no sub-window interval (samples do not cover each)")
    # packages and their DRAM: a package's core and uncore zones (and psys, the platform) are inside it
    counted = [value for domain, value in cpu.items() if "/" not in domain and not domain.startswith("psys")
               or domain.endswith("/dram")]
    cpu_total = None if not counted or any(value is None for value in counted) else sum(counted)  # type: ignore[arg-type]
    cpu_per_token = cpu_total / tokens if cpu_total is not None and tokens > 0 else None
    return StepEnergy(gpus=gpus, joules=joules, mean_w=mean_w, j_per_token=per_token, cpu_joules=cpu,
                      cpu_j_per_token=cpu_per_token)
