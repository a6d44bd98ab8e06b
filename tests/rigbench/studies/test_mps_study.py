"""The MPS study's plumbing and its report, read back from the committed H200 study."""

from __future__ import annotations

from pathlib import Path

from rigbench.autotune import TrialResult, best_trial, read_trials
from rigbench.studies.mps_report import study_tables
from rigbench.studies.mps_study import ARMS_FOLDER, MpsStudy, small_host_arm

STUDY = Path(__file__).resolve().parents[3] / "runs" / "mps-h200-2026-12-04"


def test_arms_run_by_count_each_without_mps_then_under_it(tmp_path) -> None:
    study = MpsStudy(tmp_path, [1, 8], 1.0, 1, "cpu", None, replicas=[4, 2], mps_replicas=[2, 4, 8, 16],
                     small_host_cores=4)
    assert [arm.name("profile") for arm in study.arms] == [
        "profile@2-replicas+no-mps", "profile@2-replicas+mps", "profile@4-replicas+no-mps", "profile@4-replicas+mps",
        "profile@8-replicas+mps", "profile@16-replicas+mps"]


def test_the_small_host_takes_the_best_mps_arm_its_cores_can_place() -> None:
    trials = read_trials(STUDY / ARMS_FOLDER / "autotune.jsonl")
    assert small_host_arm(trials, 4).count == 4  # 8x8 served more, but 8 replicas need 8 cores
    assert small_host_arm(trials, 16).count == 8
    assert small_host_arm([t for t in trials if not t.mps], 4) is None
    failed = TrialResult(name="x", overrides=[], status="failed", started_at="", replicas=2, mps=True)
    assert small_host_arm([failed], 4) is None


def test_the_committed_study_reads_back_to_its_tables_and_autotune_keeps_8x8_under_mps(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))  # the bundled prices only
    trials = read_trials(STUDY / ARMS_FOLDER / "autotune.jsonl")
    assert best_trial(trials).name == "profile@8-replicas+mps"
    text = study_tables(STUDY, ["p5en.48xlarge"])
    assert text == (STUDY / "REPORT.md").read_text()
    assert "| 128     | 2,339 [2,210-2,449] (0.20)" in text  # one server
    assert "8,393 [8,333-8,464] (0.70)" in text and "1,181 [1,106-1,236] (0.10)" in text
    assert "Target (0.6 of the ceiling at 32-128 users) met by 8x8 MPS: 0.73 at 32, 0.70 at 64, 0.70 at 128." in text
