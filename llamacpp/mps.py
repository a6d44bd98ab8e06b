"""The MPS control daemon on this machine: started before the replicas, checked, stopped after the last.

``nvidia-cuda-mps-control -d`` forks the daemon and returns; commands go to it on the control program's
standard input (``get_server_list`` answers while it runs, ``quit`` ends it), through the pipe folder in
the environment. A daemon already answering at the folders is used and left running: only one this
object started is stopped. What ran goes into the manifest as :class:`core.rundir.models.MpsInfo`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from core.errors import LlamaCppError
from core.machine import nvidia_gpu
from core.mps import CONTROL_PROGRAM, LOG_VARIABLE, PIPE_VARIABLE, MpsDecision, daemon_environment
from core.rundir.models import MpsInfo

ANSWER_TIMEOUT_S = 10.0
START_TIMEOUT_S = 15.0


def driver_version() -> str | None:
    """The NVIDIA driver's version (which the control program ships with), as the manifest's machine reads it;
    None without one."""
    driver = nvidia_gpu().get("driver")
    return f"driver {driver}" if driver else None


def daemon_for(decision: MpsDecision, log_dir: Path | None = None) -> MpsDaemon | None:
    """The daemon a decision to run MPS names (None when it does not): the folders the environment names
    (``CUDA_MPS_PIPE_DIRECTORY``, ``CUDA_MPS_LOG_DIRECTORY``: a daemon the user runs), else a fresh pipe folder
    of its own under the temporary folder (a control socket's path must stay short) and its logs in ``log_dir``
    (a run's folder) or beside the pipe."""
    if not decision.run or decision.control is None:
        return None
    pipe = os.environ.get(PIPE_VARIABLE)
    pipe_dir = Path(pipe) if pipe else Path(tempfile.mkdtemp(prefix="rigbench-mps-")) / "pipe"
    logs = os.environ.get(LOG_VARIABLE)
    log_folder = Path(logs) if logs else log_dir if log_dir is not None else pipe_dir.parent / "log"
    return MpsDaemon(decision.control, pipe_dir, log_folder, decision.reason, temporary_pipe=not pipe)


class MpsDaemon:
    """The control daemon at ``pipe_dir`` (its logs in ``log_dir``), run by ``control``."""

    def __init__(self, control: str, pipe_dir: Path, log_dir: Path, reason: str = "",
                 temporary_pipe: bool = False) -> None:
        """``temporary_pipe``: the pipe folder is this daemon's own, removed once it has stopped."""
        self.control = control
        self.pipe_dir = Path(pipe_dir)
        self.log_dir = Path(log_dir)
        self.reason = reason
        self.temporary_pipe = temporary_pipe
        self.started_here = False

    @property
    def environment(self) -> dict[str, str]:
        environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
        return environment | daemon_environment(str(self.pipe_dir), str(self.log_dir))

    def ask(self, command: str, timeout: float = ANSWER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """One command on the control program's standard input; its answer (exit status and output)."""
        try:
            return subprocess.run([self.control], input=command + "\n", capture_output=True, text=True,
                                  env=self.environment, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([self.control], 124, "", f"no answer within {timeout:g} s")
        except OSError as error:
            return subprocess.CompletedProcess([self.control], 127, "", str(error))

    def answers(self) -> bool:
        """Whether a daemon answers at the pipe folder (``get_server_list`` exits 0)."""
        return self.ask("get_server_list").returncode == 0

    def start(self) -> MpsDaemon:
        """Start the daemon unless one already answers here; it must answer within a few seconds."""
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.answers():
            return self
        started = subprocess.run([self.control, "-d"], capture_output=True, text=True, env=self.environment,
                                 timeout=START_TIMEOUT_S)
        if started.returncode != 0:
            said = (started.stderr or started.stdout).strip().splitlines()
            raise LlamaCppError(f"{CONTROL_PROGRAM} -d (at {PIPE_VARIABLE}={self.pipe_dir}) exited with code "
                                f"{started.returncode}: {said[-1] if said else 'no output'}; its log: "
                                f"{self.log_dir / 'control.log'}")
        self.started_here = True
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if time.monotonic() > deadline:
                self.stop()
                raise LlamaCppError(f"the MPS control daemon started at {self.pipe_dir} does not answer "
                                    f"get_server_list within {START_TIMEOUT_S:g} s; its log: "
                                    f"{self.log_dir / 'control.log'}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        """``quit`` to a daemon this object started (one found running is left as it was), then wait for it to go."""
        if not self.started_here:
            return
        self.ask("quit")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.answers():
            time.sleep(0.2)
        self.started_here = False
        if self.temporary_pipe:  # its folder too, unless its logs are kept there
            shutil.rmtree(self.pipe_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                self.pipe_dir.parent.rmdir()

    def info(self, started_here: bool | None = None) -> MpsInfo:
        return MpsInfo(ran=True, reason=self.reason, control=self.control, version=driver_version(),
                       pipe_dir=str(self.pipe_dir), log_dir=str(self.log_dir),
                       started_here=self.started_here if started_here is None else started_here)

    def __enter__(self) -> MpsDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
