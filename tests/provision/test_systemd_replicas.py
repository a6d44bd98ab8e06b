"""The systemd path of serve, stop and the sweep's exit count, on a recorded connection: no systemd runs here,
so the commands it would send are checked instead (the supervisor path runs for real in test_serve_replicas)."""

from __future__ import annotations

import io
from dataclasses import dataclass

from provision.rig_paths import RigPaths
from provision.serve import ServedReplica, ServeState, exit_counts, exits_since, start_service, stop_service

PATHS = RigPaths("/w")


@dataclass
class Result:
    stdout: str = ""
    ok: bool = True
    exited: int = 0


class RecordedRig:
    """Answers each command from ``answers`` (by its start) and keeps every command and uploaded file."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.commands, self.files = answers, [], {}

    def run(self, command: str, **_: object) -> Result:
        self.commands.append(command)
        return next((Result(out) for start, out in self.answers.items() if command.startswith(start)), Result())

    def put(self, local: io.BytesIO, remote: str) -> None:
        self.files[remote] = local.getvalue().decode()


def state(replicas: int) -> ServeState:
    listed = [ServedReplica(index=i, port=8080 + i, slots=2, gpu=i, cpus=[i],
                            command=["/usr/bin/env", f"CUDA_VISIBLE_DEVICES={i}", "/b/llama-server", "--port",
                                     str(8080 + i)], log=f"/w/rigbench/serve/llama-server-{i}.log")
              for i in range(replicas)] if replicas > 1 else []
    return ServeState(profile="p", command=["/b/llama-server", "--port", "8080"], supervisor="systemd", port=8080,
                      host="127.0.0.1", log="/w/rigbench/serve/llama-server.log", replicas=listed)


def test_systemd_serves_one_unit_per_replica_and_stops_them_all() -> None:
    rig = RecordedRig({"id -un": "ubuntu", "id -u": "0"})
    start_service(rig, PATHS, state(2))
    units = {remote: text for remote, text in rig.files.items() if remote.endswith(".service")}
    assert sorted(units) == ["/w/rigbench/serve/rigbench-llama-0.service", "/w/rigbench/serve/rigbench-llama-1.service"]
    second = units["/w/rigbench/serve/rigbench-llama-1.service"]
    assert 'ExecStart="/usr/bin/env" "CUDA_VISIBLE_DEVICES=1" "/b/llama-server" "--port" "8081"' in second
    assert "StandardOutput=append:/w/rigbench/serve/llama-server-1.log" in second
    assert "Description=rigbench llama-server (p, replica 1)" in second
    assert "install -m 644 /w/rigbench/serve/rigbench-llama-1.service /etc/systemd/system/rigbench-llama-1.service" \
        in rig.commands
    assert rig.commands.count("systemctl daemon-reload") == 1
    assert rig.commands[-1] == "systemctl restart rigbench-llama-0.service rigbench-llama-1.service"
    stop_service(rig, PATHS, state(2))
    assert rig.commands[-1] == "systemctl stop rigbench-llama-0.service rigbench-llama-1.service"


def test_one_server_keeps_its_unit() -> None:
    rig = RecordedRig({"id -un": "ubuntu", "id -u": "0"})
    start_service(rig, PATHS, state(1))
    assert list(rig.files) == ["/w/rigbench/serve/rigbench-llama.service"]
    assert rig.commands[-1] == "systemctl restart rigbench-llama.service"


def test_systemds_restart_count_says_which_replica_died() -> None:
    rig = RecordedRig({"systemctl show -p NRestarts --value rigbench-llama-1.service": "2\n",
                       "systemctl show -p NRestarts --value": "0\n"})
    before = {0: 0, 1: 1}
    assert exit_counts(rig, PATHS, state(2)) == {0: 0, 1: 2}
    assert exits_since(rig, PATHS, state(2), before) == [
        "replica 1 (port 8081) exited and was restarted by its supervisor: systemd restarted it 1 time; see "
        "journalctl -u rigbench-llama-1.service and /w/rigbench/serve/llama-server-1.log"]
