"""``rigbench locustfile``: plain Locust from a folder outside the checkout, by the printed path."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from core.machine import server_rig
from core.rundir import RunDir
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCUST = Path(sys.executable).with_name("locust")  # the console script of this environment, as a user runs it


def test_plain_locust_runs_from_any_folder_with_the_printed_locustfile(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not elsewhere.is_relative_to(ROOT)
    printed = subprocess.run([sys.executable, "-m", "rigbench", "locustfile"], cwd=elsewhere, capture_output=True,
                             text=True, timeout=60, check=True)
    locustfile = Path(printed.stdout.strip())
    assert printed.stdout == f"{locustfile}\n" and locustfile.is_absolute() and locustfile.name == "locustfile.py"
    with GroundTruthServer(GroundTruthConfig(ttft_ms=5, itl_ms=2, model="m"), tmp_path / "truth.jsonl") as server:
        done = subprocess.run([str(LOCUST), "-f", str(locustfile), "--headless", "--host", server.base_url,
                               "--steps", "1", "--warmup", "0.3", "--measure", "1", "--model-name", "m",
                               "--max-tokens", "4", "--runs-dir", "runs", "--only-summary"],
                              cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = (elsewhere / "runs").iterdir()
    manifest = RunDir(run).read_manifest()
    assert manifest.status == "complete" and manifest.load.user_steps == [1]
    assert manifest.rig == server_rig(server.base_url), "the machine described as sweep and local describe it"
    loose = [str(p) for p in [run, *run.rglob("*")] if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert loose == [], "a hand run's files are private too"
