"""CUDA's MPS control daemon on a rig: whether the serve step runs it, where it lives, and how it is asked.

Why: replicas sharing a GPU take turns on it unless the MPS control daemon runs first and every replica is its
client (``core.mps`` says more and decides). On a rig the serve step (``provision.serve``) supervises the daemon as
it does a replica: unit ``rigbench-mps.service`` or restart loop ``supervise-mps.sh``, started and asked before the
replicas start, stopped after the last has stopped, and only when that serve started it (a daemon already answering
at the folders is used as it is). This module finds the control program on the rig, decides, names the folders and
asks the daemon; it starts nothing.

The folders are always named, never the system's defaults (``/var/log/nvidia-mps`` needs root). The pipe folder
holds a Unix socket, whose path must stay under about 100 characters, so it is not under the work folder (which can
be long) but ``/tmp/rigbench-mps-<uid>-<8 hex of the serve folder>/pipe``: short, the user's own (made 0700, refused
when someone else owns it) and one per work folder, so a second rigbench tree on one machine does not share it by
accident. The logs go to ``<serve>/mps/``, beside the replicas' logs.
"""

from __future__ import annotations

import hashlib
import shlex

from fabric import Connection
from pydantic import Field

import core.mps
from core.errors import ProfileError, ProvisionError
from core.mps import (
    CONTROL_PROGRAM,
    LOG_VARIABLE,
    PIPE_VARIABLE,
    MpsDecision,
    MpsSetting,
    daemon_environment,
    decide_mps,
)
from core.rundir.models import MpsInfo
from provision.connection import run
from provision.rig_paths import RigPaths

UNIT = "rigbench-mps.service"
SCRIPT = "supervise-mps.sh"
PID_FILE = "supervisor-mps.pid"
CONTROL_LOG = "control.log"  # what the daemon itself writes in its log folder
OUTPUT_LOG = "output.log"  # what it prints, and its supervisor's exit lines
START_TIMEOUT_S = 15.0
ANSWER_TIMEOUT_S = 10  # one question to the daemon; a hung one must not hang the step


class ServedMps(MpsInfo):
    """The MPS part of what is served, kept in the rig's ``serve.json``: what a run's manifest records of it
    (:class:`core.rundir.models.MpsInfo`: whether it runs and why, the control program and the driver it ships with,
    the folders, whether this serve started it) and the names it is supervised under."""

    unit: str | None = Field(None, description="its systemd unit, when this serve started it under systemd")
    script: str | None = Field(None, description="its restart loop, when this serve started it without systemd")
    pid_file: str | None = None

    def info(self) -> MpsInfo:
        """What a run's manifest records of it."""
        return MpsInfo.model_validate(self.model_dump(include=set(MpsInfo.model_fields)))

    @property
    def control_log(self) -> str:
        return f"{self.log_dir}/{CONTROL_LOG}"

    @property
    def output_log(self) -> str:
        return f"{self.log_dir}/{OUTPUT_LOG}"

    @property
    def environment(self) -> dict[str, str]:
        """The daemon's own environment: its two folders and the GPUs in nvidia-smi's order."""
        return daemon_environment(str(self.pipe_dir), str(self.log_dir))

    def supervised(self, supervisor: str, paths: RigPaths) -> ServedMps:
        """This daemon as started here under ``supervisor`` (``systemd`` or ``process``), with its names."""
        if supervisor == "systemd":
            return self.model_copy(update={"started_here": True, "unit": UNIT})
        return self.model_copy(update={"started_here": True, "script": f"{paths.serve}/{SCRIPT}",
                                       "pid_file": f"{paths.serve}/{PID_FILE}"})


def find_control(c: Connection) -> str | None:
    """The control program on the rig: on the SSH session's PATH, else in ``core.mps.CONTROL_FOLDERS`` in order (read
    when called), in one command."""
    tries = " ".join(shlex.quote(f"{folder.rstrip('/')}/{CONTROL_PROGRAM}") for folder in core.mps.CONTROL_FOLDERS)
    found = run(c, f"if command -v {CONTROL_PROGRAM}; then exit 0; fi; for found in {tries}; do "
                   'if [ -f "$found" ] && [ -x "$found" ]; then echo "$found"; exit 0; fi; done; exit 1', warn=True)
    lines = found.stdout.strip().splitlines()
    return lines[0].strip() if found.ok and lines and lines[0].startswith("/") else None


def mps_source(profile_name: str) -> str:
    return f"profile {profile_name!r}: [server] mps"


def decide(c: Connection, setting: MpsSetting, profile_name: str, gpus: list[int | None]) -> MpsDecision:
    """Whether the replicas on ``gpus`` (one server: ``[None]``) run under MPS on this rig; ``true`` without the
    control program is refused in one line, before the serve step starts or writes anything."""
    control = find_control(c) if setting is not False else None
    try:
        return decide_mps(setting, gpus, control, source=mps_source(profile_name))
    except ProfileError as error:
        raise ProvisionError(f"serve: {error} (searched on the rig)") from None


def driver_version(c: Connection) -> str | None:
    """The rig's NVIDIA driver version as ``driver X`` (the control program ships with it); None without nvidia-smi."""
    found = run(c, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", warn=True)
    lines = [line.strip() for line in found.stdout.splitlines() if line.strip()]
    return f"driver {lines[0]}" if found.ok and lines else None


def pipe_folder(c: Connection, paths: RigPaths) -> str:
    """The daemon's pipe folder on the rig: short (a socket's path), the SSH user's own, one per work folder."""
    uid = run(c, "id -u").stdout.strip()
    return f"/tmp/rigbench-mps-{uid}-{hashlib.sha256(paths.serve.encode()).hexdigest()[:8]}/pipe"


def served_mps(c: Connection, decision: MpsDecision, paths: RigPaths) -> ServedMps:
    """What is served of MPS: its decision and, when it runs, its folders and the driver's version."""
    if not decision.run:
        return ServedMps(ran=False, reason=decision.reason, control=decision.control)
    return ServedMps(ran=True, reason=decision.reason, control=decision.control, version=driver_version(c),
                     pipe_dir=pipe_folder(c, paths), log_dir=f"{paths.serve}/mps")


def make_folders(c: Connection, mps: ServedMps) -> None:
    """Both folders, the pipe folder's parent made 0700; one another user owns is refused (a daemon planted there
    would be every replica's)."""
    pipe, parent = shlex.quote(str(mps.pipe_dir)), shlex.quote(str(mps.pipe_dir).rsplit("/", 1)[0])
    made = run(c, f"mkdir -p -m 700 {parent} && test -O {parent} && mkdir -p {pipe} {shlex.quote(str(mps.log_dir))}",
               warn=True)
    if not made.ok:
        said = made.stderr.strip().replace("\n", "; ") or "no message"
        raise ProvisionError(f"serve: cannot make the MPS folders {mps.pipe_dir} and {mps.log_dir} on the rig, or "
                             f"{parent} belongs to another user ({said}); remove it, or serve as that user")


def ask_command(mps: ServedMps, command: str) -> str:
    """A shell line sending ``command`` to the daemon at ``mps``'s pipe folder (bounded: a hung daemon is an answer);
    the log folder named too, so not even the control client looks at the system's default."""
    folders = {PIPE_VARIABLE: str(mps.pipe_dir), LOG_VARIABLE: str(mps.log_dir)}
    environment = " ".join(f"{name}={shlex.quote(value)}" for name, value in folders.items())
    return (f"echo {shlex.quote(command)} | timeout {ANSWER_TIMEOUT_S} env {environment} "
            f"{shlex.quote(str(mps.control))}")


def answers(c: Connection, mps: ServedMps) -> bool:
    """Whether a daemon answers at ``mps``'s pipe folder (``get_server_list`` exits 0)."""
    return bool(mps.ran) and run(c, ask_command(mps, "get_server_list"), timeout=ANSWER_TIMEOUT_S + 20,
                                 warn=True).ok


def wait_answering(c: Connection, mps: ServedMps, timeout: float) -> bool:
    """Whether a daemon answers at ``mps``'s pipe folder within ``timeout`` seconds, asked on the rig in a loop (one
    round trip, not one per try)."""
    asking = f"until {ask_command(mps, 'get_server_list')} > /dev/null 2>&1; do sleep 0.2; done"
    return run(c, f"timeout {timeout:g} sh -c {shlex.quote(asking)}", timeout=int(timeout) + ANSWER_TIMEOUT_S + 30,
               warn=True).ok


def log_tail(c: Connection, mps: ServedMps, lines: int = 30, log: str | None = None) -> str:
    """The last lines of the daemon's ``control.log`` (or ``log``)."""
    return run(c, f"tail -n {int(lines)} {shlex.quote(log or mps.control_log)} 2>/dev/null", warn=True).stdout


def last_words(c: Connection, mps: ServedMps) -> str:
    """The daemon's last few log lines in one line, for a one-line failure: its control.log, else its output."""
    for log in (mps.control_log, mps.output_log):
        said = [line.strip() for line in log_tail(c, mps, 3, log).splitlines() if line.strip()]
        if said:
            return f"last lines of {log}: " + " | ".join(said)
    return f"{mps.control_log} is empty"


def render_supervisor(mps: ServedMps) -> str:
    """A restart loop for the daemon where systemd is not (``-f``: in the foreground, its child). ``stop`` sends TERM
    to this loop alone: its trap sends the daemon ``quit`` (a daemon that does not take it is killed), waits for it to
    end, and exits."""
    control, output, pid_file = (shlex.quote(str(part)) for part in (mps.control, mps.output_log, mps.pid_file))
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in mps.environment.items())
    return f"""#!/bin/sh
# rigbench: keeps the MPS control daemon running where systemd is not; restarts it when it exits.
cd {shlex.quote(str(mps.log_dir))} || exit 1
unset CUDA_VISIBLE_DEVICES
export {exports}
echo $$ > {pid_file}
child=
quit_daemon() {{
  echo quit | {control} >> {output} 2>&1 || kill "$child" 2>/dev/null
  [ -n "$child" ] && wait "$child"
  rm -f {pid_file}
  exit 0
}}
trap quit_daemon TERM INT HUP
while :; do
  {control} -f >> {output} 2>&1 &
  child=$!
  wait "$child"
  code=$?
  echo "[supervisor] {CONTROL_PROGRAM} exited with $code at $(date -u +%FT%TZ); restarting in 2 s" >> {output}
  sleep 2
done
"""
