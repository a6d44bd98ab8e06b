"""A rig's own machinery on a machine that is not a rig: the user data, systemd and ``shutdown``.

The rehearsal runs the stack's real user data (``infra/user_data.py`` renders it), so the set-up
step waits for the marker the rig itself writes. Two things it calls a lent machine lacks or must
not run: ``systemctl`` (no systemd there: PID 1 is not an init) and ``shutdown`` (the TTL guard
would halt the machine). Both are small scripts written here: the ``systemctl`` stand-in starts a
unit's ``ExecStart`` detached with the unit's ``Environment`` lines, as ``enable --now`` would, and
keeps its pid; the ``shutdown`` stand-in only notes what it was asked. Every path the user data
writes is moved under the rig's folder through the variables the script reads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from core.whole_files import write_whole
from infra.user_data import UserDataSettings, render_user_data

SYSTEMCTL = """#!/bin/bash
# systemctl as far as the rig's user data uses it, where systemd is not running: enable --now starts
# the unit's ExecStart detached, with its Environment lines, its output and pid beside the units.
set -euo pipefail
echo "systemctl $*" >> "$RIGBENCH_SYSTEMD_DIR/systemctl.log"
[ "${1:-}" = enable ] || exit 0
shift
[ "${1:-}" = --now ] && shift
unit="$RIGBENCH_SYSTEMD_DIR/$1"
declare -a variables=()
while IFS= read -r line; do variables+=("$line"); done < <(sed -n 's/^Environment=//p' "$unit")
command=$(sed -n 's/^ExecStart=//p' "$unit")
setsid nohup env "${variables[@]}" $command > "$RIGBENCH_SYSTEMD_DIR/$1.log" 2>&1 < /dev/null &
echo $! > "$RIGBENCH_SYSTEMD_DIR/$1.pid"
"""

SHUTDOWN = """#!/bin/bash
# shutdown, noted and not done: the rehearsal's machine is not the rig's to halt.
echo "shutdown $*" >> "$RIGBENCH_STATE_DIR/shutdown.log"
"""


@dataclass(frozen=True)
class RigMachine:
    """Where one rehearsed rig's machinery lives: its NVMe work folder and the folders its user data writes."""

    folder: Path

    @property
    def nvme(self) -> Path:
        return self.folder / "nvme"

    @property
    def state(self) -> Path:
        return self.folder / "state"

    @property
    def units(self) -> Path:
        return self.folder / "units"

    @property
    def bin(self) -> Path:
        return self.folder / "bin"

    @property
    def setup_marker(self) -> Path:
        return self.state / "setup-complete.json"

    def start_user_data(self, owner: str, imds_url: str) -> subprocess.Popen:
        """The stack's user data for a spot rig, started as cloud-init would; its own log beside it."""
        for folder in (self.nvme, self.state, self.units, self.bin):
            folder.mkdir(parents=True, exist_ok=True)
        script = self.folder / "user-data.sh"
        write_whole(script, render_user_data(UserDataSettings(nvme_path=str(self.nvme), owner_user=owner,
                                                             ttl_hours=8, market="spot")))
        for name, body in (("systemctl", SYSTEMCTL), ("shutdown", SHUTDOWN)):
            write_whole(self.bin / f"{name}-stand-in", body)
            (self.bin / f"{name}-stand-in").chmod(0o755)
        env = {**os.environ, "RIGBENCH_MOUNTPOINT": "true",  # the work folder is there: as a DLAMI's NVMe is
               "RIGBENCH_STATE_DIR": str(self.state), "RIGBENCH_BIN_DIR": str(self.bin),
               "RIGBENCH_SYSTEMD_DIR": str(self.units), "RIGBENCH_FSTAB": str(self.state / "fstab"),
               "RIGBENCH_LOG": str(self.state / "setup.log"),
               "RIGBENCH_SYSTEMCTL": str(self.bin / "systemctl-stand-in"),
               "RIGBENCH_SHUTDOWN": str(self.bin / "shutdown-stand-in"), "RIGBENCH_IMDS_URL": imds_url,
               "RIGBENCH_SPOT_POLL_SECONDS": "1"}
        with open(self.folder / "user-data.log", "ab") as log:
            return subprocess.Popen(["bash", str(script)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def stop_units(self) -> None:
        """Stop what the stand-in systemd started and is still running (the spot watcher before its notice)."""
        for pid_file in self.units.glob("*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.killpg(int(pid_file.read_text().strip()), signal.SIGTERM)


def processes_under(folder: Path, keep: set[int]) -> list[psutil.Process]:
    """Processes whose command line names ``folder`` (a rig's servers, supervisors, watcher), but ``keep``."""
    found = []
    mark = str(folder.resolve())
    for process in psutil.process_iter(["pid", "cmdline"]):
        if process.info["pid"] in keep or not process.info["cmdline"]:
            continue
        if any(mark in part for part in process.info["cmdline"]):
            found.append(process)
    return found
