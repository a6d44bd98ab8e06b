"""``rigbench sweep`` in a script: no progress frames in a pipe, the request settings said when no profile
names them, private run files (the report's too), the machine described as ``local`` describes it, and a
synthetic model marked though the server was started by hand."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.machine import machine_info, server_rig
from core.rundir import MachineInfo, RigInfo, RunDir
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from rigbench.cli import app

pytestmark = pytest.mark.integration

RIGBENCH = [sys.executable, "-m", "rigbench"]
QUICK = ["--steps", "1", "--warmup", "0.3", "--measure", "1", "--max-tokens", "4"]
BAR = "\u2501"  # the bar's own character


def loose_files(root: Path) -> list[str]:
    """Files and folders under ``root`` (itself included) that another user could read."""
    return [f"{path.relative_to(root.parent)} {oct(stat.S_IMODE(path.lstat().st_mode))}"
            for path in [root, *root.rglob("*")] if stat.S_IMODE(path.lstat().st_mode) & 0o077]


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_progress_goes_to_a_terminal_on_stderr_only_and_the_request_settings_are_said(tmp_path: Path,
                                                                                       terminal: bool) -> None:
    # rich's own switch says "a terminal" (TTY_COMPATIBLE=1) as a pseudo-terminal would
    env = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR")}
    env.update({"TTY_COMPATIBLE": "1"} if terminal else {})
    with GroundTruthServer(GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default"), tmp_path / "t.jsonl") as server:
        done = subprocess.run([*RIGBENCH, "sweep", "--url", server.base_url, *QUICK, "--runs-dir",
                               str(tmp_path / "runs")], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert BAR not in done.stdout and "step 1/1" not in done.stdout, done.stdout
    assert (BAR in done.stderr) == terminal, done.stderr
    note = ("no --profile: requests carried max_tokens 4 (flag), temperature 0, ignore_eos off, cache_prompt off, "
            "rigbench's own defaults where no flag was given")
    said = [line for line in done.stderr.splitlines() if line.startswith("no --profile")]
    assert len(said) == 1 and said[0].startswith(note), done.stderr
    (path,) = (tmp_path / "runs").iterdir()
    manifest = RunDir(path).read_manifest()
    assert manifest.profile == "none" and manifest.warnings[0] == said[0], "the manifest (and so the report) says it"
    assert manifest.rig == server_rig(server.base_url) == RigInfo(kind="local", machine=machine_info())


def test_a_sweep_with_a_profile_says_nothing_of_its_settings(tmp_path: Path) -> None:
    with GroundTruthServer(GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default"), tmp_path / "t.jsonl") as server:
        result = CliRunner().invoke(app, ["sweep", "--url", server.base_url, "--profile", "tiny", *QUICK,
                                          "--no-progress", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "no --profile" not in result.output
    (path,) = (tmp_path / "runs").iterdir()
    assert not [w for w in RunDir(path).read_manifest().warnings if "no --profile" in w]


def test_every_file_of_a_swept_and_reported_run_is_private(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        with GroundTruthServer(GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default"), tmp_path / "t.jsonl") as gt:
            swept = CliRunner().invoke(app, ["sweep", "--url", gt.base_url, *QUICK, "--no-progress", "--runs-dir",
                                             str(tmp_path / "runs")])
        assert swept.exit_code == 0, swept.output
        (run,) = (tmp_path / "runs").iterdir()
        reported = CliRunner().invoke(app, ["report", str(run), "--format", "all"])
        assert reported.exit_code == 0, reported.output
        assert os.umask(0o022) == 0o022, "the command gives the process its umask back"
    finally:
        os.umask(umask)
    names = {path.name for path in run.rglob("*")}
    assert {"report.html", "steps.csv", "requests.csv", "locust.log", "telemetry.jsonl"} <= names, names
    assert loose_files(run) == []


def test_a_server_on_another_machine_is_named_not_described_as_this_one() -> None:
    assert server_rig("http://gpu-box.internal:8080") == RigInfo(kind="local", machine=MachineInfo(
        hostname="gpu-box.internal"))
    assert server_rig("http://localhost:8080").machine.cpu_cores == os.cpu_count()
    assert server_rig("http://[::1]:8080").machine == server_rig().machine == machine_info()


def test_a_synthetic_model_served_by_hand_is_marked_in_the_sweep_and_its_report(llama_server, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", "--url", llama_server.base_url, "--steps", "1", "--warmup", "0.3",
                                      "--measure", "1", "--max-tokens", "8", "--no-progress", "--runs-dir",
                                      str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    model = RunDir(run).read_manifest().model
    assert model is not None and model.synthetic and model.name == Path(llama_server.args[1]).name
    assert model.label.startswith("synthetic random weights (llama architecture, rigbench-synthetic-tiny)")
    assert model.decode_bytes is not None, "the roofline has the file's decode bytes, as for rigbench local"
    reported = CliRunner().invoke(app, ["report", str(run)])
    assert reported.exit_code == 0, reported.output
    assert f"model {model.label}" in (run / "report.md").read_text()
