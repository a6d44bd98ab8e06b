"""``rigbench serve``: llama-server for a profile on this machine, on its own, until Ctrl-C.

For a sweep by hand (``rigbench sweep --url``, a hand-started Locust) against the same server
``rigbench local`` would start: the same build, model and command line.

For scripts: stdout holds only the URL, printed once the server is healthy; a busy ``--port``
is refused before anything is built, started or written; Ctrl-C, SIGTERM and SIGHUP stop
llama-server and wait for it to exit before this process does.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import typer
from rich.console import Console

from core.errors import LlamaCppError
from core.mps import parse_mps
from core.signals import exit_status, signal_name, stop_signals_as_keyboard_interrupt
from llamacpp.replica_set import ReplicaSet
from llamacpp.server import LOOPBACK, check_port
from rigbench.local_rig import LocalRigOptions, PreparedServer, prepare_server, served_under_mps
from rigbench.options import (
    backend_option,
    drafter_option,
    model_file_option,
    mps_option,
    no_drafter_option,
    profile_option,
    server_arg_option,
    server_overrides,
)

EXIT_CODES = (
    "Exit codes: 2 the port is in use, or the build, the model, the server's start-up or the server itself failed "
    "(one line says which); 130, 143 or 129 stopped by Ctrl-C, SIGTERM or SIGHUP (128 + the signal's number), "
    "llama-server stopped first."
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
    replicas: int | None = typer.Option(
        None, "--replicas", min=1, help="llama-server processes sharing the profile's slots, on PORT, PORT+1, …; "
        "one URL each on stdout (default: the profile's [server] replicas)"),
    mps: str | None = mps_option(),
) -> None:
    """Serve the profile's model with llama-server on 127.0.0.1:PORT until Ctrl-C; print its URL and its log."""
    # Before the build, which may take minutes: a busy port is refused at once. LocalServer checks
    # it again as it starts, and once llama-server answers, for a server that took it meanwhile.
    check_port(LOOPBACK, port, "--port")
    console = Console(stderr=True)
    options = LocalRigOptions(
        profile=profile, backend=backend, model_path=model_file, drafter_path=drafter, no_drafter=no_drafter,
        server_overrides=server_overrides(server_arg), replicas=replicas,
        mps=None if mps is None else parse_mps(mps),
    )
    with stop_signals_as_keyboard_interrupt():
        try:
            serve_until_stopped(options, port, console)
        except KeyboardInterrupt as stop:  # llama-server has exited: the `with` around it waited
            console.print(f"stopped by {signal_name(stop)}")
            raise typer.Exit(exit_status(stop)) from None


def serve_until_stopped(options: LocalRigOptions, port: int, console: Console) -> None:
    """Start the server, print its URL on stdout once it is healthy, and wait; it returns only by
    raising: a stop signal, or the server ending on its own."""
    prepared = prepare_server(options, console, port=port, port_source="--port")
    with served_under_mps(prepared, None, console):
        if prepared.replicas is not None:
            serve_replicas(prepared.replicas, prepared.profile.name, console)
        serve_one(prepared, console)


def serve_one(prepared: PreparedServer, console: Console) -> None:
    """The one server: healthy, its URL on stdout, then wait until it ends or a signal stops it."""
    with prepared.server as server:
        console.print(f"llama-server for {prepared.profile.name} at {server.base_url} (log {server.log_path}); "
                      "Ctrl-C stops it")
        typer.echo(server.base_url)
        assert server.process is not None
        while server.process.poll() is None:
            time.sleep(0.5)
    code = server.process.returncode
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited on its own with code {code}"
    raise LlamaCppError(f"llama-server at {server.base_url} {how}; its log: {server.log_path}")


def serve_replicas(replicas: ReplicaSet, profile: str, console: Console) -> None:
    """Every replica healthy, their URLs on stdout (one per line, in order), then wait; the first one that ends
    on its own stops the others and is named."""
    with replicas:
        for url, server in zip(replicas.urls, replicas.servers, strict=True):
            console.print(f"llama-server replica for {profile} at {url} (log {server.log_path})")
        console.print("Ctrl-C stops them")
        typer.echo("\n".join(replicas.urls))
        while not (dead := replicas.dead()):
            time.sleep(0.5)
    raise LlamaCppError(dead[0])
