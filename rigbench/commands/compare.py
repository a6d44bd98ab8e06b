"""``rigbench compare RUN_A RUN_B``: per-step ratios B/A with intervals, paired by prompt category."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        run_a: Path = typer.Argument(..., help="baseline run (A), e.g. without the drafter"),
        run_b: Path = typer.Argument(..., help="run to compare (B); ratios are B / A"),
        out: Path | None = typer.Option(None, "--out", help="folder for the cross-run report"),
    ) -> None:
        """Print B/A ratios per step (per-user tok/s, aggregate tok/s, TTFT p90) and write a cross-run report."""
        from analysis.compare import compare_runs
        from analysis.figures import run_figures
        from analysis.load import load_run
        from analysis.report import comparison_table, write_report

        figures_a, figures_b = run_figures(load_run(run_a)), run_figures(load_run(run_b))
        typer.echo(f"A = {figures_a.run.label}\nB = {figures_b.run.label}\n")
        typer.echo(comparison_table(compare_runs(figures_a, figures_b)))
        typer.echo(f"\nreport: {write_report([run_a, run_b], out)}")
