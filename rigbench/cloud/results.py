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
from analysis.quality_across import AcrossPage, Machine, evals_across, ladders_across
from analysis.quality_report import write_ladder_report
from analysis.report import build_sections, write_files
from core.errors import RigbenchError, RunDirError
from core.rundir import RunDir
from core.rundir.quality_files import EVAL_MANIFEST, LADDER_MANIFEST
from core.whole_files import write_whole
from core.wording import counted
from rigbench.cloud.record import CloudRunFolder, CloudRunRecord
from rigbench.cloud.settings import CloudSettings
from rigbench.decode_bytes import decode_bytes_for_runs

REPORT_FOLDER = "report"
ANSWERS_FILE = "answers.md"
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
    verdict = (f"recommended: {best.run_label} at {best.price.label}: {counted(best.instances, 'instance')}, "
               f"${best.usd_per_hour:.3f}/h" if best else "no measured rig meets the targets")
    text = (f"# Plan: {counted(targets.users, 'user')}, each >= {targets.min_tok_s:g} tok/s, TTFT p90 <= "
            f"{targets.ttft_p90_s:g} s\n\n{plan_table(plans)}\n\n{verdict}\n")
    write_whole(folder.root / PLAN_FILE, text)
    record.plan = PLAN_FILE
    console.print(Text(f"report: {written[0]}\nplan: {folder.root / PLAN_FILE}\n{verdict}"))


def quality_folders(folder: CloudRunFolder, record: CloudRunRecord, manifest: str) -> list[Machine]:
    """Each rig's ladder (or eval) folder that came home, named by stack and instance type."""
    machines = []
    for name, rig in record.rigs.items():
        for relative in rig.runs:
            path = folder.root / relative
            if (path / manifest).is_file():
                machines.append(Machine(f"{name} ({rig.instance_type or 'type unknown'})", path))
    return machines


def write_quality_report(settings: CloudSettings, folder: CloudRunFolder, record: CloudRunRecord,
                         console: Console) -> None:
    """Each rig's ladder report (priced at the rig's own rate), every pair's grid, and the tables across
    machines, appended to the loop's report (or the whole report, when no sweep ran)."""
    if not any(study in settings.studies for study in ("ladder", "eval")):
        return
    out = folder.root / REPORT_FOLDER
    out.mkdir(parents=True, exist_ok=True)
    ladders = quality_folders(folder, record, LADDER_MANIFEST)
    for machine in ladders:
        rig = next(rig for rig in record.rigs.values() if any(folder.root / r == machine.folder for r in rig.runs))
        try:
            write_ladder_report(machine.folder, price_per_hour=rig.usd_per_hour,
                                price_source=f"{rig.instance_type} {rig.market}" if rig.usd_per_hour else None)
        except RigbenchError as error:
            console.print(Text(f"{machine.label}: no ladder report ({error})"))
    if settings.with_local:
        ladders.append(Machine("this machine", Path(settings.with_local)))
    pages = []
    if "ladder" in settings.studies:
        pages.append(ladders_across(ladders, out) if ladders else _none_came_home("ladder"))
    if "eval" in settings.studies:
        evals = quality_folders(folder, record, EVAL_MANIFEST)
        pages.append(evals_across(evals) if evals else _none_came_home("eval"))
    glance = " ".join(page.glance for page in pages)
    text = "\n".join([f"# Answers on every rig: {Path(settings.questions or '').name}", "", "## At a glance", "",
                      glance, "", *(page.markdown for page in pages)])
    write_whole(out / ANSWERS_FILE, text)
    report = out / "report.md"
    if record.report and (folder.root / record.report) == report:
        speed = report.read_text().rstrip("\n")
        write_whole(report, with_answers_glance(speed, glance) + "\n\n" + text.replace("# Answers", "## Answers", 1)
                          .replace("## At a glance", "### At a glance", 1))
    else:
        record.report = folder.relative(out / ANSWERS_FILE)
    console.print(Text(f"answers: {glance}\n{out / ANSWERS_FILE}"))


def _none_came_home(study: str) -> AcrossPage:
    return AcrossPage(f"No {study} came home.\n", f"No {study} came home.")


def with_answers_glance(report: str, glance: str) -> str:
    """The speed report with the answers' paragraph last in its "At a glance" section, so the loop's report
    answers both questions (how fast, how right) before any table."""
    paragraph = f"Answers: {glance}"
    start = report.find("## At a glance\n")
    if start < 0:  # a report without one: the section goes under its title
        title, _, rest = report.partition("\n")
        if not title.startswith("# "):
            return f"## At a glance\n\n{paragraph}\n\n{report}"
        return f"{title}\n\n## At a glance\n\n{paragraph}\n\n{rest.lstrip(chr(10))}"
    end = report.find("\n## ", start + 1)
    if end < 0:  # the section runs to the end
        return f"{report.rstrip(chr(10))}\n\n{paragraph}"
    return f"{report[:end + 1]}{paragraph}\n\n{report[end + 1:]}"
