"""Locust entry point: ``locust -f loadtest/locustfile.py --host http://127.0.0.1:8080``.

Works by hand (web UI or ``--headless``) and under ``rigbench sweep``, which passes the
same options. Without ``--rigbench-run-dir`` a new run directory is made under
``--runs-dir``, so a hand-run sweep is analysable too. Options reach ``--processes`` and
remote workers with Locust's spawn message, so only the master needs them.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent.lock
from locust import events

from core.lists import parse_counts, parse_seconds
from core.rundir import LoadSettings, RunDir, new_manifest, server_at
from loadtest.controller import SweepController
from loadtest.schedule import make_stages
from loadtest.shapes import SweepShape
from loadtest.users import StreamingChatUser

__all__ = ["StreamingChatUser", "SweepShape"]

log = logging.getLogger("rigbench.sweep")
DEFAULT_STEPS = "1,2,4,8,16,32,64"


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    group = parser
    group.add_argument("--rigbench-steps", default=DEFAULT_STEPS, help="user counts, one step each")
    group.add_argument("--rigbench-warmup", type=float, default=10.0, help="warm-up seconds per step")
    group.add_argument("--rigbench-measure", default="30", help="measured seconds: one for every step, or one per step")
    group.add_argument("--rigbench-run-dir", default="", help="run directory to fill (default: a new one)")
    group.add_argument("--runs-dir", default="runs", help="where a new run directory goes")
    group.add_argument("--rigbench-t0", type=float, default=0.0, include_in_web_ui=False, help="(internal) sweep start")
    group.add_argument("--model", default="default", help="model name sent in each request")
    group.add_argument("--max-tokens", type=int, default=256)
    group.add_argument("--temperature", type=float, default=0.0)
    group.add_argument("--cache-prompt", action="store_true", default=False)
    group.add_argument("--ignore-eos", action="store_true", default=False)
    group.add_argument("--prompts", default="mixed", help="mixed, a category (code, chat, ...), or a JSONL file")
    group.add_argument("--context-tokens", type=int, default=0, help="document tokens ahead of each prompt")
    group.add_argument("--read-timeout", type=float, default=60.0, help="seconds a stream may stall")
    group.add_argument("--max-error-rate", type=float, default=0.5, help="stop the sweep above this error share")
    group.add_argument("--min-requests-for-error-rate", type=int, default=10)
    group.add_argument("--parallel-slots", type=int, default=0, help="server slots (0: ask /slots)")
    group.add_argument("--timeline", action="store_true", default=False, help="also keep every chunk's arrival")
    group.add_argument(
        "--interruption-marker", default="", help="stop the sweep (status interrupted) when this file appears"
    )


def _settings_from(options: Any) -> LoadSettings:
    return LoadSettings(
        user_steps=parse_counts(options.rigbench_steps, "--rigbench-steps"),
        warmup_seconds=options.rigbench_warmup,
        measure_seconds=parse_seconds(options.rigbench_measure, "--rigbench-measure"),
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        cache_prompt=options.cache_prompt,
        ignore_eos=options.ignore_eos,
        prompts=options.prompts,
        context_tokens=options.context_tokens,
        processes=max(1, options.processes or 1),
    )


def _new_run_dir(options: Any, host: str) -> RunDir:
    """A run directory for a hand-started Locust (``rigbench sweep`` makes its own)."""
    server = server_at(host, slots=options.parallel_slots or 1)
    manifest = new_manifest("locust", "(hand-run locust)", load=_settings_from(options), server=server)
    run = RunDir.create(options.runs_dir, manifest)
    log.warning("records go to %s", run.path)
    return run


_controller: SweepController | None = None
_reset_lock = gevent.lock.BoundedSemaphore()


@events.init.add_listener
def on_init(environment: Any, **_: Any) -> None:
    from locust.runners import WorkerRunner

    options = environment.parsed_options
    if options is None or isinstance(environment.runner, WorkerRunner):
        return
    stages = make_stages(
        parse_counts(options.rigbench_steps, "--rigbench-steps"),
        options.rigbench_warmup,
        parse_seconds(options.rigbench_measure, "--rigbench-measure"),
    )
    if environment.shape_class is not None:
        environment.shape_class.stages = stages
    if not environment.host:
        return
    hand_run = not options.rigbench_run_dir
    if hand_run:
        options.rigbench_run_dir = str(_new_run_dir(options, environment.host).path)

    def on_reset(t0: float) -> None:
        global _controller
        if hand_run and RunDir(options.rigbench_run_dir).read_manifest().status != "running":
            # a second start from the web UI: a fresh run directory, the finished one stays as it was
            options.rigbench_run_dir = str(_new_run_dir(options, environment.host).path)
        with _reset_lock:  # the controller's set-up asks the server (yields): one reset at a time
            run = RunDir(options.rigbench_run_dir)
            options.rigbench_t0 = t0
            previous = _controller
            if previous is not None:
                previous.stop()
            _controller = SweepController(environment, stages, run, replaces=previous)
            _controller.start(t0)

    if environment.shape_class is not None:
        environment.shape_class.on_reset = on_reset


@events.test_stop.add_listener
def on_test_stop(environment: Any, **_: Any) -> None:
    """The web UI's stop, or the shape's end: the run gets its final status."""
    if _controller is not None:
        _controller.stop()
        _controller.finish()


@events.quitting.add_listener
def on_quitting(environment: Any, **_: Any) -> None:
    on_test_stop(environment)
