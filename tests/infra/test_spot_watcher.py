"""The spot-interruption watcher script against the rehearsal's IMDSv2 stand-in on 127.0.0.1 (real
curl, real HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from infra.user_data import template_text
from rigbench.studies.rehearsal.imds import StandInImds

pytestmark = pytest.mark.integration


@pytest.fixture
def serve_imds() -> Iterator:
    with ExitStack() as servers:
        yield lambda imds: servers.enter_context(imds.serving())


def start_watcher(tmp_path: Path, imds_url: str) -> tuple[subprocess.Popen, Path, Path]:
    script = tmp_path / "rigbench-spot-watcher"
    script.write_text(template_text("spot_watcher.sh"))
    marker = tmp_path / "nvme" / "rigbench" / "spot-interruption.json"
    log = tmp_path / "spot-watcher.log"
    env = {
        "PATH": os.environ["PATH"],
        "RIGBENCH_IMDS_URL": imds_url,
        "RIGBENCH_SPOT_MARKER": str(marker),
        "RIGBENCH_SPOT_LOG": str(log),
        "RIGBENCH_SPOT_POLL_SECONDS": "0.05",
    }
    process = subprocess.Popen(
        ["bash", str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    return process, marker, log


def test_notice_writes_the_marker_and_a_log_line(tmp_path, serve_imds):
    imds = StandInImds(notice_after_polls=3)
    process, marker, log = start_watcher(tmp_path, serve_imds(imds))
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    written = json.loads(marker.read_text())
    assert written["instance_action"] == imds.notice and imds.notice["action"] == "terminate"
    assert written["detected_at"].endswith("Z")
    detected, stop = (datetime.fromisoformat(text.replace("Z", "+00:00"))
                      for text in (written["detected_at"], written["instance_action"]["time"]))
    assert timedelta(seconds=110) <= stop - detected <= timedelta(seconds=120), "EC2 warns two minutes ahead"
    assert len(imds.polls) == 3
    assert imds.tokens_issued == ["token-1"]
    assert imds.polls == ["token-1"] * 3, "every instance-action read must carry the IMDSv2 token"
    notice_lines = [line for line in log.read_text().splitlines() if "spot interruption notice" in line]
    assert len(notice_lines) == 1
    assert '"action": "terminate"' in notice_lines[0]
    assert str(marker) in notice_lines[0]


def test_expired_token_is_fetched_again(tmp_path, serve_imds):
    imds = StandInImds(notice_after_polls=4, expire_token_on_poll=2)
    process, marker, _ = start_watcher(tmp_path, serve_imds(imds))
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert imds.tokens_issued == ["token-1", "token-2"]
    assert imds.polls == ["token-1", "token-1", "token-2", "token-2"]
    assert json.loads(marker.read_text())["instance_action"]["action"] == "terminate"


def test_keeps_polling_without_a_marker_until_the_notice(tmp_path, serve_imds):
    imds = StandInImds(notice_after_polls=10_000)
    process, marker, log = start_watcher(tmp_path, serve_imds(imds))
    try:
        deadline = time.monotonic() + 30
        while len(imds.polls) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(imds.polls) >= 5
        assert process.poll() is None, "the watcher stopped before any notice"
        assert not marker.exists()
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert "watching" in log.read_text()


def test_unreachable_imds_is_logged_once_and_retried(tmp_path):
    # A loopback port nobody listens on: the token request fails every time.
    process, marker, log = start_watcher(tmp_path, "http://127.0.0.1:9")
    try:
        deadline = time.monotonic() + 30
        while "no IMDSv2 token" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # several more polls
        assert process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert log.read_text().count("no IMDSv2 token") == 1
    assert not marker.exists()
