"""``rigbench compact RUN...``: gzip a finished run's records, samples (telemetry, hardware, timelines, token counts)
and logs so it can be committed."""

from __future__ import annotations

from pathlib import Path

import typer

from core.errors import RigbenchError
from core.rundir.compact import compact_run
from core.wording import counted

EXIT_CODES = (
    "Exit codes: 0 every run compacted; 1 some run was refused (said per run, the others are done)."
)


app = typer.Typer()


@app.command("compact", epilog=EXIT_CODES)
def compact(
    runs: list[Path] = typer.Argument(..., help="finished run directories"),
) -> None:
    """Gzip records, samples (telemetry, hardware, timelines, token counts) and logs in place and drop the space
    reserve (analysis reads both forms)."""

    refused = 0
    for run in runs:
        try:
            written = compact_run(run)
        except RigbenchError as error:  # say so and go on: one bad run must not stop the rest
            typer.echo(f"{run}: not compacted: {error}", err=True)
            refused += 1
            continue
        typer.echo(f"{run}: {counted(len(written), 'file')} gzipped")
    if refused:
        raise typer.Exit(1)
