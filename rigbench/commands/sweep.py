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
from typing import Any

import typer

from analysis.headline import headline_text
from analysis.report import build_sections
from core.errors import AnalysisError, RunIncomplete, UsageError
from core.lists import (
    SWEEP_MAX_ERROR_RATE,
    SWEEP_MEASURE,
    SWEEP_READ_TIMEOUT_S,
    SWEEP_WARMUP_SECONDS,
    check_pin_slots,
    parse_counts,
    parse_windows,
)
from core.machine import server_rig
from core.profile import RequestDefaults, RigProfile, load_profile
from core.rundir import LoadSettings, ModelInfo, RigInfo, RunDir, RunManifest, new_manifest, server_at
from core.rundir.models import RequestOrigins, ServerDescription, SettingOrigin, SlotsFrom
from core.workload import parse_slo
from loadtest.lengths import longest_request
from loadtest.model_list import ModelList, listed_model, read_model_list
from loadtest.preflight import check_context, check_health, check_prompt_cuts, check_reply, check_url
from loadtest.prompts import load_prompts
from loadtest.resume import check_resumable, resume_url, start_resumed_run
from loadtest.server_description import (
    check_conversation_fits,
    check_drawn_fit,
    check_reply_fits,
    describe_server,
)
from loadtest.sweep import default_interruption_marker, interrupted_error, run_sweep
from loadtest.telemetry import server_slots
from rigbench.capacity_search import (
    FIND_MAX_HELP,
    MAX_LOAD_HELP,
    RESOLUTION_HELP,
    SearchPlan,
    exit_problem,
    search_capacity,
    search_plan,
)
from rigbench.decode_bytes import decode_bytes_for_runs
from rigbench.hardware_sampling import sampled_hardware
from rigbench.load_processes import auto_processes, parse_processes
from rigbench.options import (
    arrival_option,
    arrival_seed_option,
    drain_option,
    measure_option,
    output_length_option,
    pin_slots_option,
    processes_option,
    prompt_length_option,
    prompts_option,
    rates_option,
    runs_dir_option,
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
from rigbench.replica_list import read_replicas, with_replicas
from rigbench.served_model import served_model

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
DEFAULT_MODEL_NAME = "default"  # what llama-server takes whatever model it serves


def profile_sweep_manifest(profile: RigProfile | None, url: str, settings: LoadSettings, slots: int | None,
                           slots_from: SlotsFrom | None, *, model_name: str | None = None,
                           description: ServerDescription | None = None,
                           origins: RequestOrigins | None = None, rig: RigInfo | None = None,
                           model: ModelInfo | None = None) -> RunManifest:
    """The run's manifest: without a profile, the server is described only as it described itself
    (its /slots, /props, /v1/models), the profile is recorded as ``none``, and where each request
    setting came from is said (``origins``). ``rig`` and ``model``: the server's machine and the file
    it serves, where this machine can tell (``core.machine.server_rig``, ``rigbench.served_model``)."""
    name = profile.name if profile is not None else NO_PROFILE
    label = "-".join(filter(None, [name if profile is not None else "sweep", settings.arm,
                                   f"d{settings.context_tokens}" if settings.context_tokens else None]))
    args = profile.server.args if profile is not None else []
    server = server_at(url, args, slots, slots_from).model_copy(
        update={"model_name": model_name, "description": description})
    manifest = new_manifest(label, name, load=settings, server=server, rig=rig, model=model)
    return manifest.model_copy(update={"request_origins": origins})


def request_settings(
    profile: RigProfile | None, *, max_tokens: int | None, ignore_eos: bool | None
) -> tuple[RequestDefaults, RequestOrigins]:
    """The requests' settings and where each came from: a flag, else the profile, else rigbench's own
    default (never another server's profile). The model name's origin is each server's (``sent_model_name``)."""
    base = profile.request if profile is not None else RequestDefaults()
    fallback: SettingOrigin = "profile" if profile is not None else "rigbench"
    request = base.model_copy(update={"max_tokens": base.max_tokens if max_tokens is None else max_tokens,
                                      "ignore_eos": base.ignore_eos if ignore_eos is None else ignore_eos})
    origins = RequestOrigins(model_name="rigbench", max_tokens=fallback if max_tokens is None else "flag",
                             temperature=fallback, ignore_eos=fallback if ignore_eos is None else "flag",
                             cache_prompt=fallback)
    return request, origins


def no_profile_note(request: RequestDefaults, origins: RequestOrigins) -> str:
    """What a sweep without ``--profile`` says once on stderr and keeps in its manifest's warnings (so its
    report says it too): the request settings it sent and whose they were, since the profile the server
    was started with may ask for others (a fixed reply length, say)."""
    switch = {True: "on", False: "off"}
    sent = [("max_tokens", str(request.max_tokens), origins.max_tokens),
            ("temperature", f"{request.temperature:g}", origins.temperature),
            ("ignore_eos", switch[request.ignore_eos], origins.ignore_eos),
            ("cache_prompt", switch[request.cache_prompt], origins.cache_prompt)]
    settings = ", ".join(f"{name} {value}" + (" (flag)" if origin == "flag" else "") for name, value, origin in sent)
    return (f"no --profile: requests carried {settings}, rigbench's own defaults where no flag was given, not "
            "the request settings of a profile; give --profile NAME for those of the profile the server was "
            "started with")


def sent_model_name(models: ModelList, given: str | None) -> tuple[str, SettingOrigin]:
    """The model name requests carry, and its origin: ``--model-name``, else the one model the server
    lists at /v1/models, else ``default`` (llama-server takes any name)."""
    if given:
        return given, "flag"
    listed = listed_model(models)
    return (listed, "server") if listed else (DEFAULT_MODEL_NAME, "rigbench")


def sweep_slots(url: str, profile: RigProfile | None) -> tuple[int | None, SlotsFrom | None]:
    """The server's slot count from its own /slots; else the profile's when one is named; else unknown."""
    slots = server_slots(url)
    if slots is not None:
        return slots, "server"
    if profile is not None:
        return profile.server.parallel_slots, "profile"
    return None, None


app = typer.Typer()


@app.command("sweep", epilog=EXIT_CODES)
def sweep(
    url: list[str] = typer.Option(
        [], "--url", help="server base URL, e.g. http://127.0.0.1:8080; or NAME=URL, once per server configuration "
        "(one linked run each)",
    ),
    profile_name: str = typer.Option(
        None, "--profile", help="rig profile the server was started with (its request defaults and slots); "
        "default: none, so request defaults are rigbench's own (said on stderr and in the run's warnings) and slots "
        "are the server's /slots",
    ),
    steps: str = steps_option(),
    rates: str = rates_option(),
    arrival: str = arrival_option(),
    arrival_seed: int = arrival_seed_option(),
    warmup: float = warmup_option(SWEEP_WARMUP_SECONDS),
    measure: str = measure_option(SWEEP_MEASURE),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="default: the profile's, else 256"),
    ignore_eos: bool = typer.Option(None, "--ignore-eos/--no-ignore-eos", help="default: the profile's, else off"),
    prompts: str = prompts_option(),
    context_tokens: str = typer.Option(
        "0", "--context-tokens", help="document tokens ahead of each prompt, e.g. 0,8192"
    ),
    processes: str = processes_option(),
    runs_dir: Path = runs_dir_option(),
    model_name: str = typer.Option(
        None, "--model-name", help="model name sent in requests; default: the one model the server lists at "
        "/v1/models, else 'default' (llama-server takes any)",
    ),
    no_preflight: bool = typer.Option(
        False, "--no-preflight", help="skip the check of /health and one streamed reply before the sweep"
    ),
    max_error_rate: float = typer.Option(
        SWEEP_MAX_ERROR_RATE, "--max-error-rate", min=0.0, max=1.0,
        help="stop the sweep above this share of failed requests (0 to 1)"
    ),
    read_timeout: float = typer.Option(
        SWEEP_READ_TIMEOUT_S, "--read-timeout", min=0.1, help="seconds a stream may stall (the pre-flight reply too)"
    ),
    timeline: bool = typer.Option(False, "--timeline", help="also keep every chunk's arrival time"),
    replicas_file: Path = typer.Option(
        None, "--replicas-file", help="a JSON list of replicas (index, url, slots, gpu, cpus) to spread the users "
        "over, user i to replica i mod N, as the rig's serve step writes it; --url is the first replica's",
    ),
    pin_slots: bool = pin_slots_option(),
    drain: float = drain_option(),
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
    find_max: str = typer.Option(None, "--find-max", help=FIND_MAX_HELP),
    resolution: str = typer.Option(None, "--resolution", help=RESOLUTION_HELP),
    max_load: float = typer.Option(None, "--max-load", min=0, help=MAX_LOAD_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    interruption_marker: Path = typer.Option(
        None,
        "--interruption-marker",
        help="stop the sweep (status interrupted, resumable) when this file appears; "
        "default: the spot watcher's marker when run on a rig",
    ),
    resume: Path = typer.Option(
        None,
        "--resume",
        help="continue an interrupted run's remaining steps (its own settings) into a linked run; "
        "--url for a new server",
    ),
) -> None:
    """Step a streaming chat load through user counts (or open-loop arrival rates) against a running server.

    Before anything is created, every server is checked: its URL is a server's root, /health
    (or /v1/models) answers, and one streamed reply comes back whole."""
    marker = interruption_marker or default_interruption_marker()
    search = search_plan(find_max, slo=parse_slo(slo) if slo else {}, resolution=resolution, max_load=max_load,
                         steps=steps, rates=rates, trace=trace, urls=url, measure=measure,
                         context_tokens=context_tokens, resume=resume)
    if search is not None:  # the settings are made for the first probe; each probe runs at its own load
        steps, rates = search.first_steps()
    if resume is not None:
        if len(url) > 1 or (url and "=" in url[0]):
            raise UsageError("--resume: give at most one --url, a bare URL for the new server (the run keeps its arm)")
        _resume(resume, url[0] if url else None, marker, progress=progress, model=model_name,
                max_error_rate=max_error_rate,
                read_timeout=read_timeout, preflight=not no_preflight)
        return
    profile = load_profile(profile_name) if profile_name is not None else None
    user_steps, rate_steps, workload = workload_load(
        steps=steps, rates=rates, arrival=arrival, sessions=sessions, turns=turns, think=think,
        system_prompt_tokens=system_prompt_tokens, prompt_length=prompt_length, output_length=output_length,
        trace=trace, trace_speed=trace_speed, workload_seed=workload_seed, slo=slo)
    load_processes = parse_processes(processes)
    check_pin_slots(pin_slots, bool(rate_steps), load_processes)
    contexts = parse_counts(context_tokens, "--context-tokens", minimum=0, example="0,8192")
    measure_seconds = parse_windows(measure, rate_steps or user_steps, kind="rate" if rate_steps else "user")
    load_prompts(prompts)  # a prompt file's mistakes are said here, before a run folder exists
    arms = parse_servers(url)
    replicas = read_replicas(replicas_file, arms)
    # each server's /v1/models, read once: it names the model to send, stands in for a missing /health,
    # and may say how many tokens a request holds
    model_lists: dict[str, ModelList] = {}
    models: dict[str, tuple[str, SettingOrigin]] = {}
    for _, arm_url in arms:
        model_lists[arm_url] = read_model_list(arm_url)
        models[arm_url] = sent_model_name(model_lists[arm_url], model_name)
    if not no_preflight:
        for _, arm_url in arms:
            check_health(arm_url, models=model_lists[arm_url])
            check_reply(arm_url, models[arm_url][0], timeout=read_timeout)
    if max(contexts) > 0:
        for _, arm_url in arms:
            check_context(arm_url, max(contexts))
    system_prompt = workload["sessions"].system_prompt_tokens if workload["sessions"] is not None else 0
    longest, longest_reply = longest_request(workload["trace"], workload["prompt_length"], workload["output_length"])
    for _, arm_url in arms:  # texts cut by the server's tokens: a server that cannot count them is said now
        if system_prompt:
            check_context(arm_url, system_prompt, "--system-prompt-tokens")
        if longest:
            check_prompt_cuts(arm_url, longest, "--trace" if workload["trace"] is not None else "--prompt-length")
    request, origins = request_settings(profile, max_tokens=max_tokens, ignore_eos=ignore_eos)
    note = no_profile_note(request, origins) if profile is None else None
    if note:
        typer.echo(note, err=True)
    described = {arm_url: describe_server(arm_url, models=model_lists[arm_url]) for _, arm_url in arms}
    drawn = [flag for flag, key in (("--prompt-length", "prompt_length"), ("--output-length", "output_length"))
             if workload[key] is not None]
    if workload["trace"] is not None or drawn:
        reply = longest_reply if longest_reply is not None else request.max_tokens
        for _, arm_url in arms:
            check_drawn_fit(arm_url, described[arm_url], prompt_tokens=longest + max(contexts), reply_tokens=reply,
                            options="--trace" if workload["trace"] is not None else " and ".join(drawn))
    fit_warnings = {(arm_url, context): [check_reply_fits(arm_url, described[arm_url], max_tokens=request.max_tokens,
                                                          ignore_eos=request.ignore_eos, context_tokens=context)]
                    for _, arm_url in arms for context in contexts}
    if (sessions := workload["sessions"]) is not None:  # a turn resends its history: the longest must fit too
        options = " ".join([f"--sessions --turns {sessions.turns_min}-{sessions.turns_max}", *drawn])
        prompts, replies = workload["prompt_length"], workload["output_length"]
        prompt_tokens = (prompts.minimum, prompts.maximum) if prompts is not None else (0, 0)
        reply_tokens = ((replies.minimum, replies.maximum) if replies is not None else
                        (request.max_tokens if request.ignore_eos else 0, request.max_tokens))
        for (arm_url, context), said in fit_warnings.items():
            said.append(check_conversation_fits(arm_url, described[arm_url], sessions=sessions, context_tokens=context,
                                                prompt_tokens=prompt_tokens, reply_tokens=reply_tokens,
                                                options=options))
    if load_processes is None:
        sized_users, sized_rates = user_steps, rate_steps
        if search is not None:  # every probe runs with these processes: size them for the highest one
            if search.max_load is None:
                raise UsageError("--processes auto with --find-max needs --max-load: the probes' loads are not known "
                                 "before the search, and the processes are sized for the highest")
            sized_users, sized_rates = ([int(search.max_load)], []) if search.mode == "users" else (
                [], [search.max_load])
        load_processes, line = auto_processes(
            arms[0][1], models[arms[0][1]][0], user_steps=sized_users, rate_steps=sized_rates,
            max_tokens=request.max_tokens,
        )
        typer.echo(line)
    runs: list[RunDir] = []
    failures = []
    for arm_name, arm_url in arms:
        slots, slots_from = sweep_slots(arm_url, profile)
        rig, model = server_rig(arm_url), served_model(arm_url)
        for context in contexts:
            settings = LoadSettings(
                user_steps=user_steps,
                rate_steps=rate_steps,
                arrival_seed=arrival_seed,
                warmup_seconds=warmup,
                measure_seconds=measure_seconds,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                # a chat service's conversations resend their history: the server's prompt cache is on
                cache_prompt=request.cache_prompt or workload["sessions"] is not None,
                ignore_eos=request.ignore_eos,
                prompts=prompts,
                context_tokens=context,
                processes=load_processes,
                arm=arm_name,
                pin_slots=pin_slots,
                drain_seconds=drain,
                **workload,
            )
            manifest = profile_sweep_manifest(profile, arm_url, settings, slots, slots_from,
                                              model_name=models[arm_url][0], description=described[arm_url],
                                              origins=origins.model_copy(update={
                                                  "model_name": models[arm_url][1],
                                                  # --sessions turned the prompt cache on
                                                  **({"cache_prompt": "flag"} if settings.cache_prompt
                                                     and not request.cache_prompt else {})}),
                                              rig=rig, model=model)
            manifest = with_replicas(manifest, replicas)
            warnings = [warning for warning in (note, *fit_warnings[arm_url, context]) if warning]
            if warnings:
                manifest = manifest.model_copy(update={"warnings": warnings})
            if search is not None:  # --find-max: a search folder, one run per probe (rigbench.capacity_search)
                _search(search, manifest, runs_dir, arm_url, progress=progress, model=models[arm_url][0],
                        max_error_rate=max_error_rate, read_timeout=read_timeout, timeline=timeline,
                        interruption_marker=marker)
                return
            run = RunDir.create(runs_dir, manifest)
            for earlier in runs:
                earlier.update_manifest(linked_runs=[*earlier.read_manifest().linked_runs, run.path.name])
            run.update_manifest(linked_runs=[r.path.name for r in runs])
            runs.append(run)
            typer.echo(f"sweep {run.path} ({arm_name or 'default'} arm, context {context}) against {arm_url}")
            manifest = _sweep_and_say(
                run,
                arm_url,
                progress=progress,
                model=models[arm_url][0],
                max_error_rate=max_error_rate,
                read_timeout=read_timeout,
                timeline=timeline,
                interruption_marker=marker,
            )
            if manifest.status != "complete":
                failures.append(f"{run.path.name}: {manifest.status} ({manifest.status_detail})")
                if manifest.status == "interrupted":
                    raise RunIncomplete("; ".join(failures) + "; remaining sweeps not run")
    say_headline([run.path for run in runs])
    if failures:
        raise RunIncomplete("; ".join(failures))


def say_headline(paths: list[Path]) -> None:
    """What the runs found, as their report would open, and the command that writes that report."""
    try:
        sections = build_sections(paths, decode_bytes=decode_bytes_for_runs(paths, []))
    except AnalysisError as error:
        typer.echo(f"no headline: {error}")
    else:
        typer.echo(f"\nAt a glance:\n{headline_text(sections)}\n")
    typer.echo("write the report: rigbench report " + " ".join(shlex.quote(str(path)) for path in paths))


def _search(plan: SearchPlan, template: RunManifest, runs_dir: Path, url: str, **sweep_options: Any) -> None:
    """``--find-max``: every probe a one-step sweep of ``template``'s settings; then the commands that read it."""
    folder, search = search_capacity(plan, template, runs_dir, lambda run: _sweep_and_say(run, url, **sweep_options),
                                     say=typer.echo)
    unit = "--users N" if plan.mode == "users" else "--rate R"
    typer.echo(f"write the report: rigbench report {shlex.quote(str(folder))}\n"
               f"plan from it: rigbench plan {shlex.quote(str(folder))} {unit} [--price-as TYPE]")
    problem = exit_problem(search)
    if problem is not None:
        raise RunIncomplete(problem)


def _sweep_and_say(run: RunDir, url: str, **sweep_options: Any) -> RunManifest:
    """Run one sweep and print its warnings and final status; Ctrl-C/SIGTERM becomes one error line."""

    try:
        with sampled_hardware(run, url):  # from before the first step: the first samples are the idle power
            manifest = run_sweep(run, url, **sweep_options)
    except KeyboardInterrupt:
        raise interrupted_error(run) from None
    for warning in manifest.warnings:
        typer.echo(f"warning: {warning}")
    typer.echo(f"{run.path}: {manifest.status}" + (f" ({manifest.status_detail})" if manifest.status_detail else ""))
    return manifest


def _resume(
    old_path: Path, url: str | None, marker: Path | None, *, progress: bool, model: str | None,
    max_error_rate: float, read_timeout: float, preflight: bool,
) -> None:
    """``--resume RUN``: the remaining steps of an interrupted sweep, same settings (the model name its
    requests carried, unless ``--model-name`` names another), linked run."""

    old = RunDir(old_path)
    old_manifest = check_resumable(old)
    sent = old_manifest.server.model_name if old_manifest.server is not None else None
    model = model or sent or DEFAULT_MODEL_NAME
    server_url = check_url(resume_url(old_manifest, url))
    if preflight:
        check_health(server_url)
        check_reply(server_url, model, timeout=read_timeout)
    if old_manifest.load is not None and old_manifest.load.context_tokens > 0:
        check_context(server_url, old_manifest.load.context_tokens)
    run, server_url = start_resumed_run(old, server_url)
    manifest = run.read_manifest()
    slots = server_slots(server_url)
    if slots is not None and manifest.server is not None:
        run.update_manifest(server=manifest.server.model_copy(update={"parallel_slots": slots,
                                                                        "slots_from": "server"}))
    assert manifest.load is not None
    load = manifest.load
    kind, steps = ("rates", load.rate_steps) if load.open_loop else ("steps", load.user_steps)
    typer.echo(f"resuming {old.path.name}: {kind} {steps} into {run.path} against {server_url}")
    manifest = _sweep_and_say(
        run,
        server_url,
        progress=progress,
        model=model,
        max_error_rate=max_error_rate,
        read_timeout=read_timeout,
        interruption_marker=marker,
    )
    say_headline([run.path])
    if manifest.status != "complete":
        raise RunIncomplete(f"{run.path.name}: {manifest.status} ({manifest.status_detail})")
