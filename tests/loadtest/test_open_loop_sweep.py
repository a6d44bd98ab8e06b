"""Open-loop sweeps (``--rates``) end to end: a real headless Locust against the ground-truth server."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from core.rundir import LoadSettings, RunDir, new_manifest, server_at
from loadtest.arrivals import LATE_START_S, run_arrivals
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.resume import start_resumed_run
from loadtest.schedule import stages_for
from rigbench.cli import app

pytestmark = pytest.mark.integration
CONFIG = GroundTruthConfig(ttft_ms=20, itl_ms=5, model="default", tokens=16)  # ~0.1 s a request


def sweep(tmp_path: Path, url: str, *options: str) -> RunDir:
    result = CliRunner().invoke(app, ["sweep", "--url", url, "--runs-dir", str(tmp_path / "runs"), "--no-progress",
                                      "--max-tokens", "16", *options])
    assert result.exit_code == 0, result.output
    (path,) = (tmp_path / "runs").iterdir()
    return RunDir(path)


def scheduled(run: RunDir) -> np.ndarray:
    """The run's arrival schedule, in unix seconds, as the load processes computed it."""
    manifest = run.read_manifest()
    return manifest.steps[0].started_at + run_arrivals(stages_for(manifest.load), manifest.load)


@pytest.mark.timing
def test_a_rate_sweep_sends_its_schedule_and_records_intended_starts(tmp_path: Path) -> None:
    with GroundTruthServer(CONFIG, tmp_path / "truth.jsonl") as server:
        run = sweep(tmp_path, server.base_url, "--rates", "5,10", "--warmup", "0.5", "--measure", "3")
    manifest = run.read_manifest()
    assert manifest.status == "complete", manifest.status_detail
    assert manifest.load.rate_steps == [5.0, 10.0] and manifest.load.user_steps == []
    assert (manifest.load.arrival, manifest.load.arrival_seed) == ("poisson", 0)
    assert [(s.index, s.users, s.rate) for s in manifest.steps] == [(0, 0, 5.0), (1, 0, 10.0)]
    assert not [w for w in manifest.warnings if "parallel slots" in w]
    records = run.read_records()
    assert all(r.t_intended is not None and r.users == 0 for r in records)
    assert all(r.error_kind is None for r in records)
    # every scheduled arrival was sent once, at its time: the records' intended starts are the schedule
    intended = np.sort([r.t_intended for r in records])
    assert np.allclose(intended, scheduled(run), rtol=0, atol=1e-6)
    for step in manifest.steps:
        window = step.measure_end - step.measure_start
        measured = [r for r in records if r.step == step.index and r.phase == "measure"]
        assert all(step.measure_start <= r.t_intended < step.measure_end for r in measured)
        # a Poisson count of mean rate x window: within 4 sd (the seeded schedule makes it the same every run)
        expected = step.rate * window
        assert abs(len(measured) - expected) <= 4 * math.sqrt(expected), (len(measured), expected)
    # at a modest rate the generator keeps to the schedule: most starts within the late-start threshold
    lags = np.array([r.t_start - r.t_intended for r in records if r.phase == "measure"])
    assert np.all(lags > -0.001) and np.median(lags) < LATE_START_S, np.percentile(lags, [50, 90, 100])


@pytest.mark.timing
def test_two_processes_share_a_constant_schedule_that_merges_whole(tmp_path: Path) -> None:
    with GroundTruthServer(CONFIG, tmp_path / "truth.jsonl") as server:
        run = sweep(tmp_path, server.base_url, "--rates", "8", "--arrival", "constant", "--processes", "2",
                    "--warmup", "1.5", "--measure", "2")
    manifest = run.read_manifest()
    assert manifest.status == "complete", manifest.status_detail
    records = run.read_records()
    shards = {r.shard for r in records}
    assert len(shards) == 2 and len(run.shard_paths()) == 2
    intended = np.sort([r.t_intended for r in records])
    assert len(intended) == 8 * 3.5
    assert np.allclose(np.diff(intended), 1 / 8, rtol=0, atol=1e-6)
    for shard in shards:  # each process sent every other arrival
        own = np.sort([r.t_intended for r in records if r.shard == shard])
        assert np.allclose(np.diff(own), 2 / 8, rtol=0, atol=1e-6)


def test_resume_of_a_rate_sweep_runs_the_remaining_rates(tmp_path: Path) -> None:
    settings = LoadSettings(rate_steps=[1.0, 2.0, 4.0], warmup_seconds=1, measure_seconds=[2, 3, 4], max_tokens=8)
    manifest = new_manifest("test", "tiny", load=settings, server=server_at("http://127.0.0.1:9", slots=1))
    old = RunDir.create(tmp_path, manifest)
    old.update_manifest(status="interrupted", last_complete_step=0)
    new, _ = start_resumed_run(old, None)
    load = new.read_manifest().load
    assert (load.rate_steps, load.user_steps, load.measure_seconds) == ([2.0, 4.0], [], [3, 4])
