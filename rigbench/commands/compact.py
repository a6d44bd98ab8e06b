"""``rigbench compact RUN...``: gzip a finished run's records and logs so it can be committed."""

from __future__ import annotations

from pathlib import Path

import typer

from rigbench.compact import compact_run


def register(app: typer.Typer) -> None:
    @app.command("compact")
    def compact(
        runs: list[Path] = typer.Argument(..., help="finished run directories"),
    ) -> None:
        """Gzip records and logs in place and drop the space reserve (analysis reads both forms)."""
        for run in runs:
            written = compact_run(run)
            typer.echo(f"{run}: {len(written)} file(s) gzipped")
