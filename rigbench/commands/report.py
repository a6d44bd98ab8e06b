"""``rigbench report RUN...``: report.md, summary.json and plots from run directories."""

from __future__ import annotations

from pathlib import Path

import typer

EXIT_CODES = (
    "Exit codes: 0 written; 2 a run directory that cannot be read."
)


def register(app: typer.Typer) -> None:
    @app.command("report", epilog=EXIT_CODES)
    def report(
        runs: list[Path] = typer.Argument(..., help="run directories (runs/<run-id>); several give a cross-run report"),
        out: Path | None = typer.Option(None, "--out", help="folder for the report (default: the run's own folder)"),
        price_as: list[str] = typer.Option(
            [], "--price-as", help="also price the runs at this instance type, labelled hypothetical (repeatable)"
        ),
    ) -> None:
        """Write report.md (per-step tok/s, latency, $/Mtok with intervals), summary.json and plots."""
        from analysis.report import write_report

        path = write_report(runs, out, reference_types=price_as or None)
        typer.echo(str(path))
