"""``rigbench serve``: the tiny profile's llama-server on its own, for a sweep by hand, until stopped.

For scripts: only the URL on stdout; a busy port is one line and nothing started or written; a stop
signal stops llama-server before ``rigbench serve`` exits, with the shell's status for the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from core.network import free_port, free_ports

RIGBENCH = str(Path(sys.executable).with_name("rigbench"))
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def serve_command(port: int) -> list[str]:
    return [RIGBENCH, "serve", "--port", str(port), "--backend", "cpu"]


def in_folder(tmp: Path) -> dict[str, str]:
    """The environment with ``tmp`` as the temporary folder: where serve's llama-server logs go."""
    return {**os.environ, "TMPDIR": str(tmp)}


def default_stop_signals() -> None:
    """In the child before exec: the stop signals at their defaults, so they reach serve even where
    pytest was started with them ignored (a shell's `cmd &`, nohup)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def serving(port: int, tmp: Path) -> Iterator[tuple[subprocess.Popen, psutil.Process]]:
    """`rigbench serve` in its own session, once it has printed its URL, and its llama-server."""
    process = subprocess.Popen(serve_command(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=in_folder(tmp), preexec_fn=default_stop_signals, start_new_session=True)
    child = None
    try:
        url = process.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}", process.stderr.read() if process.poll() is not None else url
        (child,) = psutil.Process(process.pid).children()
        yield process, child
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing is left if the test stopped it
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            if child is not None:
                child.kill()
        process.communicate(timeout=30)


def test_a_busy_port_is_one_line_naming_it_and_nothing_is_started_or_written(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        earlier = tmp_path / f"llama-server-{port}.log"  # where a start on this port logged before
        earlier.write_text("the running server's log\n")
        result = subprocess.run(serve_command(port), capture_output=True, text=True, env=in_folder(tmp_path),
                                timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"rigbench: error: --port {port}: 127.0.0.1:{port} is already in use (a server listens there); "
        "stop it or give another --port"
    ]
    assert earlier.read_text() == "the running server's log\n"
    assert list(tmp_path.iterdir()) == [earlier]


@pytest.mark.integration
def test_a_second_serve_on_a_served_port_is_refused_and_the_first_keeps_serving_and_its_log(
    tmp_path: Path, llama_build
) -> None:
    port = free_port()
    with serving(port, tmp_path) as (first, _):
        (log,) = tmp_path.glob(f"llama-server-{port}-*.log")
        logged = log.read_bytes()
        second = subprocess.run(serve_command(port), capture_output=True, text=True, env=in_folder(tmp_path),
                                timeout=60)
        assert second.returncode == 2 and second.stdout == ""
        assert len(second.stderr.splitlines()) == 1 and f"--port {port}: " in second.stderr, second.stderr
        assert list(tmp_path.glob("llama-server-*")) == [log]
        assert log.read_bytes().startswith(logged), "the first server's log was written over"
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        assert first.poll() is None


@pytest.mark.integration
@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=lambda signum: signal.Signals(signum).name)
def test_a_stop_signal_stops_llama_server_before_serve_exits(stop: int, tmp_path: Path, llama_build) -> None:
    with serving(free_port(), tmp_path) as (process, child):
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 128 + stop, stderr
        assert stderr.splitlines()[-1] == f"stopped by {signal.Signals(stop).name}"
        assert not child.is_running(), "llama-server outlived rigbench serve"


@pytest.mark.integration
def test_serve_runs_until_ctrl_c_and_a_sweep_can_use_it(tmp_path: Path, llama_build) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(port, tmp_path) as (process, _):
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        swept = subprocess.run([RIGBENCH, "sweep", "--url", url, "--steps", "1", "--warmup", "0.3", "--measure", "2",
                                "--runs-dir", str(tmp_path / "runs"), "--no-progress"],
                               capture_output=True, text=True, timeout=120)
        assert swept.returncode == 0, swept.stderr
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)


@pytest.mark.integration
def test_replicas_each_print_their_url_and_a_stop_signal_stops_them_all(tmp_path: Path, llama_build) -> None:
    port = free_ports(2)
    process = subprocess.Popen([*serve_command(port), "--replicas", "2"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=in_folder(tmp_path),
                               preexec_fn=default_stop_signals, start_new_session=True)
    try:
        urls = [process.stdout.readline().strip() for _ in range(2)]
        assert urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"], process.stderr.read()
        assert [httpx.get(f"{url}/health", timeout=5).status_code for url in urls] == [200, 200]
        children = psutil.Process(process.pid).children()
        assert len(children) == 2
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 128 + signal.SIGTERM, stderr
        assert not any(child.is_running() for child in children), "a replica outlived rigbench serve"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
