"""The report's "Between runs" section: each arm's figures over its repeats, and the arms set against the first.

Why a section of its own: every other table of the report holds one run's figures with intervals from inside
that run; a choice between arms rests on where a second run would land, which only repeats show. A figure
here is the mean of an arm's runs with its Student-t interval between them (n = runs), and a ratio is judged
beyond noise only against that spread (``analysis.repeats``); with one run of an arm it says the spread is
unknown instead of giving a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from analysis.intervals import Estimate
from analysis.repeats import (
    FIGURES,
    MEASURE_IT,
    ArmRatio,
    ArmRuns,
    arms_of,
    between_runs,
    compare_arms,
    repeated,
    split_rounds,
    spread,
)
from analysis.report_model import RunSection

INTRO = (
    "Each figure is the mean over an arm's runs with its 95% interval between them (Student t, n = runs), so it "
    "holds whatever moves a run as a whole: the machine's other work, clocks, the server's warm state. Spread is "
    "the coefficient of variation between runs. B/A is judged beyond noise only when its interval between runs "
    "leaves out 1: paired t over the rounds when the arms ran interleaved in one series (A B A B), else Welch's t "
    "on the log figures."
)


def _spread_cell(values: list[float]) -> str:
    share = spread(values)
    return "-" if share is None else f"{share:.1%}"


def arm_table(arms: Sequence[ArmRuns]) -> str:
    """Per arm and step: each figure between runs and its spread."""
    rows = []
    for arm in arms:
        for key in arm.step_keys():
            row = [arm.label, arm.step_label(key), arm.repeats]
            for figure in FIGURES:
                values = list(arm.values(figure, key).values())
                estimate = between_runs(values)
                row += [_between(estimate, figure.digits), _spread_cell(values)]
            rows.append(row)
    headers = ["arm", "step", "runs"]
    for figure in FIGURES:
        headers += [f"{figure.name}{figure.unit} [95% between runs]", "spread"]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _between(estimate: Estimate, digits: int) -> str:
    if estimate.value is None:
        return "-"
    return estimate.short(digits) + ("" if estimate.low is not None else " (one run)")


def ratio_table(a: ArmRuns, b: ArmRuns, rows: list[ArmRatio]) -> str:
    table = [[row.step, row.figure.name, row.ratio.format(3) if row.ratio.value is not None else "-",
              _verdict_cell(row), row.ratio.method] for row in rows]
    return tabulate(table, headers=["step", "figure", f"{b.label} / {a.label} [95%]", "verdict", "method"],
                    tablefmt="github", disable_numparse=True)


def _verdict_cell(row: ArmRatio) -> str:
    if row.verdict != "beyond noise":
        return row.verdict
    return "beyond noise: " + ("better" if row.better else "worse")


def between_runs_lines(sections: Sequence[RunSection]) -> list[str]:
    """The section's lines; none for one run, or for runs of different load kinds (not paired)."""
    if len(sections) < 2 or len({section.figures.open_loop for section in sections}) > 1:
        return []
    arms = arms_of(sections)
    if not repeated(arms):
        return ["## Between runs", "", f"Each of the {len(arms)} arms ran once, so the spread between runs is unknown: "
                "the comparisons below are measured, not judged (their intervals hold the noise inside each run "
                f"only). {MEASURE_IT}.", ""]
    lines = ["## Between runs", "", INTRO, "", arm_table(arms), ""]
    first = arms[0]
    unknown = False
    for other in arms[1:]:
        rows = compare_arms(first, other)
        if not rows:
            continue
        unknown = unknown or any(row.verdict == "unknown" for row in rows)
        lines += [f"### {other.label} against {first.label}", "", ratio_table(first, other, rows), ""]
    if unknown:
        lines += [f"Where an arm ran once, the spread between runs is unknown: no difference is called. {MEASURE_IT}.",
                  ""]
    return lines


def aa_lines(arm: ArmRuns) -> list[str]:
    """``rigbench selftest --aa``: the spread between one arm's runs, each run's figure beside it, and with four
    runs or more the arm set against itself (odd runs against even runs), which must not be called different."""
    rows = []
    for key in arm.step_keys():
        for figure in FIGURES:
            values = arm.values(figure, key)
            rows.append([arm.step_label(key), figure.name + figure.unit,
                         ", ".join(f"{values[index]:.{figure.digits}f}" if index in values else "-"
                                   for index in arm.indexes),
                         _between(between_runs(list(values.values())), figure.digits),
                         _spread_cell(list(values.values()))])
    lines = [tabulate(rows, headers=["step", "figure", "each run", "mean [95% between runs]", "spread"],
                      tablefmt="github", disable_numparse=True), ""]
    if arm.repeats >= 4:
        a, b = split_rounds(arm)
        lines += [f"A/A: {b.label} against {a.label}, paired by round:", "", ratio_table(a, b, compare_arms(a, b)), ""]
    else:
        lines += ["A/A verdict: needs 4 runs or more (odd runs against even runs, two rounds at least).", ""]
    return lines
