"""``rigbench sweep``: drive a running llama-server (or any OpenAI-compatible server).

One run directory per server (``--url NAME=URL``) and per context length, linked to each other in their
manifests, so a drafter on/off comparison or a long-context series is one command. It ends with the
headline a report of its runs would open with (``analysis.headline``) and the ``rigbench report``
command that writes that report: the sweep itself writes none (on a rig, the runs are copied home first).
With ``--find-max users|rate --slo ...`` it searches for the most load meeting the targets instead, one
run per probe in a search folder (``rigbench.capacity_search``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from analysis.headline import headline_text
from analysis.report import build_sections
from core.errors import AnalysisError, RunIncomplete, UsageError
from core.lists import SWEEP_MEASURE, SWEEP_WARMUP_SECONDS
from core.machine import server_rig
from core.profile import RequestDefaults, RigProfile, load_profile
from core.rundir import LoadSettings, RunDir, RunManifest, new_manifest, server_at
from core.rundir.models import ReplicaInfo, RequestOrigins, SlotsFrom
from core.sweep_result import SweepResult
from loadtest.preflight import DEFAULT_MODEL_NAME, CheckedServer, check_context, check_health, check_reply, check_url
from loadtest.prompts import load_prompts
from loadtest.resume import check_resumable, go_on_command, resume_url, start_resumed_run
from loadtest.sweep import default_interruption_marker
from loadtest.telemetry import server_slots
from rigbench.decode_bytes import decode_bytes_for_runs
from rigbench.load_options import LoadFlags, load_request, with_load_options
from rigbench.options import runs_dir_option
from rigbench.replica_list import read_replicas, with_replicas
from rigbench.search_plan import FIND_MAX_HELP, MAX_LOAD_HELP, RESOLUTION_HELP, check_search_flags, search_plan
from rigbench.served_model import served_model
from rigbench.sweep_runs import SweepPlan, sweep_one, sweep_servers

EXIT_CODES = (
    "Exit codes: 0 every sweep complete; 1 a sweep failed or was interrupted (its records are kept); "
    "2 a bad option, or a server that fails the pre-flight check (nothing was created)."
)


def parse_servers(urls: list[str]) -> list[tuple[str | None, str]]:
    """The ``--url`` values as (arm name, URL): one bare URL is an unnamed arm; several servers are each
    named, ``--url NAME=URL``, one run each (the name goes in the run id and manifest); every URL checked."""
    if not urls:
        raise UsageError("no server given; pass --url http://HOST:PORT, or --url NAME=URL once per configuration")
    if len(urls) == 1 and "=" not in urls[0]:
        return [(None, check_url(urls[0]))]
    parsed: list[tuple[str | None, str]] = []
    for item in urls:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise UsageError(f"--url: cannot read {item!r}; with several servers give each as NAME=URL, "
                             "e.g. draft2=http://127.0.0.1:8081")
        if name in {seen for seen, _ in parsed}:
            raise UsageError(f"--url: {name!r} is given twice; name each server configuration once")
        parsed.append((name, check_url(url, f"--url {name}")))
    return parsed


NO_PROFILE = "none"
RUNS_DIR = Path("runs")


def profile_sweep_manifest(profile: RigProfile | None, server: CheckedServer, settings: LoadSettings,
                           origins: RequestOrigins, replicas: list[ReplicaInfo]) -> RunManifest:
    """A run's manifest: without a profile, the server is described only as it described itself (its
    /slots, /props, /v1/models), the profile is recorded as ``none``, and where each request setting came
    from is said (``origins``), once on stderr too. The server's machine and the file it serves are
    recorded where this machine can tell (``core.machine.server_rig``, ``rigbench.served_model``)."""
    name = profile.name if profile is not None else NO_PROFILE
    label = "-".join(filter(None, [name if profile is not None else "sweep", settings.arm,
                                   f"d{settings.context_tokens}" if settings.context_tokens else None]))
    slots = server_slots(server.url)
    slots_from: SlotsFrom | None = "server" if slots is not None else "profile" if profile is not None else None
    if slots is None and profile is not None:
        slots = profile.server.parallel_slots
    described = server_at(server.url, profile.server.args if profile is not None else [], slots, slots_from)
    described = described.model_copy(update={"model_name": server.model_name, "description": server.description})
    manifest = new_manifest(label, name, load=settings, server=described, rig=server_rig(server.url),
                            model=served_model(server.url))
    origins = origins.model_copy(update={"model_name": server.model_from})
    note = no_profile_note(settings, origins) if profile is None else None
    manifest = manifest.model_copy(update={"request_origins": origins, "warnings": [note] if note else []})
    return with_replicas(manifest, replicas)


def no_profile_note(settings: LoadSettings, origins: RequestOrigins) -> str:
    """What a sweep without ``--profile`` keeps in its manifest's warnings (so its report says it too): the
    request settings it sent and whose they were, since the profile the server was started with may ask
    for others (a fixed reply length, say)."""
    switch = {True: "on", False: "off"}
    sent = [("max_tokens", str(settings.max_tokens), origins.max_tokens),
            ("temperature", f"{settings.temperature:g}", origins.temperature),
            ("ignore_eos", switch[settings.ignore_eos], origins.ignore_eos),
            ("cache_prompt", switch[settings.cache_prompt], origins.cache_prompt)]
    given = ", ".join(f"{name} {value}" + (f" ({origin})" if origin in ("flag", "file") else "")
                      for name, value, origin in sent)
    return (f"no --profile: requests carried {given}, rigbench's own defaults where no flag was given "
            "(or load file), not the request settings of a profile; give --profile NAME for those of the profile "
            "the server was started with")


app = typer.Typer()


@app.command("sweep", epilog=EXIT_CODES)
@with_load_options(warmup=SWEEP_WARMUP_SECONDS, measure=SWEEP_MEASURE)
def sweep(
    load: LoadFlags,
    url: list[str] = typer.Option(
        [], "--url", help="server base URL, e.g. http://127.0.0.1:8080; or NAME=URL, once per server configuration "
        "(one linked run each)",
    ),
    profile_name: str = typer.Option(
        None, "--profile", help="rig profile the server was started with (its request defaults and slots); "
        "default: none, so request defaults are rigbench's own (said on stderr and in the run's warnings) and slots "
        "are the server's /slots",
    ),
    runs_dir: Path = runs_dir_option(RUNS_DIR),
    model_name: str = typer.Option(
        None, "--model-name", help="model name sent in requests; default: the one model the server lists at "
        "/v1/models, else 'default' (llama-server takes any)",
    ),
    no_preflight: bool = typer.Option(
        False, "--no-preflight", help="skip the check of /health and one streamed reply before the sweep"
    ),
    replicas_file: Path = typer.Option(
        None, "--replicas-file", help="a JSON list of replicas (index, url, slots, gpu, cpus) to spread the users "
        "over, user i to replica i mod N, as the rig's serve step writes it; --url is the first replica's",
    ),
    find_max: str = typer.Option(None, "--find-max", help=FIND_MAX_HELP),
    resolution: str = typer.Option(None, "--resolution", help=RESOLUTION_HELP),
    max_load: float = typer.Option(None, "--max-load", min=0, help=MAX_LOAD_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    interruption_marker: Path = typer.Option(
        None, "--interruption-marker", help="stop the sweep (status interrupted, resumable) when this file appears; "
        "default: the spot watcher's marker when run on a rig",
    ),
    resume: Path = typer.Option(
        None, "--resume", help="continue an interrupted run's remaining steps (its own settings) into a linked run; "
        "--url for a new server",
    ),
    result_file: Path = typer.Option(
        None, "--result", help="write the runs made (paths, a search's folder, failures) to this JSON file, also "
        "when the sweep fails",
    ),
) -> None:
    """Step a streaming chat load through user counts (or open-loop arrival rates) against a running server.

    Before anything is created, every server is checked: its URL is a server's root, /health
    (or /v1/models) answers, and one streamed reply comes back whole."""
    marker = interruption_marker or default_interruption_marker()
    result = SweepResult()
    try:
        if resume is not None:
            refuse_with_resume(load, {"--profile": profile_name, "--replicas-file": replicas_file,
                                      "--find-max": find_max, "--resolution": resolution, "--max-load": max_load,
                                      "--runs-dir": runs_dir if "runs_dir" in load.command_line else None})
            _resume(resume, url, marker, progress=progress, model=model_name, preflight=not no_preflight,
                    result=result)
            return
        profile = load_profile(profile_name) if profile_name is not None else None
        check_search_flags(find_max, load)
        request = load_request(load, request=profile.request if profile is not None else RequestDefaults(),
                               request_from="profile" if profile is not None else "rigbench")
        search = search_plan(find_max, request, load, resolution=resolution, max_load=max_load, urls=url)
        if search is not None and request.settings.repeats > 1:
            raise UsageError(f"--find-max with repeats {request.settings.repeats}: a search "
                             "runs one probe per load; repeat the sweep at the load it finds instead")
        if search is not None:  # the settings are made for the first probe; each probe runs at its own load
            request.settings = search.probe_settings(request.settings, search.first_load)
        load_prompts(request.settings.prompts)  # a prompt file's mistakes are said here, before a run folder exists
        arms = parse_servers(url)
        replicas = read_replicas(replicas_file, arms)
        if profile is None:
            typer.echo(no_profile_note(request.settings, request.origins), err=True)
        plan = SweepPlan(arms, request, runs_dir, lambda server, settings: profile_sweep_manifest(
            profile, server, settings, request.origins, replicas), model_name=model_name, preflight=not no_preflight,
            replicas=replicas, search=search, progress=progress, marker=marker)
        sweep_servers(plan, result)
    except RunIncomplete:  # stopped (Ctrl-C, SIGTERM, a spot notice) or failed: what ran, and how to go on
        if result.runs and result.search is None:
            say_headline([Path(path) for path in result.runs])
        raise
    finally:
        if result_file is not None:
            write_result(result, result_file)
    if search is None:
        say_headline([Path(path) for path in result.runs])
    if result.failures:
        raise RunIncomplete("; ".join(result.failures))


# the options a resumed run cannot honour (its manifest says them), each with why
RESUME_KEEPS = {
    "--profile": "a resumed run keeps the profile and request settings it ran with",
    "--replicas-file": "a resumed run sends to the replicas its manifest lists",
    "--find-max": "a resumed run runs a sweep's remaining steps, not a search",
    "--resolution": "a resumed run runs a sweep's remaining steps, not a search",
    "--max-load": "a resumed run runs a sweep's remaining steps, not a search",
    "--runs-dir": "a resumed run goes beside the run it continues",
}


def refuse_with_resume(load: LoadFlags, options: dict[str, object]) -> None:
    """``--resume`` with an option the resumed run would not honour is refused, naming it, before anything runs:
    ignored, ``--resume RUN --measure 3`` would run the old windows while the command line says 3 s.
    ``options``: each of :data:`RESUME_KEEPS`'s flags and its value, None where it was not given."""
    typed = [(flag, RESUME_KEEPS[flag]) for flag, value in options.items() if value is not None]
    typed += [(load.flag(name), "a resumed run keeps its own load settings") for name in sorted(load.given)]
    if typed:
        flags, reasons = ", ".join(flag for flag, _ in typed), "; ".join(dict.fromkeys(why for _, why in typed))
        raise UsageError(f"--resume with {flags}: {reasons}; leave {'it' if len(typed) == 1 else 'them'} out")


def write_result(result: SweepResult, path: Path) -> None:
    """``--result FILE``, written whole; a file that cannot be written (a full disk) is one line that still
    names the runs made."""
    try:
        result.write(path)
    except OSError as error:
        made = ", ".join(result.runs) or "none"
        raise UsageError(f"--result {path}: cannot write it ({error.strerror or error}); the runs made: "
                         f"{made}") from None


def say_headline(paths: list[Path]) -> None:
    """What the runs found, as their report would open, and the command that writes that report (none when
    there is nothing to report: the report would refuse as the headline did); for a run that was
    interrupted, the command that runs its remaining steps."""
    try:
        sections = build_sections(paths, decode_bytes=decode_bytes_for_runs(paths, []))
    except AnalysisError as error:
        typer.echo(f"no headline: {error}")
    else:
        typer.echo(f"\nAt a glance:\n{headline_text(sections)}\n")
        typer.echo("write the report: rigbench report " + " ".join(shlex.quote(str(path)) for path in paths))
    for path in paths:
        command = go_on_command(RunDir(path))
        if command is not None:
            typer.echo(f"go on with its remaining steps: {command}")


def _resume(old_path: Path, urls: list[str], marker: Path | None, *, progress: bool, model: str | None,
            preflight: bool, result: SweepResult) -> None:
    """``--resume RUN``: the remaining steps of an interrupted sweep, same settings (the model name its
    requests carried, unless ``--model-name`` names another), linked run."""
    if len(urls) > 1 or (urls and "=" in urls[0]):
        raise UsageError("--resume: give at most one --url, a bare URL for the new server (the run keeps its arm)")
    old = RunDir(old_path)
    old_manifest = check_resumable(old)
    sent = old_manifest.server.model_name if old_manifest.server is not None else None
    model = model or sent or DEFAULT_MODEL_NAME
    server_url = check_url(resume_url(old_manifest, urls[0] if urls else None))
    assert old_manifest.load is not None
    if preflight:
        check_health(server_url)
        check_reply(server_url, model, timeout=old_manifest.load.read_timeout_seconds)
    if old_manifest.load.context_tokens > 0:
        check_context(server_url, old_manifest.load.context_tokens)
    run, server_url = start_resumed_run(old, server_url)
    result.runs.append(str(run.path))
    manifest = run.read_manifest()
    slots = server_slots(server_url)
    if slots is not None and manifest.server is not None:
        run.update_manifest(server=manifest.server.model_copy(update={"parallel_slots": slots,
                                                                        "slots_from": "server"}))
    assert manifest.load is not None
    load = manifest.load
    kind, steps = ("rates", load.rate_steps) if load.open_loop else ("steps", load.user_steps)
    typer.echo(f"resuming {old.path.name}: {kind} {steps} into {run.path} against {server_url}")
    manifest = sweep_one(run, server_url, model, progress=progress, marker=marker)
    if manifest.status != "complete":
        result.failures.append(f"{run.path.name}: {manifest.status} ({manifest.status_detail})")
        raise RunIncomplete(result.failures[-1])  # the command says what ran (sweep's RunIncomplete)
    say_headline([run.path])
