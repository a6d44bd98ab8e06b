"""Sweep servers with one load: the function ``rigbench sweep`` and ``rigbench local`` both call.

Given the servers (one per arm), the load (``rigbench.load_options.LoadRequest``: the settings, read
once) and how to describe a server in a run's manifest, it checks every server before anything is
made (``loadtest.preflight.check_servers``), sizes ``--processes auto``, and makes one run directory
per server and document length, linked to each other, each filled by ``loadtest.sweep.run_sweep``
under the hardware sampler; or, with a search plan, one search folder of probes. A run that cannot go
on is marked in its manifest before the error goes on, so no run stays ``running``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import typer

from core.errors import RigbenchError, RunIncomplete
from core.repeat_order import Planned, interleaved, new_series_id
from core.rundir import LoadSettings, RunDir, RunManifest, utc_now
from core.rundir.models import RepeatInfo, ReplicaInfo
from core.sweep_result import SweepResult
from core.wording import counted
from loadtest.preflight import CheckedServer, check_servers
from loadtest.sweep import interrupted_error, run_sweep
from rigbench.capacity_search import exit_problem, search_capacity
from rigbench.hardware_sampling import sampled_hardware
from rigbench.load_options import LoadRequest
from rigbench.load_processes import auto_processes
from rigbench.search_plan import SearchPlan

# what a run's manifest says of a server: made from the server's checks and the run's settings
Describe = Callable[[CheckedServer, LoadSettings], RunManifest]


@dataclass
class SweepPlan:
    """What to sweep: the servers (arm name, URL), the load, where runs go and how servers are described."""

    arms: list[tuple[str | None, str]]
    load: LoadRequest
    runs_dir: Path
    describe: Describe
    model_name: str | None = None
    preflight: bool = True
    replicas: list[ReplicaInfo] = field(default_factory=list)
    search: SearchPlan | None = None
    progress: bool = True
    marker: Path | None = None
    server_threads: int | None = None  # the cores the served process takes here, for --processes auto
    premade: list[RunDir] = field(default_factory=list)  # runs made before the servers started (their logs)
    # the one repeat this plan's run is, where the caller interleaves its own arms (autotune's trials, a study's)
    repeat: RepeatInfo | None = None


def sweep_servers(plan: SweepPlan, result: SweepResult) -> SweepResult:
    """Run the plan; ``result`` (the runs made, as they are made) is filled as it goes, so a caller that
    writes it after an error still names every run that ran. A failed run does not stop the next; an
    interrupted one does (the rest are not run)."""
    servers = check_servers([url for _, url in plan.arms], plan.load.settings, plan.load.contexts,
                            model_name=plan.model_name, health=plan.preflight,
                            replicas=[replica.url for replica in plan.replicas])
    sized = {"processes": _sized_processes(plan, servers[0])} if plan.load.auto_processes else {}
    repeats = plan.load.settings.repeats
    labels = [arm or "default" for arm, _ in plan.arms]
    series = new_series_id(labels[0] if len(labels) == 1 else "arms") if repeats > 1 or len(labels) > 1 else None
    rounds = interleaved(list(servers), labels, repeats, series or "")
    if plan.repeat is not None:  # one run of a series the caller makes
        if len(servers) != 1 or repeats != 1:
            raise RigbenchError(f"a plan that is repeat {plan.repeat.index} of arm {plan.repeat.arm} runs one server "
                                f"once, not {counted(len(servers), 'server')} {counted(repeats, 'time')}")
        series, rounds = plan.repeat.series, [Planned(servers[0], plan.repeat)]
    runs: list[RunDir] = []
    for planned in rounds:
        server, arm = planned.arm, planned.repeat.arm
        for context in plan.load.contexts:
            manifest = plan.describe(server, plan.load.for_context(context, arm=None if arm == "default" else arm,
                                                                   **sized))
            warnings = [*manifest.warnings, *server.fit_warnings.get(context, [])]
            manifest = manifest.model_copy(update={"warnings": warnings,
                                                   "repeat": planned.repeat if series else None})
            if plan.search is not None:  # one search folder, one run per probe (rigbench.capacity_search)
                _search(plan, manifest, server, result)
                return result
            run = _made(plan, manifest)
            for earlier in runs:
                earlier.update_manifest(linked_runs=[*earlier.read_manifest().linked_runs, run.path.name])
            run.update_manifest(linked_runs=[earlier.path.name for earlier in runs])
            runs.append(run)
            if str(run.path) not in result.runs:
                result.runs.append(str(run.path))
            of = f", repeat {planned.repeat.index} of {repeats}" if repeats > 1 else ""
            typer.echo(f"sweep {run.path} ({arm} arm{of}, context {context}) against {server.url}")
            final = sweep_one(run, server.url, server.model_name, progress=plan.progress, marker=plan.marker)
            if final.status != "complete":
                result.failures.append(f"{run.path.name}: {final.status} ({final.status_detail})")
                if final.status == "interrupted":
                    raise RunIncomplete("; ".join(result.failures) + "; remaining sweeps not run")
    return result


def _made(plan: SweepPlan, manifest: RunManifest) -> RunDir:
    """The next run premade for the plan, now described as it will run, else a new run directory."""
    if not plan.premade:
        return RunDir.create(plan.runs_dir, manifest)
    run = plan.premade.pop(0)
    run.update_manifest(load=manifest.load, server=manifest.server, warnings=manifest.warnings,
                        request_origins=manifest.request_origins, repeat=manifest.repeat)
    return run


def _sized_processes(plan: SweepPlan, server: CheckedServer) -> int:
    """``--processes auto``: sized for the highest load the plan runs (a search's highest probe)."""
    settings, search = plan.load.settings, plan.search
    users, rates = settings.user_steps, settings.rate_steps
    if search is not None:
        if search.max_load is None:
            raise RigbenchError("--processes auto with --find-max needs --max-load: the probes' loads are not known "
                                "before the search, and the processes are sized for the highest")
        users, rates = ([int(search.max_load)], []) if search.mode == "users" else ([], [search.max_load])
    count, line = auto_processes(server.url, server.model_name, user_steps=users, rate_steps=rates,
                                 max_tokens=settings.max_tokens, server_threads=plan.server_threads)
    typer.echo(line)
    return count


def sweep_one(run: RunDir, url: str, model: str, *, progress: bool = True, marker: Path | None = None
              ) -> RunManifest:
    """Run one sweep and print its warnings and final status. Ctrl-C/SIGTERM becomes one error line; an
    error that stops it marks the run failed (if the sweep left it running) and ends the command as a run
    that failed."""
    try:
        with sampled_hardware(run, url):  # from before the first step: the first samples are the idle power
            manifest = run_sweep(run, url, progress=progress, model=model, interruption_marker=marker)
    except KeyboardInterrupt:
        _mark_ended(run, "interrupted", "Ctrl-C or SIGTERM")
        raise interrupted_error(run) from None
    except RunIncomplete:
        raise
    except RigbenchError as error:
        _mark_ended(run, "failed", str(error))
        raise RunIncomplete(f"{run.path}: run failed: {error}") from None
    except Exception as error:  # a bug must not leave the run "running" (compact and check refuse those)
        _mark_ended(run, "failed", f"{type(error).__name__}: {error}")
        raise
    for warning in manifest.warnings:
        typer.echo(f"warning: {warning}")
    typer.echo(f"{run.path}: {manifest.status}" + (f" ({manifest.status_detail})" if manifest.status_detail else ""))
    return manifest


def _mark_ended(run: RunDir, status: str, detail: str) -> None:
    """Close a run the sweep left ``running`` (it never stays so after the process ends)."""
    if run.read_manifest().status == "running":
        run.update_manifest(status=status, status_detail=detail, ended_at=utc_now())


def _search(plan: SweepPlan, template: RunManifest, server: CheckedServer, result: SweepResult) -> None:
    """``--find-max``: every probe a one-step sweep of ``template``'s settings; then the commands that read it."""
    assert plan.search is not None
    folder, search = search_capacity(plan.search, template, plan.runs_dir,
                                     lambda run: sweep_one(run, server.url, server.model_name, progress=plan.progress,
                                                                          marker=plan.marker), say=typer.echo)
    result.search = str(folder)
    result.runs = [str(path.parent) for path in sorted(folder.glob("*/manifest.json"))]
    unit = "--users N" if plan.search.mode == "users" else "--rate R"
    typer.echo(f"write the report: rigbench report {shlex.quote(str(folder))}\n"
               f"plan from it: rigbench plan {shlex.quote(str(folder))} {unit} [--price-as TYPE | --usd-per-hour USD]")
    problem = exit_problem(search)
    if problem is not None:
        result.failures.append(problem)
        raise RunIncomplete(problem)
