"""The open-loop dispatcher: one Locust user per load process that sends requests on the arrival schedule.

A closed-loop user waits for its reply before it sends again, so a slow server slows the load
and the queue it would have faced never shows (coordinated omission). Here each request starts
at its scheduled time (``loadtest.arrivals``) in a greenlet of its own, however many are still
streaming; its record keeps that time as ``t_intended`` beside ``t_start`` (when it was written
to the socket), and its step and phase are those of the intended start.

Which share of the schedule a process sends: process ``k`` of ``n`` takes every ``n``-th arrival
from the ``k``-th. ``n`` is the number of load processes, which the master sets in the options at
every start (``--rigbench-load-processes``; Locust sends the options to workers with each spawn
message); ``k`` is the worker's index, which Locust's master gives every worker when it
connects (0 in a single-process run). The shape runs one dispatcher in each process; its
requests go through one ``ChatSession``, whose idle connections carry the next ones.

In-flight requests of one process are capped at ``MAX_IN_FLIGHT`` (generous: every one is an open
connection); an arrival that finds the cap full waits for a free place, starts late, and is
counted; the sweep's manifest then says so.

A trace replay (``--trace``) is an open loop too: its arrivals are the trace's rows
(``loadtest.trace.trace_arrivals``), shared among processes the same way; arrival n sends row
n's lengths, as a drawn-length run sends the lengths drawn for arrival n (``loadtest.lengths``),
so ``--processes`` changes neither.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
import gevent.pool
from locust import User, task

from core.replicas import user_replica
from core.rundir import RequestRecord
from loadtest.arrivals import LATE_START_S, process_share, run_arrivals
from loadtest.chat_session import ChatSession
from loadtest.dispatch_tally import MAX_IN_FLIGHT

log = logging.getLogger("rigbench.sweep")
RECHECK_S = 0.25  # the longest sleep between looks at the start time (a new start from the web UI moves it)
LEAD_S = 0.005  # a request's greenlet starts this early, builds its request, then waits for its time
IDLE_S = 3600.0


def process_place(environment: Any) -> tuple[int, int]:
    """(this process's index, how many processes) share the schedule."""
    processes = max(1, int(getattr(environment.parsed_options, "rigbench_load_processes", 1) or 1))
    index = max(0, int(getattr(environment.runner, "worker_index", 0) or 0))
    if index >= processes:
        # a worker that connected again after the start gets a new index from the master
        log.warning("load process %d of %d: taking share %d of the arrivals", index, processes, index % processes)
        index %= processes
    return index, processes


def run_user_number(environment: Any, number: int) -> int:
    """A closed-loop user's number in the whole run from its number in this process: Locust hands a
    process's users out in turn, so its k-th user is the run's (k x processes + index)-th."""
    index, processes = process_place(environment)
    return number * processes + index


class OpenLoopDispatcher(User):
    """Sends this process's share of the open-loop schedule, one greenlet per request."""

    def wait_time(self) -> float:
        return 0.0

    def on_start(self) -> None:
        self.session = ChatSession(self.environment, self.host)
        self.process = self.session.process
        self.context = self.session.context
        # one session per replica; arrival n goes to replica n mod N
        self.sessions = [ChatSession(self.environment, host, replica)
                         for replica, host in enumerate(self.context.replicas)] or [self.session]
        settings = self.context.settings
        self.index, self.processes = process_place(self.environment)
        offsets = run_arrivals(self.context.stages, settings)
        self.numbers, self.offsets = process_share(offsets, self.index, self.processes)
        self.pool = gevent.pool.Pool(MAX_IN_FLIGHT)
        self.next = 0
        self.duplicate = self.process.dispatching
        if self.duplicate:
            log.error("a second open-loop dispatcher in one load process stays idle: the first sends this share")
        self.process.dispatching = True

    def on_stop(self) -> None:
        if not self.duplicate:
            self.process.dispatching = False
        # requests still streaming are stopped: each is kept as ``interrupted`` with what it received
        self.pool.kill(block=True, timeout=10)
        for session in {id(s): s for s in [self.session, *self.sessions]}.values():
            session.close()

    @task
    def dispatch(self) -> None:
        dispatch = self.process.dispatch
        while not self.duplicate and self.next < len(self.offsets):
            t0 = self.context.t0()
            if not t0:
                gevent.sleep(0.01)
                continue
            intended = t0 + float(self.offsets[self.next])
            wait = intended - LEAD_S - time.time()
            if wait > 0:
                gevent.sleep(min(wait, RECHECK_S))
                continue
            if self.pool.full():
                if not dispatch.cap_waits:
                    log.warning("open loop: %d requests in flight in this process (the cap): arrivals wait",
                                MAX_IN_FLIGHT)
                dispatch.cap_waits += 1
            self.pool.spawn(self._send, int(self.numbers[self.next]), intended)  # waits while the pool is full
            self.next += 1
        gevent.sleep(IDLE_S)  # the schedule is sent: the shape stops this user at the sweep's end

    def _send(self, number: int, intended: float) -> None:
        prompts = self.context.prompts
        # the arrival's number picks the prompt: the same prompts in the same order whatever --processes
        session = self.sessions[user_replica(number, len(self.sessions))]
        result = session.chat(prompts[number % len(prompts)], intended=intended,
                              lengths=self.context.lengths.for_arrival(number))
        self._note_late(result.record)

    def _note_late(self, record: RequestRecord) -> None:
        dispatch = self.process.dispatch
        if dispatch.late_logged or record.t_intended is None or record.phase != "measure":
            return
        lag = record.t_start - record.t_intended
        if lag > LATE_START_S:
            dispatch.late_logged = True
            log.warning("open loop: a request started %.0f ms after its scheduled time (this load process falls "
                        "behind; the sweep's manifest will count such requests)", lag * 1000)
