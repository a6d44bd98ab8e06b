"""What the gate shows: a markdown table for the CI log and a JUnit XML file for its test view.

JUnit because every CI system reads it (GitHub Actions through a reporter action, GitLab's
``artifacts:reports:junit``, Jenkins): one testcase per step and figure, named by the figure
and grouped by step, so a regression appears as a failed test with the figures in its message.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from tabulate import tabulate

from analysis.gate import Check, Figure, GateResult, intervals_apart
from analysis.intervals import Estimate
from core.whole_files import whole_file
from core.wording import counted


def figure_cell(figure: Figure, estimate: Estimate | None) -> str:
    """value [low, high] in the figure's unit; '-' when absent."""
    if estimate is None or estimate.value is None:
        return "-"

    def number(value: float) -> str:
        return f"{value * figure.scale:,.{figure.digits}f}"

    text = number(estimate.value)
    if estimate.low is not None and estimate.high is not None:
        text += f" [{number(estimate.low)}, {number(estimate.high)}]"
    return text


def change_cell(check: Check) -> str:
    change = check.change
    if change is None:
        return "-"
    return "from 0" if math.isinf(change) else f"{change:+.1%}"


def intervals_cell(check: Check) -> str:
    """Whether the two 95% intervals overlap, and on which side the run's lies when they do not."""
    base, run = check.baseline, check.run
    if base is None or base.value is None or run.value is None:
        return "-"
    if None in (base.low, base.high, run.low, run.high):
        return "no interval"
    if run.low <= base.high and base.low <= run.high:  # type: ignore[operator]
        return "overlap"
    return "apart, worse" if intervals_apart(check.figure, base, run) else "apart, better"


def verdict(check: Check) -> str:
    if check.failed:
        return "FAIL: " + "; ".join(check.failures)
    if not check.judged:
        return check.note or "not judged"
    return "pass" + (f" ({check.note})" if check.note else "")


def figure_header(figure: Figure) -> str:
    return figure.name + (f" ({figure.unit.strip()})" if figure.unit else "")


def markdown_table(result: GateResult) -> str:
    rows = [
        [
            check.step,
            figure_header(check.figure),
            figure_cell(check.figure, check.baseline),
            figure_cell(check.figure, check.run),
            change_cell(check),
            intervals_cell(check),
            verdict(check),
        ]
        for check in result.checks
    ]
    headers = ["step", "figure", "baseline", "run", "change", "95% intervals", "verdict"]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def outcome_line(result: GateResult) -> str:
    failures = result.failures
    if not failures:
        return f"gate: pass ({counted(len(result.checks), 'check')})"
    named = ", ".join(f"{check.step} {check.figure.name}" for check in failures)
    return f"gate: FAIL, {len(failures)} of {counted(len(result.checks), 'check')}: {named}"


def junit_tree(result: GateResult) -> ET.ElementTree:
    skipped = [check for check in result.checks if not check.judged]
    suite = ET.Element(
        "testsuite",
        name=f"rigbench gate: {result.run.label} against {result.baseline.label}",
        tests=str(len(result.checks)),
        failures=str(len(result.failures)),
        errors="0",
        skipped=str(len(skipped)),
    )
    for check in result.checks:
        case = ET.SubElement(suite, "testcase", classname=f"rigbench gate.{check.step}", name=check.figure.name)
        detail = (
            f"{figure_header(check.figure)}: baseline {figure_cell(check.figure, check.baseline)}, "
            f"run {figure_cell(check.figure, check.run)}; change {change_cell(check)}; "
            f"95% intervals {intervals_cell(check)}"
        )
        if check.failed:
            ET.SubElement(case, "failure", message="; ".join(check.failures), type="rigbench gate").text = detail
        elif not check.judged:
            ET.SubElement(case, "skipped", message=check.note or "not judged")
        else:
            ET.SubElement(case, "system-out").text = detail
    root = ET.Element("testsuites", name="rigbench gate", tests=suite.get("tests", "0"))
    root.set("failures", suite.get("failures", "0"))
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(result: GateResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with whole_file(path, "wb") as handle:  # a full disk leaves the old file or none, never a cut one
        junit_tree(result).write(handle, encoding="utf-8", xml_declaration=True)
    return path
