"""``rigbench locustfile``: where rigbench's locustfile is installed, for plain Locust from any folder."""

from __future__ import annotations

import typer

from loadtest import LOCUSTFILE

app = typer.Typer()


@app.command("locustfile")
def locustfile() -> None:
    """Print the path of rigbench's locustfile, for plain Locust from any folder: locust -f "$(rigbench
    locustfile)" --host URL.

    Locust prints its --help before it loads a locustfile: `rigbench sweep --help` lists the options the
    locustfile adds (--steps, --rates, --warmup, --measure, --runs-dir, ...)."""
    typer.echo(str(LOCUSTFILE))
