"""``rigbench compare RUN_A RUN_B``: per-step ratios B/A with intervals, paired by prompt category."""

from __future__ import annotations

from pathlib import Path

import typer

EXIT_CODES = (
    "Exit codes: 0 compared; 2 a run that cannot be read or compared."
)


def register(app: typer.Typer) -> None:
    @app.command("compare", epilog=EXIT_CODES)
    def compare(
        run_a: Path = typer.Argument(..., help="baseline run (A), e.g. without the drafter"),
        run_b: Path = typer.Argument(..., help="run to compare (B); ratios are B / A"),
        out: Path | None = typer.Option(None, "--out", help="folder for the cross-run report"),
    ) -> None:
        """Print B/A ratios per step (per-user tok/s, aggregate tok/s, TTFT p90) and write a cross-run report."""
        from analysis.compare import compare_runs
        from analysis.report import build_sections, comparison_table, default_out_dir, write_sections

        section_a, section_b = build_sections([run_a, run_b])
        typer.echo(f"A = {section_a.label}\nB = {section_b.label}\n")
        typer.echo(comparison_table(compare_runs(section_a.figures, section_b.figures)))
        target = out if out is not None else default_out_dir([run_a, run_b])
        typer.echo(f"\nreport: {write_sections([section_a, section_b], target)}")
