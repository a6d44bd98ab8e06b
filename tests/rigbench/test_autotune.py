"""rigbench autotune: the choice of the best trial, and real trials on the tiny local rig."""

from __future__ import annotations

import json

import pytest

from core.errors import LlamaCppError, ProfileError, RunInterrupted
from core.rundir import RunDir
from rigbench import autotune
from rigbench.autotune import ReplicaArm, TrialResult, best_trial, changes_sampling, kept_sentence, run_autotune
from rigbench.commands.autotune import replica_totals
from rigbench.local_rig import LocalRigOptions


def trial(name: str, aggregate: float | None, ratio: float | None, overrides=(), status="complete") -> TrialResult:
    return TrialResult(
        name=name,
        overrides=list(overrides),
        status=status,
        started_at="2026-11-30T00:00:00+00:00",
        aggregate_tok_s_at_max_users=aggregate,
        one_user_vs_bench=ratio,
    )


def test_best_is_the_highest_aggregate_among_trials_that_keep_one_user_fast() -> None:
    results = [
        trial("fast-but-slow-alone", 2000, 0.85),
        trial("kept", 1600, 0.91),
        trial("lower", 1500, 0.95),
        trial("failed", None, None, status="failed"),
    ]
    assert best_trial(results).name == "kept"
    # nobody keeps 0.9 of llama-bench: the highest complete trial, rather than nothing
    assert best_trial([trial("a", 900, 0.5), trial("b", 1000, 0.6)]).name == "b"
    assert best_trial([trial("failed", None, None, status="failed")]) is None


def test_a_trial_that_changes_every_requests_sampling_is_never_best() -> None:
    greedy_only = trial("greedy-chain", 5000, 0.99, overrides=["--backend-sampling", "--samplers", "temperature"])
    assert changes_sampling(greedy_only.overrides) and not changes_sampling(["--backend-sampling"])
    assert best_trial([greedy_only, trial("bs", 1600, 0.92, ["--backend-sampling"])]).name == "bs"


def test_ctrl_c_or_a_signal_ends_the_tuning_not_only_its_trial(tmp_path, monkeypatch) -> None:
    ran = []

    def local_rig(options: LocalRigOptions):
        ran.append(options.label)
        if options.label == "broken":
            raise LlamaCppError("llama-server exited with code 1 during start-up")
        raise RunInterrupted(f"{tmp_path}/run: interrupted (Ctrl-C or SIGTERM); its records are kept")

    monkeypatch.setattr(autotune, "run_local_rig", local_rig)
    trials = {"broken": ["--no-such-llama-flag"], "stopped": [], "never": []}
    with pytest.raises(RunInterrupted):
        run_autotune(LocalRigOptions(), trials, tmp_path)
    assert ran == ["broken", "stopped"]
    lines = [json.loads(line) for line in (tmp_path / "autotune.jsonl").read_text().splitlines()]
    assert [(line["name"], line["status"]) for line in lines] == [("broken", "failed"), ("stopped", "interrupted")]


@pytest.mark.integration
def test_autotune_records_every_trial_failures_included(tmp_path, llama_build) -> None:
    base = LocalRigOptions(backend="cpu", load={"user_steps": [1, 2], "warmup_seconds": 0.5, "measure_seconds": 1.5})
    trials = {"profile": [], "two-slots": ["--parallel", "2"], "broken": ["--no-such-llama-flag"]}
    results = run_autotune(base, trials, tmp_path, bench_tg=100.0)

    lines = [json.loads(line) for line in (tmp_path / "autotune.jsonl").read_text().splitlines()]
    assert [line["name"] for line in lines] == ["profile", "two-slots", "broken"]
    assert [r.status for r in results] == ["complete", "complete", "failed"]
    assert "--no-such-llama-flag" in results[2].error or "llama-server" in results[2].error
    for result in results[:2]:
        assert result.max_users == 2 and result.aggregate_tok_s_at_max_users > 0
        assert result.one_user_server_tok_s > 0
        assert result.one_user_vs_bench == pytest.approx(result.one_user_server_tok_s / 100.0)
        assert result.one_user_client_tok_s > 0  # (tiny replies: too short to compare the two)
    assert best_trial(results).name in {"profile", "two-slots"}


def test_a_trial_without_a_one_user_figure_cannot_skip_the_ceiling_rule() -> None:
    no_figure = trial("no-one-user-step", 9000, None)
    no_figure.bench_tg = 350.0
    kept = trial("kept", 1500, 0.93)
    kept.bench_tg = 350.0
    assert best_trial([no_figure, kept]).name == "kept"
    assert changes_sampling(["--sampler_seq", "kt"]) and changes_sampling(["--samplers=top_k"])


def test_a_trial_higher_only_within_the_noise_does_not_replace_the_profile_line() -> None:
    profile = trial("profile", 2308, 0.78)
    noisy = trial("threads-16", 2422, 0.75, ["-t", "16"])
    clear = trial("clear-win", 3100, 0.75, ["-ub", "64"])
    profile.aggregate_low_at_max_users, profile.aggregate_high_at_max_users = 1432, 2963
    noisy.aggregate_low_at_max_users, noisy.aggregate_high_at_max_users = 1889, 2833
    clear.aggregate_low_at_max_users, clear.aggregate_high_at_max_users = 2990, 3210
    assert best_trial([profile, noisy]).name == "profile"
    assert kept_sentence([profile, noisy], best_trial([profile, noisy])) == (
        "best: profile: (profile as is) (threads-16 measured higher at the largest step, but within the 95% "
        "intervals: not beyond noise)")
    assert best_trial([profile, noisy, clear]).name == "clear-win"
    assert kept_sentence([profile, clear], clear) == "best: clear-win: -ub 64"
    # without intervals (records from before they were kept) the highest is kept, as it always was
    assert best_trial([trial("profile", 2308, 0.78), trial("t16", 2422, 0.75, ["-t", "16"])]).name == "t16"


@pytest.mark.integration
def test_replica_counts_are_tried_with_the_best_flags_as_servers_sharing_the_slots(tmp_path, llama_build) -> None:
    base = LocalRigOptions(backend="cpu", load={"user_steps": [1, 2], "warmup_seconds": 0.5, "measure_seconds": 1.5})
    results = run_autotune(base, {"profile": []}, tmp_path, arms=[ReplicaArm(count=2)])
    assert [(r.name, r.replicas, r.status) for r in results] == [
        ("profile", 1, "complete"), ("profile@2-replicas", 2, "complete")]
    manifest = RunDir(results[1].run_path).read_manifest()
    assert [replica.slots for replica in manifest.server.replicas] == [2, 2], "tiny's 4 slots, two each"
    assert results[1].aggregate_tok_s_at_max_users > 0
    best = best_trial(results)
    assert kept_sentence(results, best).startswith(f"best: {best.name}")
    assert best.replicas == 1 or "as 2 replicas" in kept_sentence(results, best)


def test_replica_counts_are_per_gpu_and_refused_before_any_trial_when_the_slots_cannot_be_split() -> None:
    # no nvidia-smi here: one GPU's worth (the tiny profile: 4 slots, -c 4096)
    assert replica_totals("tiny", [1, 2, 4]) == [2, 4]
    with pytest.raises(ProfileError, match=r"^--replica-counts \(3 servers\) = 3 does not divide the 4 slots"):
        replica_totals("tiny", [3])
