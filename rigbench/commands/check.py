"""``rigbench check RUN``: is this run directory whole? Exit 0 when healthy, 1 when damaged."""

from __future__ import annotations

from pathlib import Path

import typer
from tabulate import tabulate

from core.rundir.check import CheckReport, check_run
from core.wording import counted


def report_lines(report: CheckReport) -> list[str]:
    """The readable report: manifest, shards, steps, telemetry, then every finding."""

    lines = [f"run {report.path}"]
    manifest = report.manifest
    if manifest is None:
        lines.append("manifest   unreadable")
    else:
        lines.append(
            f"manifest   schema v{manifest.schema_version}, status {manifest.status}, profile {manifest.profile}, "
            f"{counted(len(manifest.steps), 'step')}, last complete step {manifest.last_complete_step}"
        )
    for shard in report.shards:
        notes = [counted(shard.good, "record")]
        if shard.damaged_lines:
            notes.append(f"damaged line(s) {', '.join(map(str, shard.damaged_lines))}")
        if shard.truncated_line is not None:
            notes.append(f"truncated last line {shard.truncated_line}")
        if shard.unreadable:
            notes.append("unreadable past that")
        lines.append(f"shard      {shard.name}: {'; '.join(notes)}")
    if report.telemetry is not None:
        lines.append(f"telemetry  {counted(report.telemetry.good, 'snapshot')}")
    if manifest is not None and manifest.steps:
        rows = [
            [
                s.index,
                s.users,
                f"{s.measure_end - s.measure_start:.1f}" if s.measure_end is not None else "open",
                report.records_per_step[s.index],
                report.measured_per_step[s.index],
            ]
            for s in manifest.steps
        ]
        table = tabulate(rows, headers=["step", "users", "measured s", "records", "in window"], tablefmt="simple")
        lines.extend(table.splitlines())
    lines.extend(finding.line() for finding in report.findings)
    lines.append(report.summary())
    return lines


EXIT_CODES = (
    "Exit codes: 0 healthy (warnings allowed); 1 damaged; 2 not a run directory."
)


app = typer.Typer()


@app.command("check", epilog=EXIT_CODES)
def check(
    run: Path = typer.Argument(..., help="run directory, e.g. runs/<run-id>"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the one-line summary"),
) -> None:
    """Verify a run directory (manifest, shards, step counts, telemetry, status); exit 1 if damaged."""
    report = check_run(run)
    for line in [report.summary()] if quiet else report_lines(report):
        typer.echo(line)
    if not report.healthy:
        raise typer.Exit(1)
