"""``rigbench serve``: llama-server for a profile on this machine, on its own, until Ctrl-C.

For a sweep by hand (``rigbench sweep --url``, a hand-started Locust) against the same server
``rigbench local`` would start: the same build, model and command line.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console

from rigbench.local_rig import LocalRigOptions, prepare_server
from rigbench.options import (
    backend_option,
    drafter_option,
    model_file_option,
    no_drafter_option,
    profile_option,
    server_arg_option,
    server_overrides,
)

EXIT_CODES = (
    "Exit codes: 0 stopped with Ctrl-C; 2 the build, the model or the server's start-up failed (one line says "
    "which)."
)


app = typer.Typer()


@app.command("serve", epilog=EXIT_CODES)
def serve(
    profile: str = profile_option(),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="port on 127.0.0.1"),
    backend: str = backend_option(),
    model_file: Path | None = model_file_option(),
    drafter: Path | None = drafter_option(),
    no_drafter: bool = no_drafter_option(),
    server_arg: list[str] = server_arg_option(),
) -> None:
    """Serve the profile's model with llama-server on 127.0.0.1:PORT until Ctrl-C; print its URL and its log."""
    console = Console(stderr=True)
    options = LocalRigOptions(
        profile=profile, backend=backend, model_path=model_file, drafter_path=drafter, no_drafter=no_drafter,
        server_overrides=server_overrides(server_arg),
    )
    prepared = prepare_server(options, console, port=port)
    with prepared.server as server:
        console.print(f"llama-server for {prepared.profile.name} at {server.base_url} (log {server.log_path}); "
                      "Ctrl-C stops it")
        typer.echo(server.base_url)
        try:
            while server.process is not None and server.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            console.print("stopped")
            return
    raise typer.Exit(2)  # the server ended on its own
