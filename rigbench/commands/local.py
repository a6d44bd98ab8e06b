"""``rigbench local``: the whole pipeline on this machine (``make demo``)."""

from __future__ import annotations

from pathlib import Path

import typer

from core.mps import parse_mps
from llamacpp.build import BACKENDS
from rigbench.load_options import FLAGS_ONLY, LoadFlags, load_fields, with_load_options
from rigbench.local_rig import LocalRigOptions, run_local_rig
from rigbench.options import (
    backend_option,
    drafter_option,
    model_file_option,
    mps_option,
    no_drafter_option,
    profile_option,
    runs_dir_option,
    server_arg_option,
    server_overrides,
)

EXIT_CODES = (
    "Exit codes: 0 the sweep completed and the report is written; 1 the run failed or was "
    "interrupted (report still written, records kept); 2 an option, profile or model was refused."
)


app = typer.Typer()


@app.command("local", epilog=EXIT_CODES)
@with_load_options(warmup=1.0, measure="3", note=" (a quick look here; rigbench sweep: 10 and 30)")
def local(
    load: LoadFlags,
    profile: str = profile_option(),
    runs_dir: Path = runs_dir_option(),
    backend: str = backend_option(),
    model_file: Path | None = model_file_option(),
    drafter: Path | None = drafter_option(),
    no_drafter: bool = no_drafter_option(),
    server_arg: list[str] = server_arg_option(),
    label: str | None = typer.Option(None, "--label", help="arm label, kept in the run id and manifest"),
    replicas: int | None = typer.Option(
        None, "--replicas", min=1, help="llama-server processes sharing the profile's slots, user i on replica i "
        "mod N (default: the profile's [server] replicas)"),
    mps: str | None = mps_option(),
) -> None:
    """Build or reuse llama-server, serve the profile's model, sweep 1..64 users, write the report.

    The sweep is rigbench sweep's, with the same load options, against the server started here."""
    if backend not in BACKENDS:
        choices = f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}"
        raise typer.BadParameter(f"--backend must be {choices}, found {backend!r}")
    fields, named = load_fields(load)
    path = load.values["load_file"]
    report = run_local_rig(LocalRigOptions(
        profile=profile, runs_root=runs_dir, backend=backend, model_path=model_file, drafter_path=drafter,
        no_drafter=no_drafter, server_overrides=server_overrides(server_arg), label=label, replicas=replicas,
        mps=None if mps is None else parse_mps(mps), load=fields, load_origins=named,
        load_source=f"--load {path} with the flags" if path is not None else FLAGS_ONLY))
    typer.echo(str(report))
