"""The MPS study's plumbing and its report, read back from the committed H200 study."""

from __future__ import annotations

from pathlib import Path

from core.errors import LlamaCppError
from rigbench import autotune
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


def test_with_repeats_the_line_and_every_arm_run_in_rounds_and_a_study_run_again_redoes_only_what_is_missing(
        tmp_path, monkeypatch) -> None:
    ran: list[tuple[str, int, int]] = []

    def local_rig(options):
        ran.append((options.repeat.arm, options.repeat.index, options.repeat.order))
        raise LlamaCppError("llama-server exited with code 1 during start-up")

    monkeypatch.setattr(autotune, "run_local_rig", local_rig)
    study = MpsStudy(tmp_path, [1, 8], 1.0, 1, "cpu", None, replicas=[2], mps_replicas=[2], small_host_cores=4,
                     repeats=2)
    study.tune(ARMS_FOLDER, study.base_options(ARMS_FOLDER), study.arms)
    arms = ["profile", "profile@2-replicas+no-mps", "profile@2-replicas+mps"]
    assert ran == [(arm, index, order) for order, (index, arm) in enumerate((i, a) for i in (1, 2) for a in arms)]
    # the first round completed before the machine was lost: run again, only the second round is made
    log = tmp_path / ARMS_FOLDER / "autotune.jsonl"
    first_round = [TrialResult(name=arm, overrides=[], status="complete", started_at="", repeat=1, repeats=2,
                               series="s", aggregate_tok_s_at_max_users=100.0) for arm in arms]
    log.write_text("".join(trial.model_dump_json() + "\n" for trial in first_round))
    ran.clear()
    trials = study.tune(ARMS_FOLDER, study.base_options(ARMS_FOLDER), study.arms)
    assert ran == [(arm, 2, order) for order, arm in enumerate(arms, 3)]
    assert {(t.name, t.repeat, t.series) for t in trials} == {(arm, index, "s") for arm in arms for index in (1, 2)}
    said = (tmp_path / "study.log").read_text()
    assert "profile (repeat 1 of 2) kept from an earlier run" in said


def test_the_small_host_takes_the_best_mps_arm_by_its_mean_over_repeats() -> None:
    def runs(name: str, replicas: int, aggregates: list[float]) -> list[TrialResult]:
        return [TrialResult(name=name, overrides=[], status="complete", started_at="", replicas=replicas, mps=True,
                            repeat=index, repeats=len(aggregates), aggregate_tok_s_at_max_users=value)
                for index, value in enumerate(aggregates, 1)]

    # 2 replicas had one lucky run; 4 replicas serve more on the mean
    trials = [*runs("profile@2-replicas+mps", 2, [9000, 4000, 4100]), *runs("profile@4-replicas+mps", 4,
                                                                           [6000, 6100, 5900])]
    assert small_host_arm(trials, 4).count == 4
