"""Run llama-server as a child process on this machine (the local rig, and tests).

Remote rigs are served by provision under systemd or a supervisor; here the parent process
owns the server: it picks a free loopback port (or checks the one it is given), waits for
``/health`` and stops the server when the ``with`` block ends, also when the block raises.

A port is checked before anything starts, and again once something answers there: a server that
took the port meanwhile answers ``/health`` too, and with ``--reuse-port`` (SO_REUSEPORT) two
llama-servers bind the same port and the kernel shares the requests between them. Each start
writes its own log.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import tempfile
import time
from collections import deque
from datetime import datetime
from pathlib import Path

import httpx
import psutil

from core.errors import LlamaCppError
from core.network import bind_error, free_port, server_url
from core.rundir.server_ended import ServerEnded

LOOPBACK = "127.0.0.1"
WILDCARDS = ("0.0.0.0", "::")


def new_log_path(port: int) -> Path:
    """A log of its own for one start, in the temporary folder: its port, when, and a part no
    other start has, so a second server never writes over a running one's log."""
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    handle, name = tempfile.mkstemp(prefix=f"llama-server-{port}-{stamp}-", suffix=".log")
    os.close(handle)
    return Path(name)


def check_port(host: str, port: int, source: str | None = None) -> None:
    """Refuse a port something already holds, in one line naming the flag or profile key it came
    from (``source``; None: a port picked free here)."""
    error = bind_error(host, port)
    if error is None:
        return
    if error.errno == errno.EADDRINUSE:
        raise port_error(host, port, source, "is already in use (a server listens there)")
    raise port_error(host, port, source, f"cannot be bound ({error.strerror})", held=False)


def port_error(host: str, port: int, source: str | None, problem: str, held: bool = True) -> LlamaCppError:
    """One line: which port, where it came from, what is wrong and what to do (``held``: another
    server holds it)."""
    if source is None:  # picked free here a moment before: something took it since
        return LlamaCppError(f"port {port} (picked free here): {host}:{port} {problem}; run again")
    advice = f"stop it or give another {source}" if held else f"give another {source}"
    return LlamaCppError(f"{source} {port}: {host}:{port} {problem}; {advice}")


class LocalServer:
    """A llama-server child process bound to ``host:port``."""

    def __init__(
        self,
        binary: Path | str,
        args: list[str],
        host: str = LOOPBACK,
        port: int | None = None,
        log_path: Path | str | None = None,
        startup_timeout: float = 120.0,
        port_source: str | None = None,
        environment: dict[str, str] | None = None,
        cpus: list[int] | None = None,
    ):
        """``port_source``: the flag or profile key the port came from, named when it is refused
        (without one, the port was picked free here). ``environment``: added to this process's
        (a replica's ``CUDA_VISIBLE_DEVICES``); ``cpus``: the CPUs it may run on, set before it
        starts a thread (a replica's share of the cores)."""
        self.binary = str(binary)
        self.host = host
        self.port = port or free_port(host)
        self.args = list(args) + ["--host", host, "--port", str(self.port)]
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.port_source = port_source
        self.environment = dict(environment or {})
        self.cpus = list(cpus or [])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return server_url("http", self.host, self.port)

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with open(self.log_path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))

    def start(self) -> LocalServer:
        self.launch()
        return self.wait_started()

    def launch(self) -> LocalServer:
        """Start the process without waiting for it to answer (``wait_started`` does): several servers load their
        models side by side."""
        self.check_port()  # before the log is opened: a busy port starts nothing and writes over nothing
        if self.log_path is None:
            self.log_path = new_log_path(self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # appended: a log path named twice (a resumed eval's) keeps what the earlier start wrote
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        cpus = self.cpus
        self.process = subprocess.Popen(
            [self.binary, *self.args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **self.environment} if self.environment else None,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,  # noqa: PLW1509 - before exec
        )
        log.close()
        return self

    def wait_started(self) -> LocalServer:
        """Wait for a launched server's health check; one that does not answer is stopped."""
        try:
            self.wait_healthy()
        except BaseException:  # Ctrl-C or SIGTERM while it loads too: ``with`` calls no __exit__ for a failed __enter__
            self.stop()
            raise
        return self

    def check_port(self) -> None:
        check_port(self.host, self.port, self.port_source)

    def port_error(self, problem: str) -> LlamaCppError:
        return port_error(self.host, self.port, self.port_source, problem)

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if bind_error(self.host, self.port) is not None:  # taken between check_port and its own bind
                    raise self.port_error(f"was taken before llama-server could bind it (its log: {self.log_path})")
                raise LlamaCppError(
                    f"llama-server exited with code {self.process.returncode} during start-up; "
                    f"last log lines:\n{self.log_tail()}"
                )
            try:
                answered = httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                answered = False
            if answered:
                listeners = self.port_listeners()
                if listeners is None:  # cannot tell: the answer is taken as this server's
                    return
                mine, others = listeners
                if mine and others:  # both bound it with --reuse-port: the kernel would share the requests
                    raise self.port_error(f"is held by another server too, which would take a share of the "
                                          f"requests (llama-server's log: {self.log_path})")
                if mine:
                    return
            time.sleep(0.2)  # nothing answered yet, or another server did
        self.stop()
        raise LlamaCppError(
            f"llama-server did not report healthy on {self.base_url}/health within {self.startup_timeout:.0f} s; "
            f"last log lines:\n{self.log_tail()}"
        )

    def port_listeners(self) -> tuple[int, int] | None:
        """Sockets listening on the port (on its host or on every address): this server's, and
        other processes'; None when that cannot be read."""
        assert self.process is not None
        try:
            ours = {self.process.pid} | {child.pid for child in psutil.Process(self.process.pid).children(True)}
            listening = [
                connection.pid for connection in psutil.net_connections("tcp")
                if connection.status == psutil.CONN_LISTEN and connection.laddr.port == self.port
                and connection.laddr.ip in (self.host, *WILDCARDS)
            ]
        except psutil.Error:
            return None
        mine = sum(pid in ours for pid in listening)
        return mine, len(listening) - mine

    def exit_said(self, name: str = "llama-server") -> str | None:
        """``NAME (URL) exited with code N; its log: PATH`` once the process has ended on its own; None while it
        runs or before it started."""
        ended = self.ended(name)
        return ended.said() if ended is not None else None

    def ended(self, name: str = "llama-server") -> ServerEnded | None:
        """The record of its end once the process has ended on its own (for a sweep in another process to read);
        None while it runs or before it started."""
        if self.process is None or self.process.poll() is None:
            return None
        return ServerEnded(name=name, url=self.base_url, exit_code=self.process.returncode,
                           log=str(self.log_path) if self.log_path else None, ended_at=time.time())

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``timeout``; returns once it has
        exited. A second Ctrl-C or SIGTERM while it stops skips the grace, never the wait."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            if isinstance(stopped, KeyboardInterrupt):
                raise

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
