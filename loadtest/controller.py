"""The sweep's bookkeeping inside the Locust master (or local) process.

At every step boundary it writes the ``StepWindow`` into the manifest and appends a
telemetry snapshot; every second it applies the error rules of ``loadtest.error_watch`` (each step's
error rate, the server gone, an outage ridden out) and, when one says stop, marks the run ``failed``
with a message that says why and stops Locust; an outage ridden out is a manifest warning, one still
under way when the sweep ends fails the run. Workers never run this: they only send requests and
write their shards.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import gevent
import gevent.lock
import httpx
import psutil

from core.rundir import RunDir, StepWindow, utc_now
from core.rundir.server_ended import ServerEnded
from core.wording import counted
from loadtest.arrivals import window_rate
from loadtest.dispatch_tally import MAX_IN_FLIGHT
from loadtest.error_watch import ErrorWatch
from loadtest.load_context import run_view
from loadtest.load_process import load_process
from loadtest.locust_options import LOCUST_REQUEST_NAME, LOCUST_REQUEST_TYPE
from loadtest.long_context import context_for_tokens
from loadtest.schedule import Position, Stage, boundaries, locate, stage_label, step_starts
from loadtest.telemetry import (
    BUSIEST_PROCESS_CPU_METRIC,
    CPU_WARN_PERCENT,
    LOADGEN_CPU_METRIC,
    MACHINE_CPU_METRIC,
    OTHER_CPU_METRIC,
    SERVER_CPU_METRIC,
    ServedProcesses,
    ServerTelemetry,
    cpu_warnings,
    other_cpu_percent,
    server_slots,
)

log = logging.getLogger("rigbench.sweep")
FAILED_EXIT_CODE = 3
MARKER_POLL_SECONDS = 0.5


class SweepController:
    def __init__(self, environment: Any, stages: list[Stage], run: RunDir | None,
                 replaces: SweepController | None = None):
        self.environment = environment
        self.options = environment.parsed_options
        self.stages = stages
        self.run = run
        self.client = httpx.Client(base_url=environment.host, timeout=10)
        # one telemetry per server: every replica's counters and slots, each snapshot naming its replica
        self.view = run_view(self.options, run)
        replicas = self.view.replicas
        self.telemetries: list[tuple[int | None, ServerTelemetry]] = (
            [(index, ServerTelemetry(httpx.Client(base_url=url, timeout=10))) for index, url in enumerate(replicas)]
            if replicas else [(None, ServerTelemetry(self.client))])
        self.served = ServedProcesses(replicas or [environment.host])  # the server's processes, where it runs here
        self.process = psutil.Process()
        self.process.cpu_percent()  # after the search above, which the first reading should not count
        psutil.cpu_percent()  # starts the machine-wide clock: the first reading is from here
        self.children: dict[int, psutil.Process] = {}
        self.cores = psutil.cpu_count() or 1
        self.slots = self.view.slots or server_slots(environment.host) or None
        # the exact document prefix every user sends (same cut, same server count as theirs)
        self.context_tokens = context_for_tokens(environment.host, self.view.settings.context_tokens)[1]
        self.failed: str | None = None
        self.interrupted: str | None = None
        settings = self.view.settings
        self.watch = ErrorWatch(settings.max_error_rate, getattr(self.options, "min_requests_for_error_rate", 10),
                                settings.outage_seconds)
        self.completed_steps = -1
        self.t0: float | None = None
        self.greenlets: list[gevent.Greenlet] = []
        self.boundary_lock = gevent.lock.BoundedSemaphore()
        # Boundaries already written for this run. Locust's master resets the shape's clock
        # twice at start, so a controller can replace one that already wrote step 0's "start";
        # sharing the set keeps every boundary written once.
        same_run = replaces is not None and run is not None and replaces.run is not None
        self.recorded: set[tuple[int, str]] = (
            replaces.recorded if same_run and replaces.run.path == run.path else set()  # type: ignore[union-attr]
        )

    # --- lifecycle -------------------------------------------------------------------
    def start(self, t0: float) -> None:
        self.greenlets = [gevent.spawn(self._follow_schedule, t0), gevent.spawn(self._watch_errors)]
        marker = getattr(self.options, "interruption_marker", "")
        if marker:
            self.greenlets.append(gevent.spawn(self._watch_marker, Path(marker)))

    def stop(self) -> None:
        for greenlet in self.greenlets:
            greenlet.kill(block=False)

    def finish(self) -> None:
        """Final status when Locust quits; a run already marked failed stays failed."""
        if self.run is None:
            return
        t0 = self.t0
        if t0 is not None:
            # Locust may stop a hair before the last "end" boundary is handled: close what is due.
            # Its snapshot is taken too: the server-counter cross-check needs the last step's "end".
            for elapsed, index, boundary in boundaries(self.stages):
                if boundary == "end" and index > self.completed_steps and t0 + elapsed <= time.time() + 0.05:
                    with contextlib.suppress(Exception):
                        self._at_boundary(t0, elapsed, index, boundary)
        self._note_cap_waits()
        self._note_unseen_servers()
        with contextlib.suppress(Exception):  # the last second's requests, then an outage the sweep ended in
            self._observe_errors()
        self._note_outages_ridden()
        manifest = self.run.read_manifest()
        if manifest.status != "running":
            return
        unfinished = self.watch.unfinished_outage(time.time())
        if unfinished is not None:
            self._mark_failed(unfinished, since=self.watch.away_since)
            return
        complete = self.completed_steps == len(self.stages) - 1
        self.run.update_manifest(
            status="complete" if complete else "interrupted",
            status_detail=None if complete else (f"stopped after {self.completed_steps + 1} of "
                                                 f"{counted(len(self.stages), 'step')}"),
            ended_at=utc_now(),
        )

    def _note_cap_waits(self) -> None:
        """An open loop whose arrivals waited for the in-flight cap says so in the manifest (the
        dispatchers' counts reach the master with their reports)."""
        dispatch = load_process(self.environment).dispatch
        if self.run is None or not dispatch.cap_waits:
            return
        manifest = self.run.read_manifest()
        warning = (
            f"open loop: {counted(dispatch.cap_waits, 'arrival')} waited for a free place under the cap of "
            f"{MAX_IN_FLIGHT} "
            "requests in flight per load process, so they started late; use --processes N or lower rates"
        )
        dispatch.cap_waits = 0
        self.run.update_manifest(warnings=[*manifest.warnings, warning])

    def _note_unseen_servers(self) -> None:
        """A server on this machine whose process was never seen is in the others' CPU figure: said once."""
        if self.run is None or not self.served.unseen:
            return
        manifest = self.run.read_manifest()
        notes = [f"{url} is served on this machine, but no process listening on port {port} could be seen (another "
                 f"user's, or psutil may not list connections here): {OTHER_CPU_METRIC} includes that server's CPU"
                 for url, port in self.served.unseen.items()]
        self.run.update_manifest(warnings=[*manifest.warnings, *(n for n in notes if n not in manifest.warnings)])

    # --- schedule --------------------------------------------------------------------
    def _cpu_readings(self) -> dict[str, float]:
        """CPU % since the last call: the load processes together (this one and its ``--processes``
        workers, each followed by one psutil object whose first reading only starts its clock), the
        busiest of them (one process is one core's worth at most), and the whole machine as a share
        of all its cores. Then the machine's own noise on that scale: the server's processes where
        they run here (``SERVER_CPU_METRIC``, absent where none was seen) and what everyone else kept
        busy (``OTHER_CPU_METRIC``: the machine less the load and the server; a server elsewhere has
        nothing to take off, so it is this machine's others only; rigbench's own watcher and hardware
        sampler, whose cost the manifest's hardware account gives, count among the others)."""
        readings = [self.process.cpu_percent()]
        server = self.served.cpu_percent()
        serving = self.served.pids()  # a server this process started is not a load process
        for child in self.process.children(recursive=True):
            if child.pid in serving:
                continue
            known = self.children.setdefault(child.pid, child)
            with contextlib.suppress(psutil.Error):
                readings.append(known.cpu_percent())
        machine = psutil.cpu_percent()
        cpu = {
            LOADGEN_CPU_METRIC: sum(readings),
            BUSIEST_PROCESS_CPU_METRIC: max(readings),
            MACHINE_CPU_METRIC: machine,
            OTHER_CPU_METRIC: other_cpu_percent(machine, sum(readings), server, self.cores),
        }
        if server is not None:
            cpu[SERVER_CPU_METRIC] = server / self.cores
        return cpu

    def _follow_schedule(self, t0: float) -> None:
        self.t0 = t0
        for elapsed, index, boundary in boundaries(self.stages):
            gevent.sleep(max(0.0, t0 + elapsed - time.time()))
            try:
                self._at_boundary(t0, elapsed, index, boundary)
            except Exception:  # a bad scrape or write must not end the schedule
                log.exception("step %d %s: bookkeeping failed", index, boundary)

    def _at_boundary(self, t0: float, elapsed: float, index: int, boundary: str) -> None:
        # The schedule greenlet and finish() can both reach the last "end": one at a time, so the
        # second sees the step closed and records nothing twice. A greenlet killed during the
        # (yielding) scrape has recorded nothing yet, so finish() can still close the step.
        with self.boundary_lock:
            self._record_boundary(t0, elapsed, index, boundary)

    def _record_boundary(self, t0: float, elapsed: float, index: int, boundary: str) -> None:
        if boundary == "end" and index <= self.completed_steps:
            return
        if (index, boundary) in self.recorded:
            if boundary == "start" and self.run is not None:
                # written by the controller this one replaced, on the clock Locust then reset:
                # the window follows this clock (the shape's), the snapshot is not taken twice
                self._open_step(t0, index, self.stages[index])
            return
        stage = self.stages[index]
        # read first: the scrape below yields, and users go on starting meanwhile
        running = self._users_running() if boundary == "measure" and not stage.open_loop else None
        cpu = self._cpu_readings()
        known_absent = sum(len(telemetry.absent) for _, telemetry in self.telemetries)
        snapshots = [telemetry.snapshot(index, stage.users, boundary, cpu).model_copy(update={"replica": replica})
                     for replica, telemetry in self.telemetries]
        if self.run is None:
            return
        for snapshot in snapshots:
            self.run.append_telemetry(snapshot)
        if sum(len(telemetry.absent) for _, telemetry in self.telemetries) > known_absent:
            manifest = self.run.read_manifest()
            notes = []
            for replica, telemetry in self.telemetries:
                said = f"replica {replica}: " if replica is not None else ""
                notes += [said + note for note in telemetry.absent.values() if said + note not in manifest.warnings]
            self.run.update_manifest(warnings=[*manifest.warnings, *dict.fromkeys(notes)])
        if boundary == "start":
            self._open_step(t0, index, stage)
        elif boundary == "measure" and running is not None:
            self._note_users_started(index, stage, running, cpu)
        elif boundary == "end":
            self._close_step(index, t0 + elapsed, cpu)
        # Only once written: a controller killed mid-scrape, or a close that failed, leaves the
        # boundary to its successor or to finish().
        self.recorded.add((index, boundary))

    def _open_step(self, t0: float, index: int, stage: Stage) -> None:
        assert self.run is not None
        manifest = self.run.read_manifest()
        started = t0 + sum(s.duration for s in self.stages[:index])
        window = StepWindow(
            index=index,
            users=stage.users,
            rate=window_rate(self.stages, self.view.settings, index) if stage.open_loop else stage.rate,
            started_at=started,
            measure_start=started + stage.warmup,
            context_tokens=self.context_tokens,
        )
        warnings = list(manifest.warnings)
        warning = (
            f"step {index}: {stage.users} users exceed the server's {counted(self.slots, 'parallel slot')}; "
            "requests queue on the server, so latency includes waiting for a slot"
        )
        # an open-loop step has no users to compare: its queueing shows in latency from the intended start
        if not stage.open_loop and self.slots is not None and stage.users > self.slots and warning not in warnings:
            warnings.append(warning)
        others = [step for step in manifest.steps if step.index != index]  # a window opened again replaces
        self.run.update_manifest(steps=[*others, window], warnings=warnings)

    def _users_running(self) -> int | None:
        """Users running now in every load process (a master adds up its workers' last reports)."""
        count = getattr(self.environment.runner, "user_count", None)
        return count if isinstance(count, int) else None

    def _note_users_started(self, index: int, stage: Stage, running: int, cpu: dict[str, float]) -> None:
        """The users running as the window opens go in its step; fewer than the step names is said, with
        why: a load process that was busy over the warm-up (``cpu``: its readings since the step's start)
        could not start them, else the warm-up was shorter than starting them took."""
        assert self.run is not None
        manifest = self.run.read_manifest()
        steps = _with_step_changed(manifest.steps, index, users_started=running)
        warnings = list(manifest.warnings)
        if running < stage.users:
            busiest = cpu.get(BUSIEST_PROCESS_CPU_METRIC, 0.0)
            why = (f"a load process was {busiest:.0f}% busy over the warm-up: it could not start them in time; "
                   "spread the users over --processes N" if busiest > CPU_WARN_PERCENT else
                   "the warm-up was shorter than starting them took; lengthen --warmup")
            warnings.append(
                f"step {index} ({counted(stage.users, 'user')}): {running} of its {counted(stage.users, 'user')} "
                "had started when its "
                f"measured window opened, after {stage.warmup:g} s of warm-up: the window measured a smaller load; "
                + why
            )
        self.run.update_manifest(steps=steps, warnings=warnings)

    def _close_step(self, index: int, measure_end: float, cpu: dict[str, float]) -> None:
        assert self.run is not None
        if self.failed is not None:
            return  # a failed sweep completes no more steps (an outage's failure set the last one back)
        manifest = self.run.read_manifest()
        steps = _with_step_changed(manifest.steps, index, measure_end=measure_end)
        warnings = list(manifest.warnings) + cpu_warnings(index, cpu)
        self.completed_steps = index
        self.run.update_manifest(steps=steps, last_complete_step=index, warnings=warnings)

    # --- spot interruption ------------------------------------------------------------
    def _watch_marker(self, marker: Path) -> None:
        """Poll the spot watcher's marker file; a marker already there when the sweep started
        (an earlier notice left on disk, e.g. before ``--resume``) counts only once rewritten."""
        baseline = _mtime(marker)
        if baseline is not None and self.run is not None:
            manifest = self.run.read_manifest()
            note = f"interruption marker {marker} was already present at the start; ignored unless written again"
            self.run.update_manifest(warnings=[*manifest.warnings, note])
        while True:
            gevent.sleep(MARKER_POLL_SECONDS)
            current = _mtime(marker)
            if current is not None and current != baseline:
                self._interrupt(marker)
                return

    def _interrupt(self, marker: Path) -> None:
        notice = ""
        with contextlib.suppress(OSError, ValueError):
            detected = json.loads(marker.read_text()).get("detected_at")
            notice = f" (detected at {detected})" if detected else ""
        done = self.completed_steps + 1
        detail = (
            f"spot interruption notice: marker {marker} appeared{notice}; stopped after {done} of "
            f"{counted(len(self.stages), 'step')}. Continue with `rigbench sweep --resume <this run directory>`"
        )
        log.warning(detail)
        if self.run is not None:
            self.run.update_manifest(
                status="interrupted",
                status_detail=detail,
                last_complete_step=self.completed_steps if self.completed_steps >= 0 else None,
                ended_at=utc_now(),
            )
        self.interrupted = detail
        self.environment.runner.quit()

    # --- error rules -----------------------------------------------------------------
    def _mark_failed(self, detail: str, since: float | None = None) -> None:
        """The run fails with ``detail``; when the server went away at ``since``, the steps that ended after it
        are not complete (a ``--resume`` runs them again)."""
        self.failed = detail
        log.error(self.failed)
        self.environment.process_exit_code = FAILED_EXIT_CODE
        if self.run is None:
            return
        changes: dict = {}
        if since is not None and self.t0 is not None:
            ended = [index for index, (start, stage) in enumerate(zip(step_starts(self.stages), self.stages,
                                                                       strict=True))
                     if self.t0 + start + stage.duration <= since]
            self.completed_steps = min(self.completed_steps, ended[-1] if ended else -1)
            changes["last_complete_step"] = self.completed_steps if self.completed_steps >= 0 else None
        self.run.update_manifest(status="failed", status_detail=self.failed, ended_at=utc_now(), **changes)

    def _fail(self, detail: str, since: float | None = None) -> None:
        self._mark_failed(detail, since)
        self.environment.runner.quit()

    def _observe_errors(self) -> str | None:
        """The error rules over the master's totals now, judged for the step under way."""
        stats = self.environment.stats
        entry = stats.entries.get((LOCUST_REQUEST_NAME, LOCUST_REQUEST_TYPE))
        errors = [(str(error.error), error.occurrences) for error in stats.errors.values()]
        requests, failures = (entry.num_requests, entry.num_failures) if entry is not None else (0, 0)
        now = time.time()
        position = locate(self.stages, now - self.t0) if self.t0 is not None else None
        step = f"step {position.index} ({stage_label(position.users, position.rate)})" if position else ""
        return self.watch.observe(requests, failures, errors, users=_senders(position), step=step, now=now)

    def _note_outages_ridden(self) -> None:
        """Each outage the sweep rode out, as a manifest warning."""
        ridden, self.watch.ridden = self.watch.ridden, []
        if ridden and self.run is not None:
            manifest = self.run.read_manifest()
            self.run.update_manifest(warnings=[*manifest.warnings, *ridden])

    def _watch_errors(self) -> None:
        """Once a second, the error rules of ``loadtest.error_watch`` over the master's totals, and the run's
        record of a server that ended (``core.rundir.server_ended``), which stops the sweep at once."""
        while True:
            gevent.sleep(1.0)
            detail = self._observe_errors()
            self._note_outages_ridden()
            ended = ServerEnded.read(self.run.path) if self.run is not None else None
            if ended is not None:  # the process that started the server says it exited: no ride-out brings it back
                detail = self.watch.server_ended(ended.said(), ended.ended_at)
            if detail is not None:
                self._fail(detail, since=self.watch.away_since)
                return


def _senders(position: Position | None) -> int:
    """How many refusals in a row a step's load makes in about a second: its users, or an open-loop
    step's arrivals per second (an open loop does not back off, so refusals come at its rate)."""
    if position is None:
        return 1
    return max(1, math.ceil(position.rate)) if position.rate is not None else position.users


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _with_step_changed(steps: list[StepWindow], index: int, **changes: object) -> list[StepWindow]:
    """The manifest's step windows with step ``index``'s fields changed."""
    return [step.model_copy(update=changes) if step.index == index else step for step in steps]
