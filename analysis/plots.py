"""Small PNG plots against the user count, one line per run, 95% intervals as error bars.

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

Series = tuple[str, list[tuple[int, Estimate]]]


def _per_user(section: RunSection) -> list[tuple[int, Estimate]]:
    return [
        (step.users, step.client_tok_s if step.client_tok_s.value is not None else step.server_tok_s)
        for step in section.figures.steps
    ]


def _series(sections: list[RunSection], name: str) -> list[Series]:
    if name == "aggregate_tok_s":
        return [(s.label, [(st.users, st.aggregate_tok_s) for st in s.figures.steps]) for s in sections]
    if name == "per_user_tok_s":
        return [(s.label, _per_user(s)) for s in sections]
    if name == "ttft_p90":
        return [(s.label, [(st.users, st.ttft_s["p90"]) for st in s.figures.steps]) for s in sections]
    series = []
    for section in sections:
        for column, label in enumerate(section.cost_labels):
            points = [(st.users, row[column]) for st, row in zip(section.figures.steps, section.cost_rows, strict=True)]
            series.append((f"{section.label}: {label}", points))
    return series


PLOTS = {
    "aggregate_tok_s": "aggregate output tok/s",
    "per_user_tok_s": "median per-user tok/s (client)",
    "ttft_p90": "TTFT p90 (s)",
    "usd_per_mtok": "$ per million output tokens",
}


def _draw(path: Path, ylabel: str, series: list[Series]) -> None:
    figure, axes = plt.subplots(figsize=(6, 3.6), dpi=80)
    ticks: set[int] = set()
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
        axes.set_xticks(sorted(ticks), [str(t) for t in sorted(ticks)])
        axes.legend(fontsize=7)
    else:
        axes.text(0.5, 0.5, "no data (see the report's warnings)", ha="center", transform=axes.transAxes)
    axes.set_xlabel("concurrent users")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_plots(sections: list[RunSection], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, ylabel in PLOTS.items():
        path = folder / f"{name}.png"
        _draw(path, ylabel, _series(sections, name))
        written.append(path)
    return written
