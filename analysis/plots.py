"""Small PNG plots against the user count, one line per run, 95% intervals as error bars.

matplotlib runs on the Agg backend (no display on a rig or in CI).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.intervals import Estimate  # noqa: E402
from analysis.report_model import RunSection  # noqa: E402

PlotValue = Callable[[RunSection, int], Estimate | None]


def _per_user(section: RunSection, i: int) -> Estimate:
    step = section.figures.steps[i]
    return step.client_tok_s if step.client_tok_s.value is not None else step.server_tok_s


def _cost(section: RunSection, i: int) -> Estimate | None:
    priced = section.cost_rows[i]
    return priced[0] if priced else None


PLOTS: dict[str, tuple[str, PlotValue]] = {
    "aggregate_tok_s.png": ("aggregate output tok/s", lambda s, i: s.figures.steps[i].aggregate_tok_s),
    "per_user_tok_s.png": ("median per-user tok/s (client)", _per_user),
    "ttft_p90.png": ("TTFT p90 (s)", lambda s, i: s.figures.steps[i].ttft_s["p90"]),
    "usd_per_mtok.png": ("$ per million output tokens", _cost),
}


def _draw(path: Path, ylabel: str, sections: list[RunSection], value: PlotValue, title_note: str) -> None:
    figure, axes = plt.subplots(figsize=(6, 3.6), dpi=80)
    for section in sections:
        xs, ys, lows, highs = [], [], [], []
        for i, step in enumerate(section.figures.steps):
            estimate = value(section, i)
            if estimate is None or estimate.value is None:
                continue
            xs.append(step.users)
            ys.append(estimate.value)
            lows.append(estimate.value - (estimate.low if estimate.low is not None else estimate.value))
            highs.append((estimate.high if estimate.high is not None else estimate.value) - estimate.value)
        if xs:
            axes.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=section.label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("concurrent users")
    axes.set_ylabel(ylabel)
    if title_note:
        axes.set_title(title_note, fontsize=8)
    axes.grid(True, alpha=0.3)
    if sections:
        axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_plots(sections: list[RunSection], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (ylabel, value) in PLOTS.items():
        note = ""
        if name == "usd_per_mtok.png":
            labels = {s.cost_labels[0] for s in sections if s.cost_labels}
            note = "price: " + "; ".join(sorted(labels)) if labels else "no price known"
        path = folder / name
        _draw(path, ylabel, sections, value, note)
        written.append(path)
    return written
