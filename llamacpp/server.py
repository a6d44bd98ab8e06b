"""Run llama-server as a child process on this machine (the local rig, and tests).

Remote rigs are served by provision under systemd or a supervisor; here the parent process
owns the server: it picks a free loopback port, waits for ``/health`` and
stops the server when the ``with`` block ends, also when the block raises.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

import httpx

from core.errors import LlamaCppError
from core.network import free_port


class LocalServer:
    """A llama-server child process bound to ``host:port``."""

    def __init__(
        self,
        binary: Path | str,
        args: list[str],
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | str | None = None,
        startup_timeout: float = 120.0,
    ):
        self.binary = str(binary)
        self.host = host
        self.port = port or free_port(host)
        self.args = list(args) + ["--host", host, "--port", str(self.port)]
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with open(self.log_path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))

    def start(self) -> LocalServer:
        if self.log_path is None:
            self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        self.process = subprocess.Popen(
            [self.binary, *self.args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            self.wait_healthy()
        except BaseException:  # Ctrl-C or SIGTERM while it loads too: ``with`` calls no __exit__ for a failed __enter__
            self.stop()
            raise
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LlamaCppError(
                    f"llama-server exited with code {self.process.returncode} during start-up; "
                    f"last log lines:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise LlamaCppError(
            f"llama-server did not report healthy on {self.base_url}/health within {self.startup_timeout:.0f} s; "
            f"last log lines:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
