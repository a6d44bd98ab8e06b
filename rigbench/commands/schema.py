"""``rigbench schema``: print or write the run directory's JSON Schema."""

from __future__ import annotations

import typer

from core.rundir.schema import SCHEMA_FILE, schema_text

EXIT_CODES = (
    "Exit codes: 0 printed or written."
)


def register(app: typer.Typer) -> None:
    @app.command("schema", epilog=EXIT_CODES)
    def schema(write: bool = typer.Option(False, "--write", help=f"write {SCHEMA_FILE.name} in the package")) -> None:
        """Print the JSON Schema of run directories (manifest, records, telemetry)."""
        if write:
            SCHEMA_FILE.write_text(schema_text())
            typer.echo(f"wrote {SCHEMA_FILE}")
        else:
            typer.echo(schema_text(), nl=False)
