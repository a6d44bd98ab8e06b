"""A server that is stopped while it starts, or whose port another server holds: the child never
outlives the parent that was told to stop, a port is never shared, and no log is written over."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from core.errors import LlamaCppError
from core.profile import load_profile
from llamacpp.server import LocalServer, new_log_path


def test_ctrl_c_while_the_server_loads_stops_the_child(tmp_path, monkeypatch) -> None:
    loading = tmp_path / "llama-server"  # a server that never reports healthy: it only sleeps
    loading.write_text("#!/bin/sh\nexec sleep 60\n")
    loading.chmod(0o755)
    server = LocalServer(loading, [], log_path=tmp_path / "server.log")

    def interrupted(self: LocalServer) -> None:
        raise KeyboardInterrupt  # as SIGTERM arrives (stop_signals_as_keyboard_interrupt) during the health wait

    monkeypatch.setattr(LocalServer, "wait_healthy", interrupted)
    with pytest.raises(KeyboardInterrupt), server:
        pass
    assert server.process is not None
    assert server.process.poll() is not None, "the loading llama-server was left running"


def test_a_second_ctrl_c_while_the_server_stops_kills_it_and_still_waits(tmp_path) -> None:
    stubborn = tmp_path / "llama-server"  # a server slow to stop: SIGTERM alone would take the whole grace
    stubborn.write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 60\n")
    stubborn.chmod(0o755)
    server = LocalServer(stubborn, [], log_path=tmp_path / "server.log")
    server.process = subprocess.Popen([stubborn], start_new_session=True)
    time.sleep(0.2)  # the trap is set
    waits = []
    wait = server.process.wait

    def interrupted_once(timeout: float | None = None) -> int:
        waits.append(timeout)
        if len(waits) == 1:
            raise KeyboardInterrupt  # the second Ctrl-C or SIGTERM, during the grace
        return wait(timeout)

    server.process.wait = interrupted_once
    with pytest.raises(KeyboardInterrupt):
        server.stop(timeout=30)
    assert server.process.returncode == -signal.SIGKILL and waits == [30, None]


def test_each_start_without_a_log_path_gets_a_log_of_its_own(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    first, second = new_log_path(8080), new_log_path(8080)
    assert first != second and first.parent == second.parent == tmp_path
    assert first.name.startswith("llama-server-8080-") and first.exists() and second.exists()


class Healthy(BaseHTTPRequestHandler):
    """Another server on the port: it answers /health, as a llama-server started earlier would."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def tiny_args(model: Path) -> list[str]:
    return ["-m", str(model), *load_profile("tiny").server.args]


@pytest.mark.integration
def test_a_port_taken_after_the_check_is_one_line_and_the_log_is_kept(
    tmp_path, monkeypatch, llama_server_binary, tiny_model
) -> None:
    monkeypatch.setattr(LocalServer, "check_port", lambda self: None)  # taken just after the check
    other = ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    log = tmp_path / "server.log"
    log.write_text("an earlier start\n")
    server = LocalServer(llama_server_binary, tiny_args(tiny_model), port=port, log_path=log, port_source="--port")
    try:
        with pytest.raises(LlamaCppError) as refused, server:
            pass
    finally:
        other.shutdown()
        other.server_close()
    # the other server's answer to /health was not taken for this one's
    assert str(refused.value) == (f"--port {port}: 127.0.0.1:{port} was taken before llama-server could bind it "
                                  f"(its log: {log}); stop it or give another --port")
    assert log.read_text().startswith("an earlier start\n") and "bind" in log.read_text()


@pytest.mark.integration
def test_a_second_llama_server_sharing_a_port_is_stopped_and_refused(
    tmp_path, monkeypatch, llama_server_binary, tiny_model
) -> None:
    """With --reuse-port (SO_REUSEPORT) a second llama-server binds a port the first holds, and the
    kernel would share the requests between the two."""
    args = [*tiny_args(tiny_model), "--reuse-port"]
    with LocalServer(llama_server_binary, args, log_path=tmp_path / "first.log") as first:
        monkeypatch.setattr(LocalServer, "check_port", lambda self: None)  # as if both started at once
        second = LocalServer(llama_server_binary, args, port=first.port, log_path=tmp_path / "second.log",
                             port_source="--port")
        with pytest.raises(LlamaCppError, match=f"^--port {first.port}: .* is held by another server too"), second:
            pass
        assert second.process is not None and second.process.poll() is not None, "the second llama-server runs on"
        assert httpx.get(f"{first.base_url}/health", timeout=10).status_code == 200
