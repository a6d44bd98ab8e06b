"""What a loop leaves: each rig's hours and cost, one cross-run report, and the capacity plan.

The cost per rig is launch to destroy at the price it ran at (spot at launch, else
on-demand), which is what the bill says within the per-second rounding; the plan ranks the
measured rigs by $/h to serve the target load, with the same conservative reading as
``rigbench plan``.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text
from tabulate import tabulate

from analysis.plan import Targets, plan_table, plans_for_sections
from analysis.report import build_sections, write_files
from core.errors import RigbenchError, RunDirError
from core.rundir import RunDir
from rigbench.cloud.record import CloudRunFolder, CloudRunRecord
from rigbench.cloud.settings import CloudSettings
from rigbench.decode_bytes import decode_bytes_for_runs

REPORT_FOLDER = "report"
PLAN_FILE = "plan.md"


def final_table(record: CloudRunRecord) -> str:
    rows = []
    for name, rig in record.rigs.items():
        hours, cost = rig.hours, rig.cost_usd
        attempts = ", ".join(f"{a.zone or '-'}:{'ok' if a.ok else a.failure_code or 'failed'}" for a in rig.attempts)
        rows.append([name, rig.instance_type or "-", rig.zone or "-", rig.market or "-",
                     "-" if rig.usd_per_hour is None else f"{rig.usd_per_hour:.4f}",
                     "-" if hours is None else f"{hours:.3f}", "-" if cost is None else f"{cost:.3f}",
                     rig.status + (" (up)" if rig.up else ""), len(rig.runs), attempts or "-"])
    return tabulate(rows, headers=["stack", "type", "zone", "market", "$/h", "hours", "cost $", "status", "runs",
                                   "attempts"])


def run_paths(folder: CloudRunFolder, record: CloudRunRecord) -> list[Path]:
    paths = []
    for rig in record.rigs.values():
        for relative in rig.runs:
            path = folder.root / relative
            if (path / "manifest.json").is_file():
                paths.append(path)
    return paths


def has_measured_window(path: Path) -> bool:
    """Whether the run closed a measured window. A sweep stopped in its first step (the loop was stopped,
    or the rig failed, and the fetch before destroy brought it home) has none, and one such run would stop
    the report of every other; a run that cannot be read is kept, for the report to say why."""
    try:
        steps = RunDir(path).read_manifest().steps
    except RunDirError:
        return True
    return any(step.measure_end is not None and step.measure_end > step.measure_start for step in steps)


def write_report_and_plan(settings: CloudSettings, folder: CloudRunFolder, record: CloudRunRecord,
                          console: Console) -> None:
    """The cross-run report of every rig's measured runs and the plan over them, into the loop's folder."""

    runs = run_paths(folder, record)
    unmeasured = [path for path in runs if not has_measured_window(path)]
    if unmeasured:
        console.print(Text("left out of the report, stopped before a measured window ended: "
                           + ", ".join(path.name for path in unmeasured)))
        runs = [path for path in runs if path not in unmeasured]
    if not runs:
        console.print("no measured runs came home: no report, no plan")
        return
    try:
        sections = build_sections(runs, decode_bytes=decode_bytes_for_runs(runs, []))
        written = write_files(sections, folder.root / REPORT_FOLDER, ("md", "html"))
        record.report = folder.relative(written[0])
        targets = Targets(users=settings.users_to_plan, min_tok_s=settings.plan_min_tok_s,
                          ttft_p90_s=settings.plan_ttft_p90_s)
        plans = plans_for_sections(sections, targets)
    except RigbenchError as error:
        console.print(Text(f"report or plan failed: {error}", style="bold red"))
        return
    best = plans[0] if plans and plans[0].instances is not None else None
    verdict = (f"recommended: {best.run_label} at {best.price.label}: {best.instances} instance(s), "
               f"${best.usd_per_hour:.3f}/h" if best else "no measured rig meets the targets")
    text = (f"# Plan: {targets.users} users, each >= {targets.min_tok_s:g} tok/s, TTFT p90 <= "
            f"{targets.ttft_p90_s:g} s\n\n{plan_table(plans)}\n\n{verdict}\n")
    (folder.root / PLAN_FILE).write_text(text)
    record.plan = PLAN_FILE
    console.print(Text(f"report: {written[0]}\nplan: {folder.root / PLAN_FILE}\n{verdict}"))
