"""``rigbench serve``: llama-server for a profile on this machine, on its own, until Ctrl-C.

For a sweep by hand (``rigbench sweep --url``, a hand-started Locust) against the same server
``rigbench local`` would start: the same build, model and command line.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import typer
from rich.console import Console

from rigbench.local_rig import LocalRigOptions, prepare_server

EXIT_CODES = (
    "Exit codes: 0 stopped with Ctrl-C; 2 the build, the model or the server's start-up failed (one line says "
    "which)."
)


def register(app: typer.Typer) -> None:
    @app.command("serve", epilog=EXIT_CODES)
    def serve(
        profile: str = typer.Option("tiny", "--profile", "-p", help="bundled profile name or .toml path"),
        port: int = typer.Option(8080, "--port", min=1, max=65535, help="port on 127.0.0.1"),
        backend: str = typer.Option("auto", "--backend", help="auto, cpu or cuda"),
        model_file: Path | None = typer.Option(None, "--model-file", help="serve this GGUF instead of the profile's"),
        drafter: Path | None = typer.Option(None, "--drafter", help="drafter GGUF for speculative decoding"),
        no_drafter: bool = typer.Option(False, "--no-drafter", help="serve without the profile's drafter"),
        server_arg: list[str] = typer.Option(
            [], "--server-arg", help="llama-server flag(s) replacing the profile's, e.g. --server-arg='--parallel 64'"
        ),
    ) -> None:
        """Serve the profile's model with llama-server on 127.0.0.1:PORT until Ctrl-C (its log in the cache)."""
        console = Console(stderr=True)
        options = LocalRigOptions(
            profile=profile, backend=backend, model_path=model_file, drafter_path=drafter, no_drafter=no_drafter,
            server_overrides=[token for item in server_arg for token in shlex.split(item)],
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
