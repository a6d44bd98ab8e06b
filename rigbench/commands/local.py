"""``rigbench local``: the whole pipeline on this machine (``make demo``)."""

from __future__ import annotations

from pathlib import Path

import typer

from core.lists import (
    check_pin_slots,
    parse_windows,
)
from core.mps import parse_mps
from llamacpp.build import BACKENDS
from rigbench.load_processes import parse_processes
from rigbench.local_rig import LocalRigOptions, run_local_rig
from rigbench.options import (
    arrival_option,
    arrival_seed_option,
    backend_option,
    drafter_option,
    drain_option,
    measure_option,
    model_file_option,
    mps_option,
    no_drafter_option,
    output_length_option,
    pin_slots_option,
    processes_option,
    profile_option,
    prompt_length_option,
    prompts_option,
    rates_option,
    runs_dir_option,
    server_arg_option,
    server_overrides,
    sessions_option,
    slo_option,
    steps_option,
    system_prompt_tokens_option,
    think_option,
    trace_option,
    trace_speed_option,
    turns_option,
    warmup_option,
    workload_load,
    workload_seed_option,
)

EXIT_CODES = (
    "Exit codes: 0 the sweep completed and the report is written; 1 the run failed or was "
    "interrupted (report still written, records kept); 2 an option, profile or model was refused."
)


app = typer.Typer()


@app.command("local", epilog=EXIT_CODES)
def local(
    profile: str = profile_option(),
    steps: str = steps_option(),
    rates: str = rates_option(),
    arrival: str = arrival_option(),
    arrival_seed: int = arrival_seed_option(),
    warmup: float = warmup_option(1.0, " (a quick look here; rigbench sweep: 10)"),
    measure: str = measure_option("3", " (a quick look here; rigbench sweep: 30)"),
    runs_dir: Path = runs_dir_option(),
    backend: str = backend_option(),
    model_file: Path | None = model_file_option(),
    drafter: Path | None = drafter_option(),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="tokens per reply"),
    processes: str = processes_option(),
    prompts: str = prompts_option(),
    pin_slots: bool = pin_slots_option(),
    drain: float = drain_option(),
    context_tokens: int = typer.Option(
        0, "--context-tokens", min=0, help="tokens of a long document ahead of each prompt"
    ),
    server_arg: list[str] = server_arg_option(),
    label: str | None = typer.Option(None, "--label", help="arm label, kept in the run id and manifest"),
    no_drafter: bool = no_drafter_option(),
    sessions: bool = sessions_option(),
    turns: str = turns_option(),
    think: str = think_option(),
    system_prompt_tokens: int = system_prompt_tokens_option(),
    prompt_length: str = prompt_length_option(),
    output_length: str = output_length_option(),
    trace: Path = trace_option(),
    trace_speed: float = trace_speed_option(),
    workload_seed: int = workload_seed_option(),
    slo: str = slo_option(),
    replicas: int | None = typer.Option(
        None, "--replicas", min=1, help="llama-server processes sharing the profile's slots, user i on replica i "
        "mod N (default: the profile's [server] replicas)"),
    mps: str | None = mps_option(),
) -> None:
    """Build or reuse llama-server, serve the profile's model, sweep 1..64 users, write the report."""
    if backend not in BACKENDS:
        choices = f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}"
        raise typer.BadParameter(f"--backend must be {choices}, found {backend!r}")
    user_steps, rate_steps, workload = workload_load(
        steps=steps, rates=rates, arrival=arrival, sessions=sessions, turns=turns, think=think,
        system_prompt_tokens=system_prompt_tokens, prompt_length=prompt_length, output_length=output_length,
        trace=trace, trace_speed=trace_speed, workload_seed=workload_seed, slo=slo)
    check_pin_slots(pin_slots, bool(rate_steps), parse_processes(processes))
    report = run_local_rig(
        LocalRigOptions(
            profile=profile,
            runs_root=runs_dir,
            user_steps=user_steps,
            rate_steps=rate_steps,
            arrival_seed=arrival_seed,
            warmup_seconds=warmup,
            measure_seconds=parse_windows(measure, rate_steps or user_steps, kind="rate" if rate_steps else "user"),
            backend=backend,
            model_path=model_file,
            drafter_path=drafter,
            max_tokens=max_tokens,
            processes=parse_processes(processes),
            context_tokens=context_tokens,
            server_overrides=server_overrides(server_arg),
            label=label,
            no_drafter=no_drafter,
            prompts=prompts,
            pin_slots=pin_slots,
            drain_seconds=drain,
            replicas=replicas,
            mps=None if mps is None else parse_mps(mps),
            **workload,
        )
    )
    typer.echo(str(report))
