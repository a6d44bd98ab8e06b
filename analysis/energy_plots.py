"""The energy plots, for runs that sampled their GPUs: joules per output token against the load, and the
GPUs' power over the run with each step's aggregate tok/s beside it.

Why power over time and not only per step: idle power before the load, the ramp into each step and a
card throttling show there, and no per-step mean shows them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis.plots import DPI, SINGLE_SIZE, STYLE, PlotSpec, _colour, _save, draw_lines  # noqa: E402
from analysis.report_model import RunSection  # noqa: E402
from analysis.run_name import run_names  # noqa: E402

J_PER_TOKEN = PlotSpec("Energy per output token, all GPUs (lower is better)", "joules per output token (J)")


def _sampled(sections: list[RunSection]) -> list[RunSection]:
    return [s for s in sections if any(step.energy and step.energy.j_per_token for step in s.figures.steps)]


def draw_power_over_time(path: Path, section: RunSection, label: str) -> None:
    """All GPUs' power together over the run, the step windows shaded, each window's tok/s on a twin axis."""
    series = [trace.series("power_w") for trace in section.figures.gpu_traces.values()]
    series = [(times, power) for times, power in series if len(times) >= 2]
    if not series:
        return
    t0 = min(times[0] for times, _ in series)
    end = max(times[-1] for times, _ in series)
    interval = section.figures.run.manifest.hardware.interval_s if section.figures.run.manifest.hardware else 0.1
    grid = np.arange(t0, end, interval)
    # each GPU's power on one grid, then summed: samples of different GPUs do not share instants
    total = sum(np.interp(grid, times, power) for times, power in series)
    with plt.rc_context(STYLE):
        figure, axes = plt.subplots(figsize=SINGLE_SIZE, dpi=DPI, layout="constrained")
        axes.plot(grid - t0, total, color=_colour(0), linewidth=1.0)
        axes.set_ylim(bottom=0)
        axes.set_xlabel("seconds since sampling began")
        axes.set_ylabel("GPU power, all GPUs (W)")
        twin = axes.twinx()
        for step in section.figures.steps:
            start, end = step.window_start - t0, step.window_end - t0
            axes.axvspan(start, end, color="#56B4E9", alpha=0.12, linewidth=0)
            twin.hlines(step.aggregate_tok_s.value, start, end, color=_colour(4), linewidth=2.0)
            axes.text((start + end) / 2, 0, step.load_label.split()[0], ha="center", va="bottom", fontsize=7)
        twin.set_ylim(bottom=0)
        twin.set_ylabel("aggregate output tok/s in each window")
        axes.set_title(f"{label}: power over the run, measured windows shaded", fontsize=11)
        _save(figure, path)


def write_energy_plots(sections: list[RunSection], folder: Path, open_loop: bool, suffix: str = "") -> list[Path]:
    """``j_per_token.png`` across the runs that sampled energy and one ``power_over_time`` per such run."""
    sampled = _sampled(sections)
    if not sampled:
        return []
    labels = run_names([s.figures.run.manifest for s in sampled])
    lines = [(label, [(step.load, step.energy.j_per_token) for step in s.figures.steps
                      if step.energy and step.energy.j_per_token])
             for label, s in zip(labels, sampled, strict=True)]
    written = [folder / f"j_per_token{suffix}.png"]
    draw_lines(written[0], J_PER_TOKEN, lines, open_loop)
    for index, (label, section) in enumerate(zip(labels, sampled, strict=True)):
        path = folder / f"power_over_time{suffix}{'' if len(sampled) == 1 else f'-{index + 1}'}.png"
        draw_power_over_time(path, section, label)
        if path.exists():
            written.append(path)
    return written


def energy_plot_files(sections: list[RunSection], folder: Path) -> list[Path]:
    """The energy plots of the user runs and of the rate runs (``-by-rate``), as ``write_plots`` splits them."""
    closed = [s for s in sections if not s.figures.open_loop]
    opened = [s for s in sections if s.figures.open_loop]
    return write_energy_plots(closed, folder, False) + write_energy_plots(opened, folder, True,
                                                                         "-by-rate" if closed else "")
