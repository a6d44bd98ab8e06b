"""``rigbench autotune``: try serving flags on this machine's card, keep the best, record every trial."""

from __future__ import annotations

from pathlib import Path

import typer

from core.lists import MEASURE_HELP, parse_counts, parse_windows
from core.profile import load_profile
from core.replicas import plan_replicas
from rigbench.autotune import DEFAULT_TRIALS, autotune_table, best_trial, kept_sentence, run_autotune
from rigbench.local_rig import LocalRigOptions, gpu_indices
from rigbench.options import (
    backend_option,
    drafter_option,
    model_file_option,
    no_drafter_option,
    parse_named_flags,
    profile_option,
    runs_dir_option,
)

app = typer.Typer()


def replica_totals(profile_name: str, per_gpu: list[int]) -> list[int]:
    """The replica trials' server counts: each count per GPU times the GPUs the profile spreads replicas
    over (one GPU, or none, when they share one), those above 1 only; a count the profile's slots or
    context cannot be divided by is refused here, before any trial runs."""
    profile = load_profile(profile_name)
    gpus = max(1, len(gpu_indices())) if profile.server.replica_gpus == "each" else 1
    totals = [count * gpus for count in per_gpu if count * gpus > 1]
    for total in totals:
        plan_replicas(profile.server.args, total, 1, source=f"--replicas ({total} servers)")
    return totals


@app.command("autotune", epilog="Exit codes: 0 a best trial was found; 1 no trial completed; 2 a bad option.")
def autotune(
    profile: str = profile_option(...),
    trial: list[str] = typer.Option(
        [], "--trial", help="NAME=FLAGS added to the serving line (repeatable; default: a built-in set)"
    ),
    steps: str = typer.Option("1,64", "--steps", help="user counts, one step each; each trial sweeps these"),
    warmup: float = typer.Option(2.0, "--warmup", min=0.0, help="warm-up seconds per step (rigbench sweep: 10)"),
    measure: str = typer.Option("10", "--measure", help=MEASURE_HELP + " (rigbench sweep: 30)"),
    runs_dir: Path = runs_dir_option(Path("runs/autotune"),
                                     "folder for the trials' run directories and autotune.jsonl"),
    model_file: Path | None = model_file_option(),
    drafter: Path | None = drafter_option(),
    no_drafter: bool = no_drafter_option(),
    processes: int = typer.Option(1, "--processes", min=1, help="load processes (Locust --processes)"),
    bench_tg: float | None = typer.Option(None, "--bench-tg", help="llama-bench tg128 of this model, for ratios"),
    backend: str = backend_option(),
    replicas: str = typer.Option(
        "1", "--replicas", help="replica counts per GPU to try after the flag trials, e.g. 1,2,4: the best flags "
        "again as that many llama-servers sharing the profile's slots and dividing the cores (a count whose total "
        "is one server adds no trial)"),
) -> None:
    """Run each trial as a short sweep; print the table and the best flags (and replica count)."""
    trials = dict(parse_named_flags(trial, "--trial")) if trial else dict(DEFAULT_TRIALS)
    user_steps = parse_counts(steps, "--steps")
    replica_counts = replica_totals(profile, parse_counts(replicas, "--replicas"))

    options = LocalRigOptions(
        profile=profile,
        user_steps=user_steps,
        warmup_seconds=warmup,
        measure_seconds=parse_windows(measure, user_steps),
        backend=backend,
        model_path=model_file,
        drafter_path=drafter,
        no_drafter=no_drafter,
        processes=processes,
    )
    results = run_autotune(options, trials, runs_dir, bench_tg=bench_tg, replica_counts=replica_counts)
    best = best_trial(results)
    table = autotune_table(results, best)
    (runs_dir / "autotune.md").write_text(f"# autotune: {profile}\n\n{table}\n")
    typer.echo(table)
    if best is None:
        raise typer.Exit(1)
    typer.echo(kept_sentence(results, best))
