"""``rigbench study-report DIR``: the GPU study's REPORT.md and plots from its folder."""

from __future__ import annotations

from pathlib import Path

import typer

EXIT_CODES = (
    "Exit codes: 0 written; 2 not a study folder, or a file in it that cannot be read."
)


def register(app: typer.Typer) -> None:
    @app.command("study-report", epilog=EXIT_CODES)
    def study_report(
        study: Path = typer.Argument(..., help="folder the GPU study wrote (python -m rigbench.studies.gpu_study)"),
        earlier: list[Path] = typer.Option(
            [], "--earlier", help="an earlier study folder for the sections this one did not measure "
            "(autotune, long context); repeatable, first match wins"),
    ) -> None:
        """Write DIR/REPORT.md and DIR/plots/ (ceilings, autotune, greedy check, sweeps, drafter, long context)."""
        from analysis.study_report import write_study_report

        for folder in earlier:
            if not (folder / "build_manifest.json").exists():
                raise typer.BadParameter(f"{folder}: not a study folder (no build_manifest.json)",
                                         param_hint="--earlier")
        typer.echo(write_study_report(study, earlier))
