"""Two replicas of the tiny model from one plan: both answer on their ports, pinned to their CPUs; a busy port
starts none; one that dies is named; stop leaves none."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import psutil
import pytest

from core.errors import LlamaCppError
from core.network import free_ports
from core.profile import load_profile
from core.replicas import plan_replicas, replace_flag
from llamacpp.replica_set import ReplicaSet

pytestmark = pytest.mark.integration


def two_replicas(tiny_model: Path, port: int) -> list:
    """The tiny profile's line (4 slots) as two replicas of 2, each on one of this machine's cores (its -t left
    to the split)."""
    args = replace_flag(load_profile("tiny").server.args, ("-t", "--threads"), None)
    return plan_replicas(["-m", str(tiny_model), *args], 2, port, cores=sorted(os.sched_getaffinity(0))[:2])


def test_two_replicas_answer_on_their_ports_pinned_and_stop_together(llama_server_binary: Path, tiny_model: Path,
                                                                     tmp_path: Path) -> None:
    port = free_ports(2)
    plans = two_replicas(tiny_model, port)
    replicas = ReplicaSet(llama_server_binary, plans, log_folder=tmp_path)
    with replicas:
        assert replicas.urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        assert [httpx.get(f"{url}/health", timeout=5).status_code for url in replicas.urls] == [200, 200]
        pids = [server.process.pid for server in replicas.servers]
        assert [sorted(psutil.Process(pid).cpu_affinity()) for pid in pids] == [plan.cpus for plan in plans]
        assert replicas.dead() == []
        replicas.servers[1].process.kill()
        replicas.servers[1].process.wait(5)
        dead = replicas.dead()
        assert len(dead) == 1 and dead[0].startswith(f"replica 1 (http://127.0.0.1:{port + 1}) exited with code -9")
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    assert (tmp_path / "llama-server-0.log").stat().st_size > 0


def test_a_busy_port_of_any_replica_starts_none(llama_server_binary: Path, tiny_model: Path, tmp_path: Path) -> None:
    port = free_ports(2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", port + 1))
        held.listen()
        replicas = ReplicaSet(llama_server_binary, two_replicas(tiny_model, port), log_folder=tmp_path,
                              port_source="--port")
        with pytest.raises(LlamaCppError, match=f"--port {port + 1}: 127.0.0.1:{port + 1} is already in use"):
            replicas.start()
    assert all(server.process is None for server in replicas.servers) and not list(tmp_path.iterdir())
