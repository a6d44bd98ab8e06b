"""``rigbench schema``: print or write the run directory's JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from rigbench.rundir import run_json_schema

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema" / "run-v1.json"


def schema_text() -> str:
    return json.dumps(run_json_schema(), indent=2, sort_keys=True) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema(write: bool = typer.Option(False, "--write", help=f"write {SCHEMA_FILE.name} in the package")) -> None:
        """Print the JSON Schema of run directories (manifest, records, telemetry)."""
        if write:
            SCHEMA_FILE.write_text(schema_text())
            typer.echo(f"wrote {SCHEMA_FILE}")
        else:
            typer.echo(schema_text(), nl=False)
