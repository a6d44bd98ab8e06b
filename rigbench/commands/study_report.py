"""``rigbench study-report DIR``: the GPU study's REPORT.md and plots from its folder."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("study-report")
    def study_report(
        study: Path = typer.Argument(..., help="folder written by provision/gpu_study.py"),
    ) -> None:
        """Write DIR/REPORT.md and DIR/plots/ (ceilings, autotune, greedy check, sweeps, drafter, long context)."""
        from analysis.study_report import write_study_report

        typer.echo(write_study_report(study))
