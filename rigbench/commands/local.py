"""``rigbench local``: the whole pipeline on this machine (``make demo``)."""

from __future__ import annotations

from pathlib import Path

import typer

from core.lists import (
    ARRIVAL_HELP,
    ARRIVAL_SEED_HELP,
    MEASURE_HELP,
    RATES_HELP,
    parse_arrival,
    parse_load_steps,
    parse_windows,
)
from llamacpp.build import BACKENDS
from rigbench.load_processes import PROCESSES_HELP, parse_processes
from rigbench.local_rig import DEFAULT_USER_STEPS, LocalRigOptions, run_local_rig
from rigbench.options import (
    RUNS_DIR_HELP,
    STEPS_HELP,
    backend_option,
    drafter_option,
    model_file_option,
    no_drafter_option,
    old_spelling,
    profile_option,
    renamed,
    server_arg_option,
    server_overrides,
)

EXIT_CODES = (
    "Exit codes: 0 the sweep completed and the report is written; 1 the run failed or was "
    "interrupted (report still written, records kept); 2 an option, profile or model was refused."
)


def register(app: typer.Typer) -> None:
    @app.command("local", epilog=EXIT_CODES)
    def local(
        profile: str = profile_option(),
        steps: str = typer.Option(
            None, "--steps", help=f"{STEPS_HELP}; default {','.join(map(str, DEFAULT_USER_STEPS))}"
        ),
        rates: str = typer.Option(None, "--rates", help=RATES_HELP),
        arrival: str = typer.Option("poisson", "--arrival", help=ARRIVAL_HELP),
        arrival_seed: int = typer.Option(0, "--arrival-seed", min=0, help=ARRIVAL_SEED_HELP),
        warmup: float = typer.Option(
            1.0, "--warmup", min=0.0, help="warm-up seconds per step (a quick look here; rigbench sweep: 10)"
        ),
        measure: str = typer.Option("3", "--measure", help=MEASURE_HELP + " (a quick look here; rigbench sweep: 30)"),
        runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help=RUNS_DIR_HELP),
        backend: str = backend_option(),
        model_file: Path | None = model_file_option(),
        drafter: Path | None = drafter_option(),
        max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="tokens per reply"),
        processes: str = typer.Option("1", "--processes", help=PROCESSES_HELP),
        context_tokens: int = typer.Option(
            0, "--context-tokens", min=0, help="tokens of a long document ahead of each prompt"
        ),
        server_arg: list[str] = server_arg_option(),
        label: str | None = typer.Option(None, "--label", help="arm label, kept in the run id and manifest"),
        no_drafter: bool = no_drafter_option(),
        users: str | None = old_spelling("--users"),
        runs: Path | None = old_spelling("--runs"),
        model: Path | None = old_spelling("--model"),
        context: int | None = old_spelling("--context"),
    ) -> None:
        """Build or reuse llama-server, serve the profile's model, sweep 1..64 users, write the report."""
        if backend not in BACKENDS:
            choices = f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}"
            raise typer.BadParameter(f"--backend must be {choices}, found {backend!r}")
        user_steps, rate_steps = parse_load_steps(
            renamed("--steps", steps, "--users", users), rates, ",".join(map(str, DEFAULT_USER_STEPS))
        )
        arrival = parse_arrival(arrival)
        report = run_local_rig(
            LocalRigOptions(
                profile=profile,
                runs_root=renamed("--runs-dir", runs_dir, "--runs", runs),
                user_steps=user_steps,
                rate_steps=rate_steps,
                arrival=arrival,
                arrival_seed=arrival_seed,
                warmup_seconds=warmup,
                measure_seconds=parse_windows(measure, rate_steps or user_steps, kind="rate" if rate_steps else "user"),
                backend=backend,
                model_path=renamed("--model-file", model_file, "--model", model),
                drafter_path=drafter,
                max_tokens=max_tokens,
                processes=parse_processes(processes),
                context_tokens=renamed("--context-tokens", context_tokens, "--context", context),
                server_overrides=server_overrides(server_arg),
                label=label,
                no_drafter=no_drafter,
            )
        )
        typer.echo(str(report))
