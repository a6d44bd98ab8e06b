"""``rigbench local``: the whole pipeline on this machine (``make demo``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from core.lists import MEASURE_HELP, parse_counts, parse_windows
from llamacpp.build import BACKENDS
from rigbench.local_rig import DEFAULT_USER_STEPS, LocalRigOptions, run_local_rig


def register(app: typer.Typer) -> None:
    @app.command("local")
    def local(
        profile: str = typer.Option("tiny", "--profile", "-p", help="bundled profile name or .toml path"),
        users: str = typer.Option(",".join(map(str, DEFAULT_USER_STEPS)), "--users", help="user counts per step"),
        warmup: float = typer.Option(1.0, "--warmup", min=0.0, help="warm-up seconds per step"),
        measure: str = typer.Option("3", "--measure", help=MEASURE_HELP),
        runs: Path = typer.Option(Path("runs"), "--runs", help="folder for run directories"),
        backend: str = typer.Option("auto", "--backend", help="auto, cpu or cuda"),
        model: Path | None = typer.Option(None, "--model", help="serve this GGUF instead of the profile's"),
        drafter: Path | None = typer.Option(None, "--drafter", help="drafter GGUF for speculative decoding"),
        max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="tokens per reply"),
        processes: int = typer.Option(1, "--processes", min=1, help="load processes (Locust --processes)"),
        context: int = typer.Option(0, "--context", min=0, help="tokens of a long document ahead of each prompt"),
        server_arg: list[str] = typer.Option(
            [], "--server-arg", help="llama-server flag(s) replacing the profile's, e.g. --server-arg='--parallel 64'"
        ),
        label: str | None = typer.Option(None, "--label", help="arm label, kept in the run id and manifest"),
        no_drafter: bool = typer.Option(False, "--no-drafter", help="serve without the profile's drafter"),
    ) -> None:
        """Build or reuse llama-server, serve the profile's model, sweep 1..64 users, write the report."""
        if backend not in BACKENDS:
            choices = f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}"
            raise typer.BadParameter(f"--backend must be {choices}, found {backend!r}")
        steps = parse_counts(users, "--users")
        report = run_local_rig(
            LocalRigOptions(
                profile=profile,
                runs_root=runs,
                user_steps=steps,
                warmup_seconds=warmup,
                measure_seconds=parse_windows(measure, steps),
                backend=backend,
                model_path=model,
                drafter_path=drafter,
                max_tokens=max_tokens,
                processes=processes,
                context_tokens=context,
                server_overrides=[token for item in server_arg for token in shlex.split(item)],
                label=label,
                no_drafter=no_drafter,
            )
        )
        typer.echo(str(report))
