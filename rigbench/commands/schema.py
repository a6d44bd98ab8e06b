"""``rigbench schema [run|summary]``: print or write the JSON Schema of run directories or of summary.json."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import typer

from analysis import summary
from core.rundir import schema as run_schema
from core.whole_files import write_whole

EXIT_CODES = (
    "Exit codes: 0 printed or written; 2 an unknown schema name."
)


class SchemaName(StrEnum):
    run = "run"
    summary = "summary"


def schema_source(name: SchemaName) -> tuple[Path, Callable[[], str]]:
    """(the committed file, the text generated from the models) of a schema."""
    if name is SchemaName.summary:
        return summary.SCHEMA_FILE, summary.schema_text
    return run_schema.SCHEMA_FILE, run_schema.schema_text


app = typer.Typer()


@app.command("schema", epilog=EXIT_CODES)
def schema(
    name: SchemaName = typer.Argument(
        SchemaName.run, help="run: the run directory's files (manifest, records, telemetry); summary: summary.json"
    ),
    write: bool = typer.Option(False, "--write", help="write the committed copy in the package instead"),
) -> None:
    """Print the JSON Schema of run directories (manifest, records, telemetry), or of a report's summary.json."""
    path, text = schema_source(name)
    if write:
        write_whole(path, text())
        typer.echo(f"wrote {path}")
    else:
        typer.echo(text(), nl=False)
