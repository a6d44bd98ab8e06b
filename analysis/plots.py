"""Small PNG plots against the offered load, one line per run, 95% intervals as error bars.

The x axis is the user count for closed-loop runs and the offered rate (requests/s) for open-loop
ones. A report that holds both kinds draws each kind in its own files (``<name>.png`` for the
user runs, ``<name>-by-rate.png`` for the rate runs): the two loads share no axis.
matplotlib runs on the Agg backend (no display on a rig or in CI). The $/Mtok plot has one
line per run and price (on-demand, spot, hypothetical types), labelled as in the report.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.intervals import Estimate  # noqa: E402
from analysis.report_model import RunSection  # noqa: E402

Series = tuple[str, list[tuple[float, Estimate]]]
X_LABELS = {False: "concurrent users", True: "offered load (requests/s)"}


def _per_user(section: RunSection) -> list[tuple[float, Estimate]]:
    return [
        (step.load, step.client_tok_s if step.client_tok_s.value is not None else step.server_tok_s)
        for step in section.figures.steps
    ]


def _series(sections: list[RunSection], name: str) -> list[Series]:
    if name == "aggregate_tok_s":
        return [(s.label, [(st.load, st.aggregate_tok_s) for st in s.figures.steps]) for s in sections]
    if name == "per_user_tok_s":
        return [(s.label, _per_user(s)) for s in sections]
    if name == "ttft_p90":
        return [(s.label, [(st.load, st.ttft_s["p90"]) for st in s.figures.steps]) for s in sections]
    series = []
    for section in sections:
        for column, label in enumerate(section.cost_labels):
            points = [(st.load, row[column]) for st, row in zip(section.figures.steps, section.cost_rows, strict=True)]
            series.append((f"{section.label}: {label}", points))
    return series


PLOTS = {
    "aggregate_tok_s": "aggregate output tok/s",
    "per_user_tok_s": "median per-user tok/s (client)",
    "ttft_p90": "TTFT p90 (s)",
    "usd_per_mtok": "$ per million output tokens",
}


def _draw(path: Path, ylabel: str, series: list[Series], open_loop: bool = False) -> None:
    figure, axes = plt.subplots(figsize=(6, 3.6), dpi=80)
    ticks: set[float] = set()
    for label, points in series:
        kept = [(users, e) for users, e in points if e.value is not None]
        if not kept:
            continue
        xs = [users for users, _ in kept]
        ys = [e.value for _, e in kept]
        # A bootstrap interval can sit wholly on one side of a skewed estimate; matplotlib
        # wants non-negative arm lengths, so such an arm is drawn as zero.
        below = [max(0.0, e.value - (e.low if e.low is not None else e.value)) for _, e in kept]
        above = [max(0.0, (e.high if e.high is not None else e.value) - e.value) for _, e in kept]
        axes.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=3, label=label)
        ticks.update(xs)
    if ticks:
        axes.set_xscale("log", base=2)
        axes.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
        axes.legend(fontsize=7)
    else:
        axes.text(0.5, 0.5, "no data (see the report's warnings)", ha="center", transform=axes.transAxes)
    axes.set_xlabel(X_LABELS[open_loop])
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_plots(sections: list[RunSection], folder: Path) -> list[Path]:
    """Every plot of the sections; user runs and rate runs in separate files when both are given."""
    folder.mkdir(parents=True, exist_ok=True)
    closed = [s for s in sections if not s.figures.open_loop]
    opened = [s for s in sections if s.figures.open_loop]
    groups = [(closed, False, ""), (opened, True, "-by-rate" if closed else "")]
    written = []
    for group, open_loop, suffix in groups:
        if not group and (open_loop or opened):
            continue
        for name, ylabel in PLOTS.items():
            path = folder / f"{name}{suffix}.png"
            _draw(path, ylabel, _series(group, name), open_loop)
            written.append(path)
    return written
