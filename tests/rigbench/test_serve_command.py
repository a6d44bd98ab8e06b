"""``rigbench serve``: the tiny profile's llama-server on its own, for a sweep by hand, until Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core.network import free_port

pytestmark = pytest.mark.integration
RIGBENCH = str(Path(sys.executable).with_name("rigbench"))


def test_serve_runs_until_ctrl_c_and_a_sweep_can_use_it(tmp_path: Path, llama_build) -> None:
    port = free_port()
    # Ctrl-C reaches it even where pytest was started with SIGINT ignored (a shell's `cmd &`)
    process = subprocess.Popen([RIGBENCH, "serve", "--port", str(port), "--backend", "cpu"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), start_new_session=True)
    try:
        url = process.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}", process.stderr.read() if process.poll() is not None else url
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        swept = subprocess.run([RIGBENCH, "sweep", "--url", url, "--steps", "1", "--warmup", "0.3", "--measure", "2",
                                "--runs-dir", str(tmp_path / "runs"), "--no-progress"],
                               capture_output=True, text=True, timeout=120)
        assert swept.returncode == 0, swept.stderr
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        finally:
            with contextlib.suppress(ProcessLookupError):  # nothing is left if Ctrl-C did not end it
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
