"""The simulated user: streams chat completions back to back and records every request.

That is the closed loop (``--steps``); the open loop (``--rates``) sends on an arrival schedule
from ``loadtest.open_loop``, sharing this module's per-process context and its ways of keeping
and reporting a record.

Each load process (local runner, or each worker of ``--processes N`` / master-worker)
writes its own shard ``records/<host>-<pid>.jsonl`` and, with ``--timeline``, the arrival
time of every content chunk to ``timelines/<host>-<pid>.jsonl`` (kept out of
``records/`` so analysis of a million records stays quick).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import gevent
from locust import User, task

from core.errors import RunDirError
from core.rundir import RecordWriter, RequestRecord, RunDir, utc_now
from loadtest.live_stats import LIVE
from loadtest.locust_options import LOCUST_REQUEST_NAME, LOCUST_REQUEST_TYPE, settings_from
from loadtest.long_context import context_for_tokens
from loadtest.prompts import Prompt, load_prompts, rotation
from loadtest.schedule import Stage, locate_or_last, stages_for
from loadtest.stall_watch import STALL_WATCH
from loadtest.streaming import TIMELINES, RequestMeta, StreamResult, build_payload, make_client, stream_chat

log = logging.getLogger(__name__)
STORAGE_FAILED_EXIT_CODE = 3  # the same code the controller uses for a failed sweep
# After a refused connection a user waits before its next request, doubling up to the cap, so a
# server that is gone is asked a few times a second, not thousands (the error-rate rule then stops it).
BACKOFF_FIRST_S = 0.05
BACKOFF_CAP_S = 5.0
# What a load process's context is made from: a new start (the web UI's) with other values gets a new one.
CONTEXT_OPTIONS = (
    "steps", "rates", "arrival", "arrival_seed", "warmup", "measure", "run_dir", "prompts", "context_tokens", "timeline"
)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown Locust's own output


class LoadContext:
    """What every user of one load process shares: options, prompts, the shard writer."""

    def __init__(self, options: Any, host: str):
        self.options = options
        self.host = host
        self.shard = f"{socket.gethostname()}-{os.getpid()}"
        self.settings = settings_from(options)
        self.stages: list[Stage] = stages_for(self.settings)
        self.made_from = context_key(options)
        self.prompts: list[Prompt] = load_prompts(options.prompts)
        self.context_text, self.context_tokens = context_for_tokens(host, options.context_tokens)
        self.user_counter = itertools.count()
        self.pinned: set[int] = set()  # slots taken by this process's users (--pin-slots)
        self.writer: RecordWriter | None = None
        self.storage_error: str | None = None
        self.timeline = None
        run_dir = options.run_dir
        if run_dir:
            run = RunDir(run_dir)
            self.writer = run.open_shard(self.shard)
            if options.timeline:
                path = Path(run_dir) / TIMELINES / f"{self.shard}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                self.timeline = open(path, "a", buffering=1)  # noqa: SIM115

    def t0(self) -> float | None:
        return getattr(self.options, "rigbench_t0", None)

    def meta_for(self, t_start: float, category: str) -> RequestMeta:
        t0 = self.t0()
        position = locate_or_last(self.stages, t_start - t0 if t0 else 0.0)
        return RequestMeta(
            shard=self.shard,
            step=position.index,
            users=position.users,
            phase=position.phase,
            category=category,
            context_tokens=self.context_tokens,
        )

    def keep(self, result: StreamResult, environment: Any) -> None:
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


def context_key(options: Any) -> tuple:
    return tuple(getattr(options, name, None) for name in CONTEXT_OPTIONS)


_context: LoadContext | None = None
_context_lock = threading.Lock()


def load_context(environment: Any) -> LoadContext:
    """The process's context, made on first use (after ``--processes`` has forked), and made
    again when a new start brings other options (the web UI's custom parameters)."""
    global _context
    with _context_lock:
        options = environment.parsed_options
        stale = _context is None or _context.shard != f"{socket.gethostname()}-{os.getpid()}"
        if stale or _context.made_from != context_key(options):
            # the old writer is left open: a user of the last start may still be ending its request (every
            # line is flushed as written; the file closes when the last user lets go of it)
            _context = LoadContext(options, environment.host)
        return _context


class StreamingChatUser(User):
    """One user = one httpx client (one connection) sending requests back to back; after a
    refused connection it backs off (doubling, capped) instead of spinning."""

    backoff = 0.0

    def wait_time(self) -> float:
        return self.backoff

    def on_start(self) -> None:
        self.context = load_context(self.environment)
        options = self.context.options
        self.client = make_client(self.host, read_timeout=options.read_timeout)
        STALL_WATCH.watch(self.client)
        self.prompts = rotation(self.context.prompts, offset=next(self.context.user_counter))
        self.request_options = request_options(options)
        self.slot: int | None = None
        if options.pin_slots:
            # the lowest slot no live user holds: N users hold slots 0..N-1 at every step
            self.slot = min(set(range(len(self.context.pinned) + 1)) - self.context.pinned)
            self.context.pinned.add(self.slot)

    def on_stop(self) -> None:
        self.client.close()
        if self.slot is not None:
            self.context.pinned.discard(self.slot)

    @task
    def chat(self) -> None:
        prompt = next(self.prompts).with_context(self.context.context_text)
        payload = build_payload(list(prompt.messages), **self.request_options)
        if self.slot is not None:
            payload["id_slot"] = self.slot
        meta = self.context.meta_for(time.time(), prompt.category)
        result = stream_chat(
            self.client, payload, meta, on_abort=lambda stopped: self.context.keep(stopped, self.environment)
        )
        record = result.record.model_copy(update=self._phase_by_start(result.record.t_start, meta))
        result = StreamResult(record=record, chunk_times=result.chunk_times)
        self.context.keep(result, self.environment)
        LIVE.add(record)
        self._fire_event(record)
        refused = record.error_kind == "connect"
        self.backoff = min(BACKOFF_CAP_S, max(BACKOFF_FIRST_S, self.backoff * 2)) if refused else 0.0

    def _phase_by_start(self, t_start: float, meta: RequestMeta) -> dict:
        """Re-place the record by its exact start time (the meta was taken a moment before)."""
        exact = self.context.meta_for(t_start, meta.category)
        return {"step": exact.step, "users": exact.users, "phase": exact.phase}

    def _fire_event(self, record: RequestRecord) -> None:
        fire_request_event(self.environment, record)


def request_options(options: Any) -> dict[str, Any]:
    """What ``build_payload`` takes besides the messages, from the run's options."""
    return {
        "model": options.model_name,
        "max_tokens": options.max_tokens,
        "temperature": options.temperature,
        "cache_prompt": options.cache_prompt,
        "ignore_eos": options.ignore_eos,
    }


def fire_request_event(environment: Any, record: RequestRecord) -> None:
    """One Locust request per request: its whole time, and its output tokens as the "size"
    (the entry's name says so); TTFT and tok/s per step are in the web UI's rigbench tab."""
    failure = None if record.ok else Exception(f"{record.error_kind}: {record.error_message or ''}"[:200])
    environment.events.request.fire(
        request_type=LOCUST_REQUEST_TYPE,
        name=LOCUST_REQUEST_NAME,
        response_time=(record.t_end - record.t_start) * 1000.0,
        response_length=record.completion_tokens or 0,
        exception=failure,
        context={},
    )
