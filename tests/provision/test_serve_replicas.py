"""A profile of two replicas on the SSH rig: served, reported, swept, one replica killed, stopped; bad inputs."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from core.errors import ProvisionError
from core.profile import RigProfile, load_profile
from core.rundir import RunDir
from provision.serve import logs, serve, status, stop
from provision.sweep import sweep
from provision.tunnel import open_tunnel, served_ports

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
RIGBENCH = str(BIN / "rigbench")


def replicas_profile(folder: Path, replicas: int) -> RigProfile:
    """The tiny profile (its model is the one built_rig downloaded) served as ``replicas`` servers; no -t, so
    the rig's cores are divided between them."""
    path = folder / f"tiny-x{replicas}.toml"
    path.write_text(
        '[model.synthetic]\narchitecture = "llama"\npreset = "tiny"\nseed = 0\n\n'
        f'[server]\nargs = "-c 4096 --parallel 4 -kvu --metrics --slots"\nreplicas = {replicas}\n\n'
        "[request]\nmax_tokens = 16\ntemperature = 0.0\ncache_prompt = false\nignore_eos = true\n")
    return load_profile(path)



def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0



def record_replicas(run: Path) -> dict[int, int]:
    """Answered requests per replica, from the run's records."""
    counts: dict[int, int] = {}
    for shard in (run / RunDir.RECORDS).glob("*.jsonl"):
        for line in shard.read_text().splitlines():
            record = json.loads(line)
            if not record.get("error_kind") and not record.get("interrupted"):
                counts[record["replica"]] = counts.get(record["replica"], 0) + 1
    return counts


def test_two_replicas_serve_report_sweep_fail_when_one_dies_and_stop(built_rig, replica_ports, tmp_path: Path,
                                                                    capsys) -> None:
    rig, paths, _, manifest = built_rig
    profile = replicas_profile(tmp_path, 2)
    base = replica_ports.free_ports(2)
    local_runs = tmp_path / "runs"
    try:
        state = serve(rig, profile, paths, port=base, health_timeout=120)
        assert [(r.index, r.port, r.slots, r.gpu) for r in state.replicas] == [(0, base, 2, None),
                                                                               (1, base + 1, 2, None)]
        binary = manifest.binary("llama-server")
        for replica in state.replicas:
            assert replica.log == f"{paths.serve}/llama-server-{replica.index}.log"
            prefix, args = replica.command[:replica.command.index(binary)], replica.command[
                replica.command.index(binary) + 1:]
            if replica.cpus:  # the rig has taskset: each replica pinned to its share of the cores
                assert prefix[1:] == ["-c", ",".join(map(str, replica.cpus))] and prefix[0].endswith("taskset")
            for flag, value in (("--port", str(replica.port)), ("-np", "2"), ("-c", "2048"), ("-t", "1")):
                assert args[args.index(flag) + 1] == value, flag
            assert Path(paths.serve, f"supervisor-{replica.index}.pid").read_text().strip().isdigit()
        assert state.replicas[0].cpus != state.replicas[1].cpus or not state.replicas[0].cpus
        assert not Path(paths.serve, "supervisor.pid").exists() and state.command[0] == manifest.binary("llama-server")
        again = serve(rig, profile, paths, port=base, health_timeout=120)
        assert again.started_at == state.started_at and "already serving" in capsys.readouterr().out

        report = status(rig, paths)
        assert report["service"] == "running" and report["health"]["status"] == 200
        assert report["slots"]["summary"]["total"] == 4
        assert [(r["index"], r["port"], r["service"], r["health"]["status"], r["slots"]["summary"]["total"])
                for r in report["replicas"]] == [(0, base, "running", 200, 2), (1, base + 1, "running", 200, 2)]
        tails = logs(rig, paths, lines=5)
        assert f"==> replica 0 (port {base})" in tails and f"==> replica 1 (port {base + 1})" in tails
        assert served_ports(rig, paths, base) == [base, base + 1] and served_ports(rig, paths, 1) == [1]
        with open_tunnel(rig, remote_port=base + 1) as local_port:  # the tunnel step opens one of these per replica
            assert httpx.get(f"http://127.0.0.1:{local_port}/health", timeout=10).status_code == 200

        copied = sweep(rig, profile, {"user_steps": [2], "warmup_seconds": 0.5, "measure_seconds": 2.0}, paths,
                       local_runs=local_runs, rigbench=RIGBENCH)
        run = RunDir(copied[0]).read_manifest()
        assert run.status == "complete", run.status_detail
        assert [(r.index, r.url, r.slots, r.gpu) for r in run.server.replicas] == [
            (0, f"http://127.0.0.1:{base}", 2, None), (1, f"http://127.0.0.1:{base + 1}", 2, None)]
        assert run.server.parallel_slots == 4 and set(record_replicas(copied[0])) == {0, 1}

        # replica 1's llama-server killed mid-sweep: its supervisor restarts it, the run fails naming it
        first_pid = replica_ports.server_on(base + 1).pid
        known = set(Path(paths.runs).iterdir())

        def kill_replica_once_loaded() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                new = [p for p in Path(paths.runs).iterdir() if p not in known and (p / RunDir.RECORDS).is_dir()]
                if new and any(shard.stat().st_size for shard in (new[0] / RunDir.RECORDS).glob("*.jsonl")):
                    psutil.Process(first_pid).kill()
                    return
                time.sleep(0.1)

        killer = threading.Thread(target=kill_replica_once_loaded, daemon=True)
        killer.start()
        with pytest.raises(ProvisionError, match=rf"sweep: during the sweep replica 1 \(port {base + 1}\) exited "
                                                 r"and was restarted by its supervisor: \[supervisor\] llama-server "
                                                 r"exited with 137") as raised:
            sweep(rig, profile, {"user_steps": [2], "warmup_seconds": 0.5, "measure_seconds": 4.0}, paths,
                  local_runs=local_runs, rigbench=RIGBENCH)
        killer.join(timeout=5)
        assert "marked failed" in str(raised.value)
        failed = [p for p in local_runs.iterdir() if p != copied[0]]
        assert len(failed) == 1
        local, remote = (RunDir(failed[0]).read_manifest(),
                         RunDir(Path(paths.runs) / failed[0].name).read_manifest())
        assert local.status == remote.status == "failed" and "replica 1" in remote.status_detail
    finally:
        stopped = stop(rig, paths)
    assert stopped and "llama-server stopped (2 replicas)" in capsys.readouterr().out
    assert not listening(base) and not listening(base + 1)
    assert replica_ports.server_on(base) is None and replica_ports.server_on(base + 1) is None
    assert not list(Path(paths.serve).glob("supervisor*.pid"))
    assert status(rig, paths)["service"] == "stopped"


def test_replica_inputs_are_refused_in_one_line_before_anything_starts(built_rig, sshd, replica_ports,
                                                                       tmp_path: Path) -> None:
    rig, paths, _, _ = built_rig
    base = replica_ports.free_ports(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 1))
        squatter.listen()
        with pytest.raises(ProvisionError, match=rf"^serve: port {base + 1} \(replica 1 of 2, on ports "
                                                 rf"{base}-{base + 1}\) on the rig is already in use"):
            serve(rig, replicas_profile(tmp_path, 2), paths, port=base, health_timeout=30)
    assert not list(Path(paths.serve).glob("supervisor*.pid")) and not listening(base)

    known = tmp_path / "home" / "known_hosts" / "dev"
    known.parent.mkdir(parents=True)
    sshd.known_hosts(known)
    result = subprocess.run(
        [RIGBENCH, "provision", "--host", sshd.host, "--port", str(sshd.port), "--user", sshd.user, "-i",
         str(sshd.key), "--work", paths.work, "--profile", str(replicas_profile(tmp_path, 8).source_path), "serve",
         "--server-port", str(base)],
        capture_output=True, text=True, timeout=60, env={"RIGBENCH_HOME": str(tmp_path / "home"), "PATH": str(BIN)})
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "serve: profile 'tiny-x8': [server] replicas = 8 is more replicas than the 4 slots" in result.stderr
    assert not list(Path(paths.serve).glob("supervisor*.pid"))
