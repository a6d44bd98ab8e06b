"""Run one sweep: a headless Locust subprocess that fills an existing run directory.

Locust runs in its own process (``python -m locust``) so gevent's monkey-patching never
reaches the caller. What to run travels in the run directory, not on its command line: the
manifest holds the load settings, the model name, the slots and the replicas, and the
locustfile reads them there; the log keeps the hand-run options that would run the same load
(``locust -f loadtest/locustfile.py --help`` lists them). This process only watches:
it draws progress from the run directory and makes sure the manifest never stays
``running`` once Locust is gone — ``complete``, ``failed`` (with the reason) or
``interrupted`` (Ctrl-C, SIGTERM, or an early exit)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import httpx
import numpy as np
import psutil
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from core.errors import LoadTestError, RunDirError, RunInterrupted
from core.lists import seconds_per_step
from core.load_reached import (
    FAIL_BELOW,
    SESSION_BUSY,
    describe_shortfall,
    load_reached,
    mean_in_flight,
    sent_rate,
    session_users,
    user_held_until,
)
from core.network import free_port
from core.rundir import LoadSettings, RunDir, RunManifest, StepWindow, utc_now
from core.rundir.columns import read_record_table
from core.signals import stop_signals_as_keyboard_interrupt
from core.wording import counted
from loadtest import LOCUSTFILE
from loadtest.arrivals import step_arrivals
from loadtest.backoff import REFUSAL_KINDS
from loadtest.error_watch import fix_for, kinds_said
from loadtest.http_errors import describe_http_error
from loadtest.late_starts import LateStarts, is_measured
from loadtest.lengths import longest_prompt
from loadtest.locust_options import hand_run_flags
from loadtest.long_context import context_for_tokens, document_tokens
from loadtest.process_capacity import read_capacity
from loadtest.schedule import ARRIVALS_PER_WINDOW, open_loop_windows, stage_label, stages_for, total_duration
from loadtest.token_counts import count_cut_requests

REPO_ROOT = LOCUSTFILE.parent.parent
LOCUST_LOG = "locust.log"
# Locust's --csv tables that are only a header when nothing failed
EMPTY_WHEN_CLEAN = ("locust_failures.csv", "locust_exceptions.csv")
# where infra/templates/spot_watcher.sh writes its notice on the rig (RIGBENCH_SPOT_MARKER overrides both)
RIG_INTERRUPTION_MARKER = Path("/opt/dlami/nvme/rigbench/spot-interruption.json")
WORKER_GRACE_SECONDS = 15.0  # a --processes worker still writing its last records after the master exited
# A step that ran short with at least this share of its requests failed is short for its failures.
FAILED_SHARE = 0.1


def locust_command(run: RunDir, base_url: str, settings: LoadSettings, *, stop_timeout: float = 0.0,
                   interruption_marker: Path | None = None) -> list[str]:
    """The ``locust`` command line for a sweep: Locust reads what to run from the run's manifest (its load
    settings, the model name, the slots and the replicas); the line says only where the run is, the
    processes (Locust's own option) and the spot watcher's marker."""
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "--no-preflight",  # run_sweep's caller checked the server before it made the run directory
        "--host", base_url,
        "--run-dir", str(run.path.resolve()),  # Locust runs from the repository root
        "--stop-timeout", str(int(stop_timeout)),
        "--csv", str(run.path.resolve() / "locust"), "--only-summary",
        "--loglevel", "WARNING", "--exit-code-on-error", "0",
    ]
    if settings.processes > 1:
        # the master's port for its workers: a free one on loopback, not Locust's fixed 5557 on every
        # interface (two multi-process sweeps at once on one machine would fight over it)
        port = str(free_port())
        command += ["--processes", str(settings.processes), "--master-bind-host", "127.0.0.1",
                    "--master-bind-port", port, "--master-host", "127.0.0.1", "--master-port", port]
    if interruption_marker is not None:
        command += ["--interruption-marker", str(interruption_marker)]
    return command


def default_interruption_marker() -> Path | None:
    """The spot watcher's marker path when this machine is a rig (its folder exists), else None."""
    configured = os.environ.get("RIGBENCH_SPOT_MARKER")
    if configured:
        return Path(configured)
    return RIG_INTERRUPTION_MARKER if RIG_INTERRUPTION_MARKER.parent.is_dir() else None


def _count_records(run: RunDir) -> tuple[int, int]:
    """(records, errors) written so far, read cheaply from the shards."""
    total = errors = 0
    folder = run.path / RunDir.RECORDS
    for path in folder.glob("*.jsonl"):
        with open(path, "rb") as handle:
            for line in handle:
                total += 1
                if b'"error_kind"' in line:
                    errors += 1
    return total, errors


def _watch(process: subprocess.Popen, run: RunDir, settings: LoadSettings, progress: bool) -> None:
    """Wait for Locust, drawing a progress bar on stderr when it is a terminal: stdout is the command's
    own output, and a bar's frames in a pipe or a log are noise (its last frame would stay there)."""
    stages = stages_for(settings)
    total = total_duration(stages)
    console = Console(stderr=True)
    if not progress or not console.is_terminal:
        process.wait()
        return
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("/"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("starting locust", total=total)
        started = None
        while process.poll() is None:
            time.sleep(0.5)
            with contextlib.suppress(Exception):
                manifest = run.read_manifest()
                if manifest.steps:
                    started = started or manifest.steps[0].started_at
                    step = manifest.steps[-1]
                    phase = "measuring" if time.time() >= step.measure_start else "warming up"
                    records, errors = _count_records(run)
                    bar.update(
                        task,
                        completed=min(total, time.time() - started),
                        description=(
                            f"step {step.index + 1}/{len(stages)}: {stage_label(step.users, step.rate)}, {phase}; "
                            f"{counted(records, 'request')}, {counted(errors, 'error')}"
                        ),
                    )
        bar.update(task, completed=total if process.returncode == 0 else bar.tasks[0].completed)


def _log_tail(path: Path, lines: int = 8) -> str:
    if not path.exists():
        return "(no locust log)"
    with open(path, errors="replace") as handle:
        return " | ".join(line.strip() for line in deque(handle, maxlen=lines) if line.strip())


def _drop_empty_locust_tables(run: RunDir) -> None:
    """Locust's failure and exception tables when they hold only their header: every run would keep the same
    empty file (the records hold every failure anyway); one that lists something is kept."""
    for name in EMPTY_WHEN_CLEAN:
        path = run.path / name
        with contextlib.suppress(OSError):
            if path.is_file() and len(path.read_text().splitlines()) <= 1:
                path.unlink()


def _finalise(run: RunDir, returncode: int | None, interrupted: bool) -> RunManifest:
    """Whatever happened, leave a final status (the Locust process may have set one)."""
    manifest = run.read_manifest()
    if interrupted and manifest.status in ("running", "interrupted"):
        return run.update_manifest(
            status="interrupted", status_detail="stopped by Ctrl-C or SIGTERM", ended_at=manifest.ended_at or utc_now()
        )
    if manifest.status != "running":
        return manifest
    if returncode == 0:
        expected = manifest.load.step_count - 1 if manifest.load else None
        if manifest.last_complete_step is not None and manifest.last_complete_step == expected:
            return run.update_manifest(status="complete", ended_at=utc_now())
        return run.update_manifest(
            status="interrupted", ended_at=utc_now(), status_detail="locust ended before the last step completed"
        )
    detail = f"locust exited with code {returncode}: {_log_tail(run.path / LOCUST_LOG)}"
    return run.update_manifest(status="failed", status_detail=detail[:2000], ended_at=utc_now())


def interrupted_error(run: RunDir) -> RunInterrupted:
    """The one line a command ends with when Ctrl-C or SIGTERM stopped its sweep."""
    return RunInterrupted(f"{run.path}: interrupted (Ctrl-C or SIGTERM); its records are kept")


def run_sweep(
    run: RunDir,
    base_url: str,
    *,
    progress: bool = True,
    model: str | None = None,
    interruption_marker: Path | None = None,
) -> RunManifest:
    """Run the whole sweep in one ``locust --headless`` process and return the final manifest.

    The caller has created ``run`` (status ``running``); its manifest holds the load settings
    and the server's slot count, which is all the sweep needs besides the URL. Records, step windows and
    telemetry land in it as the sweep goes; a ``failed`` manifest carries the reason in
    ``status_detail``. Ctrl-C or SIGTERM stops Locust (it writes what it has), marks the
    run ``interrupted`` and then raises ``KeyboardInterrupt`` to the caller.

    At the end of the last step Locust stops its users at once: a request still streaming
    is recorded ``interrupted`` with the tokens it had (a harness stop, not a server fault).
    When ``interruption_marker`` (the spot watcher's file) appears mid-sweep, the sweep
    stops the same way and the run ends ``interrupted`` at its last complete step, ready
    for ``rigbench sweep --resume``. Every Locust process (``--processes`` workers too)
    has exited when this returns."""
    manifest = run.read_manifest()
    if manifest.load is None or manifest.server is None:
        raise LoadTestError(f"{run.path}: the manifest has no load settings or server; start runs with new_manifest")
    settings = manifest.load
    model = model or manifest.server.model_name or "default"
    if manifest.server.model_name != model:  # the manifest names the model name the requests carry
        manifest = run.update_manifest(server=manifest.server.model_copy(update={"model_name": model}))
    cut_texts = {"long-context": settings.context_tokens,
                 "sessions": settings.sessions.system_prompt_tokens if settings.sessions else 0}
    for kind, tokens in cut_texts.items():
        if tokens <= 0:
            continue
        try:  # fail here, in one clear line, rather than in every simulated user
            context_for_tokens(base_url, tokens)
        except (LoadTestError, httpx.HTTPError) as error:
            said = describe_http_error(error) if isinstance(error, httpx.HTTPError) else str(error)
            run.update_manifest(status="failed", status_detail=said, ended_at=utc_now())
            raise LoadTestError(f"{kind} sweep cannot start: {said}") from None
    if (longest := longest_prompt(settings)) > 0:
        try:  # prompts are cut by the served model's tokens (loadtest.lengths): a server that cannot is said here
            document_tokens(base_url, longest)
        except (LoadTestError, httpx.HTTPError) as error:
            said = describe_http_error(error) if isinstance(error, httpx.HTTPError) else str(error)
            run.update_manifest(status="failed", status_detail=said, ended_at=utc_now())
            raise LoadTestError(f"drawn prompt lengths cannot be sent: {said}") from None
    # how long a Ctrl-C'd Locust may take to write up
    stop_grace = max(30.0, *seconds_per_step(settings.measure_seconds, settings.step_count))
    command = locust_command(run, base_url, settings, interruption_marker=interruption_marker)
    log_path = run.path / LOCUST_LOG
    interrupted = False
    try:
        with stop_signals_as_keyboard_interrupt(), open(log_path, "ab") as log:
            log.write(("$ " + shlex.join(command) + "\n# the same load by hand: locust -f loadtest/locustfile.py "
                       f"--host {base_url} --model-name {shlex.quote(model)} "
                       f"{shlex.join(hand_run_flags(settings))}\n").encode())
            log.flush()
            process = subprocess.Popen(
                # from the repository root, ``python -m locust`` imports this checkout's packages
                # even where the project is not installed (a bare GPU machine)
                command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True,
                preexec_fn=_take_sigint,
            )
            try:
                _watch(process, run, settings, progress)
                _reap_group(process.pid, grace=WORKER_GRACE_SECONDS)
            except KeyboardInterrupt:
                interrupted = True
                _stop(process, grace=stop_grace + 10)
                _reap_group(process.pid, grace=5.0)
    except OSError as error:
        run.update_manifest(status="failed", status_detail=f"could not start locust: {error}", ended_at=utc_now())
        raise LoadTestError(
            f"could not start locust ({error}); is it installed in {sys.executable}'s environment?"
        ) from None
    _drop_empty_locust_tables(run)  # before the final status: a copy made once the status is final has them
    manifest = _finalise(run, process.returncode, interrupted)
    if interrupted:
        raise KeyboardInterrupt  # the run is marked "interrupted"; the caller still learns it was stopped
    warning = count_cut_requests(run, base_url)
    if warning is not None:
        manifest = run.update_manifest(warnings=[*manifest.warnings, warning])
    return _judge_records(run, manifest, settings)


def _judge_records(run: RunDir, manifest: RunManifest, settings: LoadSettings) -> RunManifest:
    """Read the records once the load is over, as the run's record table (core.rundir.columns:
    parsed in bulk, and kept as the run's ``records.arrow`` when the run is large, so the first
    report reads it in milliseconds). A complete run in which no request of a step ended
    successfully inside or after its measured window measured nothing there, and is failed, not
    complete; a step that asked more tok/s of each load process than ``rigbench selftest`` found
    one process follows within 1 % on this machine gets a warning, and so does an open-loop step
    whose requests started late against their schedule (``loadtest.late_starts``); a complete run
    with a step that ran under half the load it names (``core.load_reached``) is failed, saying so."""
    try:
        table = read_record_table(run, manifest).table
    except (RunDirError, OSError) as error:  # the status says what happened; `rigbench check` names the line
        return run.update_manifest(warnings=[*manifest.warnings, f"records not judged: {error}"])
    late = LateStarts.of_table(table)
    steps = table.column("step").to_numpy().astype(int)
    measured = is_measured(table)
    completion = np.nan_to_num(table.column("completion_tokens").to_numpy())
    tokens = {int(step): float(completion[measured & (steps == step)].sum()) for step in np.unique(steps)}
    interrupted = table.column("interrupted").fill_null(False).to_numpy(zero_copy_only=False)
    kinds = np.where(interrupted, "interrupted",
                     table.column("error_kind").cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False))
    good = kinds == ""
    ends = table.column("t_end").to_numpy()
    last_ok_end = {int(step): float(ends[good & (steps == step)].max()) for step in np.unique(steps[good])}
    others: dict[int, dict[str, int]] = {}
    for step, kind in zip(steps[~good], kinds[~good], strict=True):
        counts = others.setdefault(int(step), {})
        counts[str(kind)] = counts.get(str(kind), 0) + 1
    changes: dict = {}
    empty = [step for step in manifest.steps
             if step.measure_end is not None and last_ok_end.get(step.index, 0.0) <= step.measure_start]
    if manifest.status == "complete" and empty:
        step = empty[0]
        seen = ", ".join(f"{count} {kind}" for kind, count in sorted(others.get(step.index, {}).items())) or "none"
        changes |= {
            "status": "failed",
            "status_detail": (
                f"step {step.index} ({stage_label(step.users, step.rate)}): no request of the step ended successfully "
                f"in its measured window (the others: {seen}), so nothing was measured; "
                + _nothing_measured_cause(others.get(step.index, {}))
            ),
        }
    if manifest.status == "complete" and "status" not in changes:
        shortfall = _load_shortfall(table, steps, measured, manifest, others)
        if shortfall is not None:
            changes |= {"status": "failed", "status_detail": shortfall}
    capacity = read_capacity()
    warnings = list(manifest.warnings) + late.warnings(manifest.steps)
    for step in manifest.steps:
        if capacity is None or step.measure_end is None:
            continue
        per_process = tokens.get(step.index, 0) / (step.measure_end - step.measure_start) / max(1, settings.processes)
        if per_process > capacity:
            warnings.append(
                f"step {step.index}: each load process took {per_process:.0f} tok/s, above the {capacity:.0f} tok/s "
                "that `rigbench selftest` found one process follows faithfully here; use --processes N"
            )
    if warnings != manifest.warnings:
        changes["warnings"] = warnings
    return run.update_manifest(**changes) if changes else manifest


def _nothing_measured_cause(others: dict[str, int]) -> str:
    """Why a step's window holds no successful request, from what its requests did instead."""
    failed = {kind: count for kind, count in others.items() if kind != "interrupted"}
    if failed:
        dominant = max(failed.items(), key=lambda item: item[1])[0]
        return f"its requests failed ({kinds_said(failed)}): {fix_for(dominant)}"
    if others:
        return "its requests were still streaming when the sweep ended: give the step a longer --measure or --drain"
    return "no request of it was sent: the load generator did not start it (see locust.log)"


def _load_shortfall(table: pa.Table, steps: np.ndarray, measured: np.ndarray, manifest: RunManifest,
                    others: dict[int, dict[str, int]]) -> str | None:
    """The first step that ran under ``FAIL_BELOW`` of the load it names (core.load_reached), as the reason
    the run fails: its figures would stand for a load that never ran. The line says what happened
    (``_shortfall_cause``; ``others``: each step's requests that did not end well, by kind)."""
    starts, ends = table.column("t_start").to_numpy(), table.column("t_end").to_numpy()
    busy = "requests in flight"
    if manifest.load is not None and manifest.load.sessions is not None:  # a user's think time is its load too
        users = session_users(table.column("conversation").to_numpy(zero_copy_only=False))
        load_end = max((w.measure_end for w in manifest.steps if w.measure_end is not None), default=float("inf"))
        ends, busy = user_held_until(users, starts, ends, load_end), SESSION_BUSY
    for window in manifest.steps:
        if window.measure_end is None or window.measure_end <= window.measure_start:
            continue
        start, end = window.measure_start, window.measure_end
        in_flight = mean_in_flight(starts, ends, start, end)
        sent = sent_rate(starts[measured & (steps == window.index)], start, end) if window.rate is not None else None
        reached = load_reached(window.users, window.rate, in_flight, sent)
        if reached is not None and reached < FAIL_BELOW:
            label = f"step {window.index} ({stage_label(window.users, window.rate)})"
            requests = int((steps == window.index).sum())
            return (describe_shortfall(label, reached, in_flight, sent, window.rate, busy)
                    + f", under {FAIL_BELOW:.0%}: its figures would stand for a load that did not run; "
                    + _shortfall_cause(window, manifest, others.get(window.index, {}), requests,
                                       None if sent is None else round(sent * (end - start))))
    return None


def _shortfall_cause(window: StepWindow, manifest: RunManifest, others: dict[str, int], requests: int,
                     sent: int | None) -> str:
    """What made a step run less load than it names, as found in its records and window: its requests
    failed (a closed-loop user waits after a refusal, so refusals empty the window), an open loop's window
    held too few of its random arrivals or the load generator fell behind its schedule, the users had not
    all started, or (nothing else found) the users waited between requests on the load generator."""
    failed = {kind: count for kind, count in others.items() if kind != "interrupted"}
    failures = sum(failed.values())
    if requests and failures >= FAILED_SHARE * requests:
        dominant = max(failed.items(), key=lambda item: item[1])[0]
        waited = (", and its users waited after each refusal as the server asked (backing off)"
                  if window.rate is None and dominant in REFUSAL_KINDS else "")
        return (f"{failures} of its {counted(requests, 'request')} failed ({kinds_said(failed)}){waited}: "
                f"{fix_for(dominant)}")
    load = manifest.load
    length = (window.measure_end or window.measure_start) - window.measure_start
    if window.rate is not None and sent is not None and load is not None:
        scheduled = _scheduled_in_window(window, load)
        if scheduled is not None and scheduled < FAIL_BELOW * window.rate * length:
            needed = open_loop_windows([window.rate], load.arrival, load.arrival_shape, floor=0.0)[0]
            return (f"its schedule put {counted(scheduled, 'arrival')} in its {length:g} s window where "
                    f"{window.rate:g} req/s "
                    f"names {window.rate * length:.0f}: a window this short holds too few of its random arrivals; "
                    f"give --measure {needed:g} or more (about {ARRIVALS_PER_WINDOW} arrivals on average)")
        if scheduled is not None and sent < scheduled:
            return (f"the load generator sent {sent} of the {counted(scheduled, 'arrival')} its schedule put in the "
                    "window: it "
                    "fell behind (see the late-start warnings); use --processes N, or lower rates")
    if window.rate is None and window.users_started is not None and window.users_started < window.users:
        return (f"only {window.users_started} of its {counted(window.users, 'user')} had started when its window "
                "opened: "
                "lengthen --warmup, or spread the users over --processes N")
    if window.rate is None:
        return ("its users were between requests for most of the window, with no error to show for it: the load "
                "generator could not keep them sending; spread the users over --processes N")
    return "the load generator did not send its schedule; use --processes N, or lower rates"


def _scheduled_in_window(window: StepWindow, load: LoadSettings) -> int | None:
    """How many arrivals a rate step's schedule put in its measured window (None for a trace: its window's
    rate is already the schedule's)."""
    if load.trace is not None or window.rate is None or window.measure_end is None:
        return None
    start, end = window.measure_start - window.started_at, window.measure_end - window.started_at
    offsets = step_arrivals(window.rate, end, load.arrival, load.arrival_seed, load.arrival_shape)
    return int(np.count_nonzero(offsets >= start))


def _take_sigint() -> None:
    """In the Locust child before it starts: SIGINT as Python's default (KeyboardInterrupt), even where this
    process was started with it ignored (a script's ``cmd &``), since ``_stop`` stops Locust with it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(process: subprocess.Popen, grace: float) -> None:
    """Stop Locust as Ctrl-C in a terminal does: SIGINT to its whole session (the master and any
    ``--processes`` workers), the one stop signal Locust takes at every moment of a run. (A headless
    run with a shape takes SIGTERM only once the shape has ended: before then SIGTERM kills it where
    it stands, and the requests in flight go unrecorded.) Each process then stops its users at once,
    as at the sweep's end, so every request still streaming is recorded ``interrupted`` with what it
    had received, and Locust writes its stats. SIGKILL after ``grace``, or at a second Ctrl-C."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=grace)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _group_members(group: int) -> list[psutil.Process]:
    """Live (not zombie) processes of a process group: Locust's ``--processes`` workers are
    forked into the master's group, and outlive it when the master exits first."""
    members = []
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == group:
                members.append(process)
    return members


def _reap_group(group: int, grace: float) -> None:
    """Wait (bounded) for every process of the Locust session to end, then end the rest, so
    no worker is still streaming (and later recorded as a disconnect) once the sweep returns."""
    members = _group_members(group)
    if not members:
        return
    _, alive = psutil.wait_procs(members, timeout=grace)
    if not alive:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    _, alive = psutil.wait_procs(alive, timeout=5.0)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=5.0)
