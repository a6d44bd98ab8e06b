"""``rigbench autotune``: try serving flags on this machine's card, keep the best, record every trial."""

from __future__ import annotations

from pathlib import Path

import typer

from core.lists import MEASURE_HELP, parse_counts, parse_windows
from rigbench.autotune import DEFAULT_TRIALS, autotune_table, best_trial, kept_sentence, run_autotune
from rigbench.local_rig import LocalRigOptions
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
) -> None:
    """Run each trial as a short sweep; print the table and the best flags."""
    trials = dict(parse_named_flags(trial, "--trial")) if trial else dict(DEFAULT_TRIALS)
    user_steps = parse_counts(steps, "--steps")

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
    results = run_autotune(options, trials, runs_dir, bench_tg=bench_tg)
    best = best_trial(results)
    table = autotune_table(results, best)
    (runs_dir / "autotune.md").write_text(f"# autotune: {profile}\n\n{table}\n")
    typer.echo(table)
    if best is None:
        raise typer.Exit(1)
    typer.echo(kept_sentence(results, best))
