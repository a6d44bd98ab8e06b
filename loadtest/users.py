"""The simulated user: streams chat completions back to back and records every request.

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
from locust import User, constant, task

from core.errors import RunDirError
from core.lists import parse_counts, parse_seconds
from core.rundir import RecordWriter, RequestRecord, RunDir, utc_now
from loadtest.long_context import context_for_tokens
from loadtest.prompts import Prompt, load_prompts, rotation
from loadtest.schedule import Stage, locate_or_last, make_stages
from loadtest.streaming import TIMELINES, RequestMeta, StreamResult, build_payload, make_client, stream_chat

log = logging.getLogger(__name__)
STORAGE_FAILED_EXIT_CODE = 3  # the same code the controller uses for a failed sweep
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown Locust's own output


class LoadContext:
    """What every user of one load process shares: options, prompts, the shard writer."""

    def __init__(self, options: Any, host: str):
        self.options = options
        self.host = host
        self.shard = f"{socket.gethostname()}-{os.getpid()}"
        self.stages: list[Stage] = make_stages(
            parse_counts(options.rigbench_steps, "--rigbench-steps"),
            options.rigbench_warmup,
            parse_seconds(options.rigbench_measure, "--rigbench-measure"),
        )
        self.prompts: list[Prompt] = load_prompts(options.prompts)
        self.context_text, self.context_tokens = context_for_tokens(host, options.context_tokens)
        self.user_counter = itertools.count()
        self.writer: RecordWriter | None = None
        self.storage_error: str | None = None
        self.timeline = None
        run_dir = options.rigbench_run_dir
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
        where = self.writer.path if self.writer is not None else self.options.rigbench_run_dir
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        self.storage_error = (
            f"cannot write records to {where}: {error.strerror or error} ({code}); the records written "
            "before are kept; free space or choose another runs folder, then run the sweep again"
        )
        log.error(self.storage_error)
        if self.options.rigbench_run_dir:
            run = RunDir(self.options.rigbench_run_dir)
            run.release_space_reserve()
            with contextlib.suppress(OSError, RunDirError):
                run.update_manifest(status="failed", status_detail=self.storage_error, ended_at=utc_now())
        environment.process_exit_code = STORAGE_FAILED_EXIT_CODE
        gevent.spawn(environment.runner.quit)


_context: LoadContext | None = None
_context_lock = threading.Lock()


def load_context(environment: Any) -> LoadContext:
    """The process's context, made on first use (after ``--processes`` has forked)."""
    global _context
    with _context_lock:
        if _context is None or _context.shard != f"{socket.gethostname()}-{os.getpid()}":
            _context = LoadContext(environment.parsed_options, environment.host)
        return _context


class StreamingChatUser(User):
    """One user = one httpx client (one connection) sending requests back to back."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.context = load_context(self.environment)
        options = self.context.options
        self.client = make_client(self.host, read_timeout=options.read_timeout)
        self.prompts = rotation(self.context.prompts, offset=next(self.context.user_counter))
        self.request_options = {
            "model": options.model,
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
            "cache_prompt": options.cache_prompt,
            "ignore_eos": options.ignore_eos,
        }

    def on_stop(self) -> None:
        self.client.close()

    @task
    def chat(self) -> None:
        prompt = next(self.prompts).with_context(self.context.context_text)
        payload = build_payload(list(prompt.messages), **self.request_options)
        meta = self.context.meta_for(time.time(), prompt.category)
        result = stream_chat(
            self.client, payload, meta, on_abort=lambda stopped: self.context.keep(stopped, self.environment)
        )
        record = result.record.model_copy(update=self._phase_by_start(result.record.t_start, meta))
        result = StreamResult(record=record, chunk_times=result.chunk_times)
        self.context.keep(result, self.environment)
        self._fire_events(record)

    def _phase_by_start(self, t_start: float, meta: RequestMeta) -> dict:
        """Re-place the record by its exact start time (the meta was taken a moment before)."""
        exact = self.context.meta_for(t_start, meta.category)
        return {"step": exact.step, "users": exact.users, "phase": exact.phase}

    def _fire_events(self, record: RequestRecord) -> None:
        fire = self.environment.events.request.fire
        failure = None if record.ok else Exception(f"{record.error_kind}: {record.error_message or ''}"[:200])
        tokens = record.completion_tokens or 0
        if record.t_first_token is not None:
            fire(
                request_type="SSE",
                name="ttft",
                response_time=(record.t_first_token - record.t_start) * 1000.0,
                response_length=0,
                exception=None,
                context={},
            )
        fire(
            request_type="SSE",
            name="e2e",
            response_time=(record.t_end - record.t_start) * 1000.0,
            response_length=tokens,
            exception=failure,
            context={},
        )
