"""Where the sampler runs: a server on this machine is sampled, one elsewhere or behind an SSH tunnel is not."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from core.network import free_port
from rigbench.hardware_sampling import on_this_machine


def listening_process(tmp_path: Path, name: str, port: int) -> subprocess.Popen:
    """A process called ``name`` (this Python under that name) listening on ``port``."""
    program = tmp_path / name
    shutil.copy(sys.executable, program)
    code = (f"import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    process = subprocess.Popen([str(program), "-c", code])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{name} did not listen on {port}")


def test_a_local_server_is_here_a_remote_one_or_a_tunnel_is_not(tmp_path: Path) -> None:
    server_port, tunnel_port = free_port(), free_port()
    server = listening_process(tmp_path, "llama-server", server_port)
    tunnel = listening_process(tmp_path, "ssh", tunnel_port)
    try:
        assert on_this_machine(f"http://127.0.0.1:{server_port}")
        assert not on_this_machine(f"http://127.0.0.1:{tunnel_port}"), "a forwarded port's GPU is the rig's"
        assert not on_this_machine("http://10.0.0.7:8080")
    finally:
        for process in (server, tunnel):
            process.kill()
            process.wait()
