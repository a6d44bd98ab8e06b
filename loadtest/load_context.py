"""What every user of one load process shares: the run's options, prompts and context, and the shard.

Each load process (local runner, or each worker of ``--processes N`` / master-worker) writes its
own shard ``records/<host>-<pid>.jsonl`` and, with ``--timeline``, the arrival time of every
content chunk to ``timelines/<host>-<pid>.jsonl`` (kept out of ``records/`` so analysis of a
million records stays quick). No Locust import: the process state and the session use it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import math
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent

from core.errors import RunDirError
from core.rundir import LoadSettings, RecordWriter, RunDir, utc_now
from loadtest.lengths import WorkloadLengths
from loadtest.locust_options import replica_hosts, settings_from
from loadtest.long_context import context_for_tokens
from loadtest.prompts import Prompt, load_prompts
from loadtest.schedule import Stage, locate_or_last, stages_for, total_duration
from loadtest.streaming import TIMELINES, RequestMeta, StreamResult

log = logging.getLogger(__name__)
STORAGE_FAILED_EXIT_CODE = 3  # the same code the controller uses for a failed sweep


@dataclass(frozen=True)
class RunView:
    """What a load process needs of its run, read from the run's manifest (``rigbench sweep`` wrote it
    there; a hand-run Locust wrote its own flags there when it made the run): the load settings, the
    model name requests carry, the replicas' roots (empty: one server) and the server's slots (None: ask)."""

    settings: LoadSettings
    model_name: str
    replicas: list[str]
    slots: int | None
    repeat: int | None = None  # the run's repeat of its arm (its records carry it)


def run_view(options: Any, run: RunDir | None = None) -> RunView:
    """The run (``run``, else the one the options name) as its manifest describes it; a hand run before its
    run directory exists reads its own flags (``loadtest.locust_options``)."""
    run_dir = run.path if run is not None else getattr(options, "run_dir", "")
    manifest = RunDir(run_dir).read_manifest() if run_dir else None
    if manifest is None or manifest.load is None:
        return RunView(settings_from(options), options.model_name, replica_hosts(options),
                       options.parallel_slots or None)
    server = manifest.server
    replicas = [replica.url for replica in server.replicas] if server is not None and len(server.replicas) > 1 else []
    model = (server.model_name if server is not None else None) or getattr(options, "model_name", "default")
    slots = (server.parallel_slots if server is not None else None) or getattr(options, "parallel_slots", 0) or None
    return RunView(manifest.load, model, replicas, slots, manifest.repeat.index if manifest.repeat else None)


def process_shard() -> str:
    """This process's shard name: a ``--processes`` worker forked from its master gets its own."""
    return f"{socket.gethostname()}-{os.getpid()}"


def context_key(options: Any) -> tuple:
    """A new start has a new t0 (and, after the first, a new run): its context is made again."""
    return getattr(options, "run_dir", None), getattr(options, "rigbench_t0", None)


class LoadContext:
    """What every user of one load process shares: options, prompts, the shard writer."""

    def __init__(self, options: Any, host: str):
        self.options = options
        self.host = host
        self.shard = process_shard()
        view = run_view(options)
        self.settings = view.settings
        self.model_name = view.model_name
        self.repeat = view.repeat
        self.replicas = view.replicas  # empty: one server, the run's host
        self.stages: list[Stage] = stages_for(self.settings)
        self.made_from = context_key(options)
        self.prompts: list[Prompt] = load_prompts(self.settings.prompts)
        self.context_text, self.context_tokens = context_for_tokens(host, self.settings.context_tokens)
        sessions = self.settings.sessions  # every conversation of the run opens with the same system prompt
        self.system_prompt = context_for_tokens(host, sessions.system_prompt_tokens)[0] if sessions else ""
        self.lengths = WorkloadLengths.served(self.settings, host)  # drawn or traced lengths, and prompts cut to them
        self.user_counter = itertools.count()
        self.pinned: set[int] = set()  # slots taken by this process's users (--pin-slots)
        self.writer: RecordWriter | None = None
        self.storage_error: str | None = None
        self.timeline = None
        run_dir = options.run_dir
        if run_dir:
            run = RunDir(run_dir)
            self.writer = run.open_shard(self.shard)
            if self.settings.timeline:
                path = Path(run_dir) / TIMELINES / f"{self.shard}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                self.timeline = open(path, "a", buffering=1)  # noqa: SIM115

    def made_for(self, options: Any) -> bool:
        """Whether this context still serves a start with ``options``, in this process."""
        return self.shard == process_shard() and self.made_from == context_key(options)

    def t0(self) -> float | None:
        return getattr(self.options, "rigbench_t0", None)

    def sweep_over(self, now: float) -> bool:
        """Past the last measured window: the drain, when no request starts (those in flight run on)."""
        t0 = self.t0()
        return bool(t0) and bool(self.stages) and now - t0 >= total_duration(self.stages)

    def seconds_left(self, now: float) -> float:
        """Seconds until the last measured window closes (0 once it has; infinite before the sweep's start)."""
        t0 = self.t0()
        if not t0 or not self.stages:
            return math.inf
        return max(0.0, t0 + total_duration(self.stages) - now)

    def request_options(self) -> dict[str, Any]:
        """What ``build_payload`` takes besides the messages, from the run's options."""
        settings = self.settings
        return {
            "model": self.model_name,
            "max_tokens": settings.max_tokens,
            "temperature": settings.temperature,
            "cache_prompt": settings.cache_prompt,
            "ignore_eos": settings.ignore_eos,
        }

    def meta_for(self, t_start: float, category: str) -> RequestMeta:
        """The meta of a request that starts (or was meant to start) at ``t_start``: its step and phase,
        and that step's measured window as the controller records it (the schedule from ``t0``)."""
        t0 = self.t0()
        position = locate_or_last(self.stages, t_start - t0 if t0 else 0.0)
        return RequestMeta(
            shard=self.shard,
            step=position.index,
            users=position.users,
            phase=position.phase,
            category=category,
            context_tokens=self.context_tokens,
            repeat=self.repeat,
            window=(t0 + position.measure_start, t0 + position.measure_end) if t0 else None,
        )

    def unplaced_meta(self, category: str) -> RequestMeta:
        """The meta a closed-loop request streams with: it belongs to the step of its exact start, known
        only once it is sent, so its record is placed then (``meta_for`` at ``t_start``) and the step,
        users and phase here are never kept."""
        return RequestMeta(shard=self.shard, step=0, users=0, phase="warmup", category=category,
                           context_tokens=self.context_tokens, repeat=self.repeat)

    def write(self, result: StreamResult, environment: Any) -> None:
        """The record to the shard (and its chunk times to the timeline)."""
        if self.storage_error is not None:
            return  # the sweep is stopping: nothing more can be written
        try:
            if self.writer is not None:
                self.writer.write(result.record)
            if self.timeline is not None:
                self.timeline.write(
                    json.dumps({"request_id": result.record.request_id, "chunks": result.chunk_times}) + "\n"
                )
        except OSError as error:
            self.fail_storage(error, environment)

    def fail_storage(self, error: OSError, environment: Any) -> None:
        """Stop the sweep when records cannot be written (a full disk): a sweep whose records
        are dropped would only look like it measured something."""
        where = self.writer.path if self.writer is not None else self.options.run_dir
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        self.storage_error = (
            f"cannot write records to {where}: {error.strerror or error} ({code}); the records written "
            "before are kept; free space or choose another runs folder, then run the sweep again"
        )
        log.error(self.storage_error)
        if self.options.run_dir:
            run = RunDir(self.options.run_dir)
            run.release_space_reserve()
            with contextlib.suppress(OSError, RunDirError):
                run.update_manifest(status="failed", status_detail=self.storage_error, ended_at=utc_now())
        environment.process_exit_code = STORAGE_FAILED_EXIT_CODE
        gevent.spawn(environment.runner.quit)
