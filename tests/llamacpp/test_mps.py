"""The MPS control daemon on this machine, through a stand-in control program that records what it is told."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import LlamaCppError
from core.mps import MpsDecision
from llamacpp.mps import MpsDaemon, daemon_for

STANDIN = Path(__file__).resolve().parent / "standin_mps_control.py"


@pytest.fixture
def control(tmp_path, monkeypatch) -> Path:
    """The stand-in on the PATH under the real program's name; its record in the test's folder."""
    folder = tmp_path / "driver-bin"
    folder.mkdir()
    (folder / "nvidia-cuda-mps-control").symlink_to(STANDIN)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_MPS_RECORD", str(tmp_path / "record.log"))
    for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    return folder / "nvidia-cuda-mps-control"


def said(tmp_path: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in (tmp_path / "record.log").read_text().splitlines()]


def test_the_daemon_starts_in_its_own_folders_answers_and_quits_and_its_pipe_folder_goes(tmp_path, control):
    daemon = daemon_for(MpsDecision(True, "--mps = true", str(control)), tmp_path / "run" / "mps")
    assert daemon is not None and daemon.pipe_dir.name == "pipe" and daemon.temporary_pipe
    assert len(str(daemon.pipe_dir / "control")) < 100  # a Unix socket's path must stay short
    with daemon:
        assert daemon.started_here and daemon.answers()
        info = daemon.info()
        assert info.ran and info.started_here and info.pipe_dir == str(daemon.pipe_dir)
        assert info.log_dir == str(tmp_path / "run" / "mps") and info.reason == "--mps = true"
        assert (tmp_path / "run" / "mps" / "control.log").exists()
    assert not daemon.answers() and not daemon.pipe_dir.exists()
    record = said(tmp_path)
    assert "invoked -d" in record and "daemon got get_server_list" in record
    assert "daemon quit" in record


def test_a_daemon_already_answering_is_used_and_left_running(tmp_path, control):
    pipe, logs = tmp_path / "pipe", tmp_path / "logs"
    theirs = MpsDaemon(str(control), pipe, logs).start()
    try:
        ours = MpsDaemon(str(control), pipe, logs)
        with ours:
            assert not ours.started_here and not ours.info().started_here
        assert theirs.answers()  # still running: it was not ours to stop
        assert said(tmp_path).count("invoked -d") == 1
    finally:
        theirs.stop()
    assert not theirs.answers()


def test_a_daemon_that_will_not_start_or_answer_is_one_line(tmp_path, control, monkeypatch):
    monkeypatch.setenv("STANDIN_MPS_FAIL", "start")
    with pytest.raises(LlamaCppError, match=r"nvidia-cuda-mps-control -d \(at CUDA_MPS_PIPE_DIRECTORY=.*\) exited "
                                            r"with code 1: An instance of this daemon is already running"):
        MpsDaemon(str(control), tmp_path / "p1", tmp_path / "l1").start()
    monkeypatch.setenv("STANDIN_MPS_FAIL", "answer")
    monkeypatch.setenv("STANDIN_MPS_HANG_S", "3")
    monkeypatch.setattr("llamacpp.mps.START_TIMEOUT_S", 1.0)
    with pytest.raises(LlamaCppError, match="does not answer get_server_list within 1 s"):
        MpsDaemon(str(control), tmp_path / "p2", tmp_path / "l2").start()


def test_folders_the_environment_names_are_the_daemons_and_no_decision_to_run_makes_none(tmp_path, control,
                                                                                         monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "theirs"))
    monkeypatch.setenv("CUDA_MPS_LOG_DIRECTORY", str(tmp_path / "their-logs"))
    daemon = daemon_for(MpsDecision(True, "x", str(control)), tmp_path / "run")
    assert daemon.pipe_dir == tmp_path / "theirs" and daemon.log_dir == tmp_path / "their-logs"
    assert not daemon.temporary_pipe
    assert daemon_for(MpsDecision(False, "off", str(control))) is None
