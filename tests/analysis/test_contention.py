"""The machine's noise per step, on hand-made run directories: other processes' CPU from the telemetry the
controller wrote, the GPU's clocks and clock event reasons from the hardware shard, and the comparison's
sentence when runs saw different contention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.contention import (
    CLOCK_EVENT_REASONS,
    contention_lines,
    contention_sentence,
    is_slowdown,
    reason_name,
    run_contention,
    set_bits,
)
from analysis.prices import PriceBook
from analysis.report import build_sections
from core.rundir import LoadSettings, RunDir, TelemetrySnapshot
from core.rundir.hardware import GPU_SAMPLES, GpuSample, append_samples, shard
from loadtest.telemetry import MACHINE_CPU_METRIC, OTHER_CPU_METRIC, SERVER_CPU_METRIC

USERS = (1, 8)
SW_POWER_CAP, SW_THERMAL = 0x4, 0x20


def window(kit, index: int) -> tuple[float, float]:
    start = kit.T0 + index * 100 + 10
    return start, start + 60


def make_run(kit, arm: str) -> Path:
    """Two closed-loop steps (1 and 8 users), each user streaming 21-token replies through its window."""
    steps, records = [], []
    for index, users in enumerate(USERS):
        start, end = window(kit, index)
        steps.append(kit.window(index, users, start, end))
        for user in range(users):
            for number, clock in enumerate(np.arange(start - 5 + user * 0.1, end, 3.0)):
                records.append(kit.record(f"{index}-{user}-{number}", step=index, users=users,
                                          phase="measure" if clock >= start else "warmup", t_start=float(clock)))
    load = LoadSettings(user_steps=list(USERS), warmup_seconds=5, measure_seconds=60, max_tokens=21, arm=arm)
    return kit.make_run(f"20270115T080000Z-tiny-{arm}", steps, {"p0": records}, load=load)


def read_cpu(kit, path: Path, readings: dict[int, list[dict[str, float]]]) -> None:
    """The controller's snapshots: at each window's opening a warm-up reading that must not count (every figure
    99), at its close ``readings[index]`` (one snapshot per replica)."""
    run = RunDir(path)
    for index, closing in readings.items():
        start, end = window(kit, index)
        warmup = {OTHER_CPU_METRIC: 99.0, MACHINE_CPU_METRIC: 99.0}
        run.append_telemetry(TelemetrySnapshot(taken_at=start, step=index, users=USERS[index], boundary="measure",
                                               metrics=warmup))
        for replica, metrics in enumerate(closing):
            run.append_telemetry(TelemetrySnapshot(taken_at=end, step=index, users=USERS[index], boundary="end",
                                                   metrics=metrics, replica=replica if len(closing) > 1 else None))


def sample_clocks(kit, path: Path, clocks: dict[int, list[float]], masks: dict[int, list[int]]) -> None:
    """GPU 0 once a second through each step, cycling through ``clocks[index]`` MHz and ``masks[index]``; a
    sample between them carries neither (the sampler reads clocks once a second, power more often)."""
    samples = []
    for index in clocks:
        start, _ = window(kit, index)
        for n, t in enumerate(np.arange(start - 8, start + 70, 1.0)):
            inside = start <= t <= start + 60
            clock = clocks[index][n % len(clocks[index])] if inside else 210.0  # idle outside the window
            mask = masks[index][n % len(masks[index])] if inside else 0x1
            samples += [GpuSample(t=float(t), gpu=0, power_w=300.0, sm_clock_mhz=clock, throttle_reasons=mask),
                        GpuSample(t=float(t) + 0.5, gpu=0, power_w=300.0)]
    append_samples(shard(path, GPU_SAMPLES), samples)


def rows_of(lines: list[str]) -> list[str]:
    """The table's lines (header, rule, then a row per step) of the subsection's lines."""
    return [line for line in "\n".join(lines).splitlines() if line.startswith("|")]


def sections(*paths: Path):
    return build_sections(list(paths), book=PriceBook([]))


def test_the_bits_are_nvmls_and_only_limits_count_as_slowdowns() -> None:
    pynvml = pytest.importorskip("pynvml")
    for bit, name in CLOCK_EVENT_REASONS.items():
        constant = "".join(part.capitalize() for part in name.split("_"))
        assert getattr(pynvml, f"nvmlClocksThrottleReason{constant}") == bit, name
    mask = 0x1 | SW_POWER_CAP | SW_THERMAL | 0x800
    assert [reason_name(bit) for bit in set_bits(mask)] == ["gpu_idle", "sw_power_cap", "sw_thermal_slowdown", "0x800"]
    assert set_bits(0) == []
    assert [reason for reason in CLOCK_EVENT_REASONS.values() if not is_slowdown(reason)] == [
        "gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"]
    assert not is_slowdown("0x800")


def test_other_processes_cpu_is_the_window_closing_reading_and_an_unrecorded_one_stays_absent(kit) -> None:
    path = make_run(kit, "a")
    read_cpu(kit, path, {
        0: [{OTHER_CPU_METRIC: 10.0, MACHINE_CPU_METRIC: 30.0, SERVER_CPU_METRIC: 5.0},
            {OTHER_CPU_METRIC: 20.0, MACHINE_CPU_METRIC: 40.0, SERVER_CPU_METRIC: 7.0}],
        1: [{MACHINE_CPU_METRIC: 50.0}],  # a run from before the figure: machine only
    })
    [section] = sections(path)
    quiet, busy = run_contention(section)
    assert (quiet.other_cpu_pct, quiet.machine_cpu_pct, quiet.server_cpu_pct) == (15.0, 35.0, 6.0)
    assert (busy.other_cpu_pct, busy.server_cpu_pct, busy.machine_cpu_pct) == (None, None, 50.0)
    assert (quiet.sm_clock_mean_mhz, quiet.reasons, quiet.reason_samples) == (None, {}, 0), "no GPU sampled"
    lines = contention_lines(section)
    assert lines[1] == "### Machine noise"
    table = rows_of(lines)
    assert [cell.strip() for cell in table[2].split("|")[1:-1]] == ["1", "15", "6", "35", "-", "-", "-"]
    assert [cell.strip() for cell in table[3].split("|")[1:-1]] == ["8", "-", "-", "50", "-", "-", "-"]


def test_a_run_that_recorded_no_noise_gets_no_subsection(kit) -> None:
    [section] = sections(make_run(kit, "a"))
    assert contention_lines(section) == []
    assert all(step.other_cpu_pct is None and step.sm_clock_mean_mhz is None for step in run_contention(section))


def test_the_gpus_clock_and_its_reasons_over_each_window(kit) -> None:
    path = make_run(kit, "a")
    sample_clocks(kit, path, clocks={0: [1980.0], 1: [1980.0, 1500.0]},
                  masks={0: [0], 1: [0, SW_POWER_CAP | SW_THERMAL, 0x1, 0]})
    [section] = sections(path)
    quiet, hot = run_contention(section)
    assert (quiet.sm_clock_mean_mhz, quiet.sm_clock_min_mhz, quiet.reasons) == (1980.0, 1980.0, {})
    assert quiet.reason_samples == 61  # the idle samples either side of the window are not in it
    assert hot.sm_clock_min_mhz == 1500.0 and 1500.0 < hot.sm_clock_mean_mhz < 1980.0
    assert hot.reasons == {"gpu_idle": 15 / 61, "sw_power_cap": 15 / 61, "sw_thermal_slowdown": 15 / 61}
    assert hot.slowdowns == {"sw_power_cap": 15 / 61, "sw_thermal_slowdown": 15 / 61}
    rows = rows_of(contention_lines(section))
    assert rows[2].split("|")[-2].strip() == "none"
    assert rows[3].split("|")[-2].strip() == "sw_power_cap 25%, sw_thermal_slowdown 25%"
    assert "were not seen on the load machine" not in "\n".join(contention_lines(section)), "no CPU figure at all"


def test_runs_that_saw_different_contention_say_so_and_alike_runs_say_nothing(kit) -> None:
    quiet, busy, alike = (make_run(kit, arm) for arm in ("quiet", "busy", "alike"))
    for path, other in ((quiet, 3.0), (busy, 41.0), (alike, 9.0)):
        read_cpu(kit, path, {0: [{OTHER_CPU_METRIC: 2.0, MACHINE_CPU_METRIC: 20.0}],
                             1: [{OTHER_CPU_METRIC: other, MACHINE_CPU_METRIC: 60.0}]})
    sample_clocks(kit, quiet, clocks={0: [1980.0], 1: [1980.0]}, masks={0: [0], 1: [0]})
    sample_clocks(kit, alike, clocks={0: [1950.0], 1: [1900.0]}, masks={0: [0x1], 1: [0]})
    sample_clocks(kit, busy, clocks={0: [1980.0], 1: [1620.0]}, masks={0: [0], 1: [SW_THERMAL, 0, 0, 0]})
    assert contention_sentence(sections(quiet, busy)) == (
        "The runs saw different contention: other processes kept 3% of the CPU busy in quiet and 41% in busy at "
        "8 users; busy's GPU slowed for sw_thermal_slowdown (in 26% of its samples at 8 users; quiet did not); "
        "busy's SM clock averaged 1,620 MHz against 1,980 MHz in quiet at 8 users.")
    assert contention_sentence(sections(quiet, alike)) == "", "6 points of CPU and 4% of clock apart, no slowdown"
    assert contention_sentence(sections(quiet)) == ""
