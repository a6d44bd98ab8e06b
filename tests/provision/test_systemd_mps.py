"""The MPS daemon's systemd path, on a recorded connection (no systemd runs here; the restart loop runs for real in
test_serve_mps): its unit, started and answering before the replicas' units, stopped after them; and what makes two
serves the same."""

from __future__ import annotations

import io
from dataclasses import dataclass

from provision.mps import ServedMps
from provision.rig_paths import RigPaths
from provision.serve import (
    ServedReplica,
    ServeState,
    mps_key,
    served_the_same,
    start_mps,
    start_service,
    stop_service,
)

PATHS = RigPaths("/w")
PIPE = "/tmp/rigbench-mps-1000-0123abcd/pipe"
CONTROL = "/usr/bin/nvidia-cuda-mps-control"


@dataclass
class Result:
    stdout: str = ""
    stderr: str = ""
    ok: bool = True
    exited: int = 0


class RecordedRig:
    """Keeps every command and uploaded file; ``get_server_list`` goes unanswered the first ``silent`` times (no
    daemon yet), and answers after."""

    def __init__(self, silent: int = 1) -> None:
        self.commands: list[str] = []
        self.files: dict[str, str] = {}
        self.silent = silent

    def run(self, command: str, **_: object) -> Result:
        self.commands.append(command)
        if "get_server_list" in command and self.silent > 0:
            self.silent -= 1
            return Result(ok=False, exited=1)
        return Result({"id -un": "ubuntu", "id -u": "0"}.get(command, ""))

    def put(self, local: io.BytesIO, remote: str) -> None:
        self.files[remote] = local.getvalue().decode()


def state(mps: ServedMps | None) -> ServeState:
    env = ["/usr/bin/env", f"CUDA_MPS_PIPE_DIRECTORY={PIPE}"] if mps is not None and mps.ran else []
    replicas = [ServedReplica(index=i, port=8080 + i, slots=2, gpu=0, command=[*env, "/b/llama-server", "--port",
                                                                                str(8080 + i)],
                              log=f"/w/rigbench/serve/llama-server-{i}.log") for i in range(2)]
    return ServeState(profile="p", command=["/b/llama-server"], supervisor="systemd", port=8080, host="127.0.0.1",
                      log=replicas[0].log, replicas=replicas, mps=mps)


def mps_on() -> ServedMps:
    return ServedMps(ran=True, reason="profile 'p': [server] mps = true", control=CONTROL, version="driver 580.1",
                     pipe_dir=PIPE, log_dir="/w/rigbench/serve/mps")


def index(commands: list[str], start: str) -> int:
    return next(number for number, command in enumerate(commands) if command.startswith(start))


def test_the_mps_unit_runs_the_daemon_in_its_folders_first_and_stops_it_last() -> None:
    rig = RecordedRig()
    served = start_mps(rig, PATHS, state(mps_on()))
    assert served.mps.started_here and served.mps.unit == "rigbench-mps.service" and served.mps.script is None
    unit = rig.files["/w/rigbench/serve/rigbench-mps.service"].splitlines()
    assert (f'Environment="CUDA_MPS_PIPE_DIRECTORY={PIPE}" "CUDA_MPS_LOG_DIRECTORY=/w/rigbench/serve/mps" '
            '"CUDA_DEVICE_ORDER=PCI_BUS_ID"') in unit
    assert "UnsetEnvironment=CUDA_VISIBLE_DEVICES" in unit
    assert f'ExecStart="{CONTROL}" "-f"' in unit
    assert f'ExecStop="/bin/sh" "-c" "echo quit | {CONTROL}"' in unit
    for line in ("User=ubuntu", "Restart=on-failure", "WorkingDirectory=/w/rigbench/serve/mps",
                 "StandardOutput=append:/w/rigbench/serve/mps/output.log",
                 "Description=rigbench MPS control daemon (p)"):
        assert line in unit, line
    start_service(rig, PATHS, served)
    replica = rig.files["/w/rigbench/serve/rigbench-llama-1.service"]
    assert "After=network-online.target rigbench-mps.service" in replica.splitlines()
    assert f'ExecStart="/usr/bin/env" "CUDA_MPS_PIPE_DIRECTORY={PIPE}" "/b/llama-server"' in replica

    commands = rig.commands
    made = index(commands, "mkdir -p -m 700 /tmp/rigbench-mps-1000-0123abcd && test -O")
    asked = [number for number, command in enumerate(commands) if "get_server_list" in command]
    started = commands.index("systemctl restart rigbench-mps.service")
    replicas = commands.index("systemctl restart rigbench-llama-0.service rigbench-llama-1.service")
    assert made < asked[0] < started < asked[1] < replicas, "folders, none answering, the unit, it answers, replicas"
    assert commands[asked[1]].startswith("timeout 15 sh -c "), "a bounded wait"
    assert "CUDA_MPS_LOG_DIRECTORY=/w/rigbench/serve/mps" in commands[asked[0]], "never the system's log folder"

    stop_service(rig, PATHS, served)
    stops = [command for command in rig.commands if command.startswith("systemctl stop")]
    assert stops == ["systemctl stop rigbench-llama-0.service rigbench-llama-1.service",
                     "systemctl stop rigbench-mps.service"]


def test_a_daemon_already_answering_is_used_not_supervised_and_not_stopped() -> None:
    rig = RecordedRig(silent=0)
    served = start_mps(rig, PATHS, state(mps_on()))
    assert not served.mps.started_here and served.mps.unit is None
    assert not [command for command in rig.commands if "rigbench-mps.service" in command]
    stop_service(rig, PATHS, served)
    assert rig.commands[-1] == "systemctl stop rigbench-llama-0.service rigbench-llama-1.service"


def test_serves_differing_in_mps_are_not_the_same_and_one_whose_daemon_is_silent_is_not_running() -> None:
    off = ServedMps(ran=False, reason="profile 'p': [server] mps = false")
    before_mps = state(None)  # a serve.json from before MPS was recorded reads as not under it
    assert before_mps.mps is None and mps_key(before_mps) == mps_key(state(off)), "no restart for that alone"
    rig = RecordedRig(silent=0)
    assert not served_the_same(rig, PATHS, state(mps_on()), state(off)) and not rig.commands, \
        "told apart without asking the rig"
    assert not served_the_same(rig, PATHS, state(mps_on()), state(mps_on().model_copy(update={
        "pipe_dir": "/tmp/other/pipe"})))
    silent = RecordedRig(silent=1)
    assert not served_the_same(silent, PATHS, state(mps_on()), state(mps_on()))
    assert "get_server_list" in silent.commands[0]
