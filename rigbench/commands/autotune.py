"""``rigbench autotune``: try serving flags on this machine's card, keep the best, record every trial."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from core.errors import ProfileError, UsageError
from core.lists import MEASURE_HELP, parse_counts, parse_windows
from core.mps import decide_mps, find_control_program
from core.profile import load_profile
from core.replicas import plan_replicas, replica_gpu
from core.whole_files import write_whole
from rigbench.autotune import (
    DEFAULT_TRIALS,
    autotune_table,
    best_trial,
    kept_sentence,
    replica_arms,
    run_autotune,
)
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


AUTO_REPLICAS = (1, 2, 4, 8, 16)  # per GPU, where a GPU is found: at the same total slots, as the cores allow
MPS_MODES = ("both", "on", "off", "profile")


def replica_totals(profile_name: str, per_gpu: list[int], gpus: list[int] | None = None,
                   skip_unfit: bool = False) -> list[int]:
    """The replica trials' server counts: each count per GPU times the GPUs the profile spreads replicas
    over (one GPU, or none, when they share one), those above 1 only; a count the profile's slots, context
    or this machine's cores cannot be divided by is refused here, before any trial runs (``skip_unfit``: left
    out with a line saying why, as ``--replica-counts auto`` does); ``gpus``: this machine's (None: read them)."""
    profile = load_profile(profile_name)
    gpus = gpu_indices() if gpus is None else gpus
    spread = max(1, len(gpus)) if profile.server.replica_gpus == "each" else 1
    totals = [count * spread for count in per_gpu if count * spread > 1]
    kept = []
    for total in totals:
        try:
            plan_replicas(profile.server.args, total, 1, cores=sorted(os.sched_getaffinity(0)),
                          source=f"--replica-counts ({total} servers)")
        except ProfileError as error:
            if not skip_unfit:
                raise
            typer.echo(f"{total} replicas left out: {error}", err=True)
            continue
        kept.append(total)
    return kept


def replica_counts(profile_name: str, text: str, gpus: list[int]) -> list[int]:
    """``--replica-counts``: ``auto`` (1, 2, 4, 8, 16 per GPU where this machine has a GPU, those that fit; none
    without one) or the counts given (each must fit)."""
    if text.strip().lower() == "auto":
        return replica_totals(profile_name, list(AUTO_REPLICAS), gpus, skip_unfit=True) if gpus else []
    return replica_totals(profile_name, parse_counts(text, "--replica-counts"), gpus)


def mps_possible(profile_name: str, count: int, gpus: list[int], control: str | None) -> bool:
    """Whether ``count`` replicas can run under MPS here: what ``[server] mps = "auto"`` would decide for them (the
    control program found, and two or more of them on one GPU)."""
    placement = load_profile(profile_name).server.replica_gpus
    return decide_mps("auto", [replica_gpu(index, gpus, placement) for index in range(count)], control).run


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
        "auto", "--replica-counts", help="replica counts per GPU to try after the flag trials, e.g. 1,2,4: the best "
        "flags again as that many llama-servers sharing the profile's slots and dividing the cores (a count whose "
        "total is one server adds no trial); auto: 1,2,4,8,16 where a GPU is found (those the slots, context and cores "
        "allow), none without one"),
    mps: str = typer.Option(
        "both", "--mps", metavar="both|on|off|profile", help="replica trials under CUDA MPS or not: both (each "
        "count without, and under it where nvidia-cuda-mps-control is found and replicas share a GPU), on, off, or "
        "as the profile's [server] mps says"),
    resume: bool = typer.Option(False, "--resume", help="keep the runs (trial and repeat) RUNS_DIR/autotune.jsonl "
                                "already has complete; run only the others"),
    repeats: int = typer.Option(1, "--repeats", min=1, max=100, help="runs of every trial, in rounds (every trial "
                                "once, then every trial again: A B A B); a trial then replaces the profile's line "
                                "only beyond the spread between runs (1: that spread unknown, each run's own "
                                "interval judges)"),
) -> None:
    """Run each trial as a short sweep (--repeats times, in rounds); print the table and the best flags (and
    replica count, MPS or not)."""
    trials = dict(parse_named_flags(trial, "--trial")) if trial else dict(DEFAULT_TRIALS)
    user_steps = parse_counts(steps, "--steps")
    if mps not in MPS_MODES:
        raise UsageError(f"--mps {mps!r}: give one of {', '.join(MPS_MODES)}")
    gpus, control = gpu_indices(), find_control_program()
    counts = replica_counts(profile, replicas, gpus)
    if mps == "on":  # asked for: refused in one line before any trial where the control program is missing
        decide_mps(True, [], control, "--mps")
    arms = [arm for count in counts
            for arm in replica_arms([count], mps, mps_possible(profile, count, gpus, control))]

    options = LocalRigOptions(
        profile=profile, backend=backend, model_path=model_file, drafter_path=drafter, no_drafter=no_drafter,
        load={"user_steps": user_steps, "warmup_seconds": warmup, "processes": processes,
              "measure_seconds": parse_windows(measure, user_steps)})
    results = run_autotune(options, trials, runs_dir, bench_tg=bench_tg, arms=arms, resume=resume, repeats=repeats)
    best = best_trial(results)
    table = autotune_table(results, best)
    write_whole(runs_dir / "autotune.md", f"# autotune: {profile}\n\n{table}\n")
    typer.echo(table)
    if best is None:
        raise typer.Exit(1)
    typer.echo(kept_sentence(results, best))
