"""Locust entry point: ``locust -f loadtest/locustfile.py --host http://127.0.0.1:8080``.

Works by hand (web UI or ``--headless``) and under ``rigbench sweep``, which passes the same
options (``loadtest/locust_options.py``; ``rigbench sweep --help`` describes them, since Locust
prints ``--help`` before it loads a locustfile). Every run checks its ``--host`` first (a
server's root that answers ``/health`` and streams one reply; ``rigbench sweep`` has already
done so and passes ``--no-preflight``). A hand run makes a new run directory under
``--runs-dir``, so it is analysable too; the schedule, the run's settings and the host are
read again when a run starts, so the web UI's custom parameters and host take effect.
Options reach ``--processes`` and remote workers with Locust's spawn message, so only
the master needs them. ``--steps`` runs closed-loop users (``StreamingChatUser``), ``--rates`` one
open-loop dispatcher per load process (``OpenLoopDispatcher``); the shape picks the class. One
Locust request entry per request; per-step output tok/s and TTFT
are in the web UI's rigbench tab and in ``<csv prefix>_rigbench_steps.csv``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import gevent.lock
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from core.errors import RigbenchError
from core.machine import server_rig
from core.private_files import PRIVATE_UMASK
from core.rundir import RunDir, new_manifest, server_at
from core.rundir.models import ReplicaInfo
from core.whole_files import write_whole
from loadtest import web_ui
from loadtest.controller import SweepController
from loadtest.late_starts import note_late_starts
from loadtest.load_context import run_view
from loadtest.load_process import LoadProcess, load_process
from loadtest.locust_options import add_arguments, replica_hosts, settings_from
from loadtest.open_loop import OpenLoopDispatcher
from loadtest.preflight import check_health, check_reply, check_url
from loadtest.schedule import stages_for
from loadtest.shapes import SweepShape, load_processes
from loadtest.telemetry import server_slots
from loadtest.users import StreamingChatUser

__all__ = ["OpenLoopDispatcher", "StreamingChatUser", "SweepShape"]
SweepShape.closed_loop_class = StreamingChatUser
SweepShape.open_loop_class = OpenLoopDispatcher

log = logging.getLogger("rigbench.sweep")
STEPS_CSV_SUFFIX = "_rigbench_steps.csv"
# the controller's telemetry scrapes and the long context's /tokenize calls go through httpx, whose
# INFO line per request would mix into Locust's own output
logging.getLogger("httpx").setLevel(logging.WARNING)

events.init_command_line_parser.add_listener(add_arguments)


def refuse(message: str) -> NoReturn:
    """Stop Locust before any load, with the one line rigbench's own commands would print."""
    print(f"rigbench: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _new_run_dir(options: Any, host: str) -> RunDir:
    """A run directory for a hand-started Locust (``rigbench sweep`` makes its own)."""
    if options.parallel_slots:
        server = server_at(host, slots=options.parallel_slots, slots_from="flags")
    else:
        server = server_at(host, slots=server_slots(host), slots_from="server")
    hosts = replica_hosts(options)
    replicas = [ReplicaInfo(index=index, url=url, slots=server_slots(url) or 0)
                for index, url in enumerate(hosts)] if len(hosts) > 1 else []
    server = server.model_copy(update={"model_name": options.model_name, "replicas": replicas})
    manifest = new_manifest("locust", "(hand-run locust)", load=settings_from(options), server=server,
                            rig=server_rig(host))
    os.umask(PRIVATE_UMASK)  # this process writes a run from here on: its files are private, as every command's
    run = RunDir.create(options.runs_dir, manifest)
    log.warning("records go to %s", run.path)
    return run


def abandon_unstarted(run_dir: str, new_host: str) -> None:
    """The run made for the host given at start-up, when the web UI's first start names another."""
    if run_dir and RunDir(run_dir).read_manifest().status == "running":
        RunDir(run_dir).update_manifest(status="failed", status_detail=f"never started: the web UI's first "
                                        f"start named another host ({new_host}); that run is in its own folder")


def share_tallies(environment: Any, process: LoadProcess) -> None:
    """The process's live and dispatch tallies travel to the master with Locust's worker reports
    (a master merges them), and a new start or a stats reset begins the live ones afresh."""

    def send(client_id: str, data: dict, **_: Any) -> None:
        data["rigbench_steps"] = process.live.take()
        data["rigbench_dispatch"] = process.dispatch.take()
        data["rigbench_in_flight"] = process.in_flight

    def merge(client_id: str, data: dict, **_: Any) -> None:
        process.live.merge(data.get("rigbench_steps") or {})
        process.dispatch.merge(data.get("rigbench_dispatch") or {})
        if "rigbench_in_flight" in data:
            process.worker_in_flight[client_id] = (int(data["rigbench_in_flight"]), time.time())

    def forget(**_: Any) -> None:
        # a second start from the web UI shows its own steps, not the last run's
        process.live.steps.clear()
        process.worker_in_flight.clear()  # a worker of the last start may be gone: its count would hold the drain

    environment.events.report_to_master.add_listener(send)
    environment.events.worker_report.add_listener(merge)
    environment.events.reset_stats.add_listener(forget)
    environment.events.test_start.add_listener(forget)


class LocustSweep:
    """The sweep a master (or local) Locust runs: checks its host, makes a hand run's directory,
    and at every start reads the schedule again and hands it to a new controller."""

    def __init__(self, environment: Any, process: LoadProcess):
        self.environment = environment
        self.options = environment.parsed_options
        self.process = process
        self.shape = environment.shape_class
        self.hand_run = not self.options.run_dir  # rigbench sweep passes the run directory it made
        self.checked_host = ""  # the host pre-flight last passed (the web UI may change it between starts)
        self.controller: SweepController | None = None
        self.reset_lock = gevent.lock.BoundedSemaphore()

    def check_host(self, host: str) -> str:
        """The host as a server root, and (unless ``--no-preflight``) a server that answers there."""
        host = check_url(host, "--host")
        if not self.options.no_preflight:
            check_health(host)
            check_reply(host, self.options.model_name)
        self.checked_host = host
        return host

    def prepare(self) -> None:
        """Before any load: refuse what cannot run, in one line, and set the shape's schedule."""
        environment, options = self.environment, self.options
        try:
            if not self.hand_run and not (Path(options.run_dir) / "manifest.json").is_file():
                raise RigbenchError(f"--run-dir {options.run_dir}: no manifest.json there; leave --run-dir out and "
                                    "a new run directory is made under --runs-dir")
            view = run_view(options)  # a hand run's flags, else the run's manifest: what it runs
            stages = stages_for(view.settings)
            if environment.host:
                environment.host = self.check_host(environment.host)
                if not options.no_preflight:
                    for replica in view.replicas:  # every replica answers before any load
                        check_health(replica)
                        check_reply(replica, view.model_name)
            elif options.headless or not self.hand_run:
                raise RigbenchError("--host: no server given; pass its root, e.g. --host http://127.0.0.1:8080")
        except RigbenchError as error:
            refuse(str(error))
        if self.shape is not None:
            self.shape.stages = stages
            self.shape.drain_seconds = view.settings.drain_seconds
            self.shape.in_flight = self.in_flight
        if environment.web_ui is not None:
            web_ui.install(environment.web_ui, self.process.live)
        if self.hand_run and environment.host:
            # made now, before any user can start (a reset below yields while it asks the server)
            options.run_dir = str(_new_run_dir(options, environment.host).path)
        if self.shape is not None:
            self.shape.on_reset = self.on_reset
        environment.events.test_stop.add_listener(self.on_test_stop)
        environment.events.quitting.add_listener(self.on_quitting)

    def in_flight(self, since: float) -> int | None:
        """Requests streaming now in every load process; None while a worker has not reported since
        ``since`` (a master hears its workers every few seconds, so an older count may be stale)."""
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            reports = self.process.worker_in_flight.values()
            if len(reports) < runner.worker_count or any(at < since for _, at in reports):
                return None
            return sum(count for count, _ in reports)
        return self.process.in_flight

    def on_reset(self, t0: float) -> None:
        """A start: the schedule and the host are read again (the web UI may have changed them)."""
        environment, options, shape = self.environment, self.options, self.shape
        try:
            current = stages_for(settings_from(options) if self.hand_run else run_view(options).settings)
            if self.hand_run and environment.host != self.checked_host:
                environment.host = self.check_host(environment.host or "")
                abandon_unstarted(options.run_dir, environment.host)
                options.run_dir = ""
        except RigbenchError as error:
            log.error("rigbench: %s; the sweep does not start", error)
            if shape is not None:
                shape.stages = []  # its first tick ends the shape: Locust stops (the web UI can start again)
            if options.headless:
                environment.process_exit_code = 2
            return
        if shape is not None:
            shape.stages = current
        if self.hand_run:
            manifest = RunDir(options.run_dir).read_manifest() if options.run_dir else None
            if manifest is None or manifest.status != "running":
                # a first start with a host typed in the web UI, or a second start: a fresh run directory
                # (a finished one stays as it was)
                options.run_dir = str(_new_run_dir(options, environment.host).path)
            elif manifest.load != settings_from(options):
                # the web UI's parameters changed before the first start: the run says what it ran
                RunDir(options.run_dir).update_manifest(load=settings_from(options))
        with self.reset_lock:  # the controller's set-up asks the server (yields): one reset at a time
            run = RunDir(options.run_dir)
            options.rigbench_t0 = t0
            options.rigbench_load_processes = load_processes(environment.runner)  # shares of an open loop
            previous = self.controller
            if previous is not None:
                previous.stop()
            self.controller = SweepController(environment, current, run, replaces=previous)
            self.controller.start(t0)

    def on_test_stop(self, **_: Any) -> None:
        """The web UI's stop, or the shape's end: the run gets its final status."""
        if self.controller is not None:
            self.controller.stop()
            self.controller.finish()

    def on_quitting(self, **_: Any) -> None:
        """Locust exits: the run is finished, and with ``--csv`` the per-step figures go beside Locust's
        own CSV files (written once, by the master, when the workers' last reports are in)."""
        self.on_test_stop()
        options, live = self.options, self.process.live
        if self.hand_run and options.run_dir and options.rates:
            with contextlib.suppress(RigbenchError, OSError):  # rigbench sweep judges its records itself
                note_late_starts(RunDir(options.run_dir))
        prefix = getattr(options, "csv_prefix", None)
        if prefix and live.steps:
            write_whole(Path(f"{prefix}{STEPS_CSV_SUFFIX}"), live.csv_text())


@events.init.add_listener
def on_init(environment: Any, **_: Any) -> None:
    process = load_process(environment)
    share_tallies(environment, process)
    if environment.parsed_options is None or isinstance(environment.runner, WorkerRunner):
        return  # a worker sends load; its tallies go to the master with its reports
    LocustSweep(environment, process).prepare()
