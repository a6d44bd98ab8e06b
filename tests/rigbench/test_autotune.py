"""rigbench autotune: the choice of the best trial, and real trials on the tiny local rig."""

from __future__ import annotations

import json

import pytest

from core.errors import LlamaCppError, ProfileError, RunInterrupted
from core.rundir import RunDir
from rigbench import autotune
from rigbench.autotune import (
    SPREAD_UNKNOWN,
    ReplicaArm,
    TrialResult,
    autotune_table,
    best_trial,
    changes_sampling,
    kept_sentence,
    read_trials,
    run_autotune,
)
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
def test_autotune_records_every_run_of_every_trial_in_rounds_failures_included(tmp_path, llama_build) -> None:
    base = LocalRigOptions(backend="cpu", load={"user_steps": [1, 2], "warmup_seconds": 0.5, "measure_seconds": 1.5})
    trials = {"profile": [], "two-slots": ["--parallel", "2"], "broken": ["--no-such-llama-flag"]}
    results = run_autotune(base, trials, tmp_path, bench_tg=100.0, repeats=2)

    lines = [json.loads(line) for line in (tmp_path / "autotune.jsonl").read_text().splitlines()]
    # round 1 runs every trial once, round 2 every trial again: A B C A B C, not A A B B C C
    order = [("profile", 1), ("two-slots", 1), ("broken", 1), ("profile", 2), ("two-slots", 2), ("broken", 2)]
    assert [(line["name"], line["repeat"]) for line in lines] == order
    assert [(r.name, r.repeat, r.repeats) for r in results] == [(name, index, 2) for name, index in order]
    assert [r.status for r in results] == ["complete", "complete", "failed"] * 2
    assert "--no-such-llama-flag" in results[2].error or "llama-server" in results[2].error
    complete = [result for result in results if result.status == "complete"]
    for result in complete:
        assert result.max_users == 2 and result.aggregate_tok_s_at_max_users > 0
        assert result.one_user_server_tok_s > 0
        assert result.one_user_vs_bench == pytest.approx(result.one_user_server_tok_s / 100.0)
        assert result.one_user_client_tok_s > 0  # (tiny replies: too short to compare the two)
    # each run says which repeat of which trial it is, all of one series, in the order they ran
    repeats = [RunDir(result.run_path).read_manifest().repeat for result in complete]
    assert {repeat.series for repeat in repeats} == {results[0].series}
    assert [(repeat.arm, repeat.index, repeat.of, repeat.order) for repeat in repeats] == [
        ("profile", 1, 2, 0), ("two-slots", 1, 2, 1), ("profile", 2, 2, 3), ("two-slots", 2, 2, 4)]
    assert best_trial(results).name in {"profile", "two-slots"}
    table = autotune_table(results, best_trial(results))
    assert table.count("between 2 runs") == 2 and "| broken " in table and table.count("\n") == 4  # a row a trial
    # resumed: the complete runs are kept, only the failed (trial, repeat) pairs run again, in the same series
    again = run_autotune(base, trials, tmp_path, bench_tg=100.0, repeats=2, resume=True)
    assert [r.run_path for r in again if r.status == "complete"] == [r.run_path for r in complete]
    added = read_trials(tmp_path / "autotune.jsonl")[len(lines):]
    assert [(r.name, r.repeat, r.series) for r in added] == [("broken", 1, results[0].series),
                                                             ("broken", 2, results[0].series)]


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
        f"intervals: not beyond noise); one run per trial: {SPREAD_UNKNOWN}")
    assert best_trial([profile, noisy, clear]).name == "clear-win"
    assert kept_sentence([profile, clear], clear) == f"best: clear-win: -ub 64; one run per trial: {SPREAD_UNKNOWN}"
    assert "--repeats 3 measures that spread" in SPREAD_UNKNOWN
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


def repeats_of(name: str, aggregates: list[float], overrides=(), series: str | None = "s1",
               half: float = 10.0) -> list[TrialResult]:
    """A trial's runs by hand, one per aggregate, each with a tight interval of its own (+- ``half``)."""
    return [TrialResult(name=name, overrides=list(overrides), status="complete", started_at="2026-12-05T00:00:00Z",
                        repeat=index, repeats=len(aggregates), series=series, max_users=64,
                        aggregate_tok_s_at_max_users=value, aggregate_low_at_max_users=value - half,
                        aggregate_high_at_max_users=value + half)
            for index, value in enumerate(aggregates, 1)]


def in_rounds(*trials: list[TrialResult]) -> list[TrialResult]:
    """The runs as a tuning logs them: round by round."""
    return [run for round_ in zip(*trials, strict=True) for run in round_]


def test_with_repeats_a_gain_beyond_the_spread_between_runs_is_kept_one_within_it_is_not() -> None:
    profile = repeats_of("profile", [1000, 1040, 960])
    tight = repeats_of("backend-sampling", [1100, 1150, 1050], ["--backend-sampling"])  # +10 % in every round
    results = in_rounds(profile, tight)
    best = best_trial(results)
    assert best.name == "backend-sampling" and best.repeat == 1  # the repeat closest to the mean, 1,100
    assert best_trial(repeats_of("profile", [2786.9, 2861.3])).repeat == 1  # two runs tie: the earlier stands
    assert kept_sentence(results, best) == (
        "best: backend-sampling: --backend-sampling (1.10 [1.08-1.11] of the profile's line at the largest step "
        "between runs: beyond noise)")
    # each run alone is far above the line's runs (tight intervals of their own), but the rounds disagree:
    # +20 %, -12 %, -2.5 %: within the spread between runs, so the profile's line stays
    noisy = repeats_of("threads-16", [1200, 915, 936], ["-t", "16"])
    results = in_rounds(profile, noisy)
    best = best_trial(results)
    assert best.name == "profile" and best.repeat == 1
    sentence = kept_sentence(results, best)
    assert sentence == ("best: profile: (profile as is) (threads-16 measured higher at the largest step, but "
                        "within the spread between runs, at 1.01 [0.68-1.50] of the profile's line: not beyond noise)")
    table = autotune_table(results, best)
    assert "| 1,000.0 [900.6-1,099.4] between 3 runs " in table and "| 1,017.0 [" in table  # means, 3 runs each
    assert table.count("\n") == 3  # a row a trial, not a row a run


def test_with_one_run_of_a_side_each_runs_own_interval_judges_and_the_line_says_the_spread_is_unknown() -> None:
    profile = repeats_of("profile", [1000], half=50)
    gain = repeats_of("bs", [1100], ["--backend-sampling"], half=40)  # 1,060-1,140 against 950-1,050: beyond
    assert best_trial([*profile, *gain]).name == "bs"
    assert kept_sentence([*profile, *gain], gain[0]) == (
        f"best: bs: --backend-sampling; one run per trial: {SPREAD_UNKNOWN}")
    overlapping = repeats_of("bs", [1100], ["--backend-sampling"], half=80)  # 1,020-1,180: within the line's
    assert best_trial([*profile, *overlapping]).name == "profile"
    # three runs of the trial, one of the line: still judged by the runs' own intervals, and the line names the
    # trial whose spread is unknown
    three = repeats_of("bs", [1100, 1090, 1110], ["--backend-sampling"])
    assert best_trial([*profile, *three]).name == "bs"
    assert kept_sentence([*profile, *three], best_trial([*profile, *three])).endswith(
        f"; one run of profile: {SPREAD_UNKNOWN}")


def test_a_log_from_before_repeats_reads_as_one_run_of_each_trial(tmp_path) -> None:
    old = {"name": "profile", "overrides": [], "run_path": "/gone/20261203T000000Z-x-0000", "status": "complete",
           "started_at": "2026-12-03T00:00:00+00:00", "max_users": 64, "aggregate_tok_s_at_max_users": 2307.6,
           "one_user_server_tok_s": 738.1, "bench_tg": None, "replicas": 1}
    (tmp_path / "autotune.jsonl").write_text(json.dumps(old) + "\n")
    (trial_read,) = read_trials(tmp_path / "autotune.jsonl")
    assert (trial_read.repeat, trial_read.repeats, trial_read.series) == (1, 1, None)
    assert best_trial([trial_read]) is trial_read
    assert "between" not in autotune_table([trial_read], trial_read)


def test_runs_go_in_rounds_replica_arms_after_and_a_resumed_tuning_runs_only_the_missing_pairs(
        tmp_path, monkeypatch) -> None:
    ran: list[tuple[str, int, int, str]] = []

    def local_rig(options: LocalRigOptions):
        repeat = options.repeat
        ran.append((repeat.arm, repeat.index, repeat.order, repeat.series))
        assert options.load_value("repeats") == 1  # each run is one repeat of the tuning's series
        raise LlamaCppError("llama-server exited with code 1 during start-up")

    monkeypatch.setattr(autotune, "run_local_rig", local_rig)
    trials = {"a": [], "b": ["-ub", "64"]}
    base = LocalRigOptions(load={"repeats": 3})  # the tuning's repeats are its own, not the load's
    run_autotune(base, trials, tmp_path, arms=[ReplicaArm(count=2)], repeats=2)
    assert [(arm, index, order) for arm, index, order, _ in ran] == [
        ("a", 1, 0), ("b", 1, 1), ("a", 2, 2), ("b", 2, 3),
        ("profile@2-replicas", 1, 4), ("profile@2-replicas", 2, 5)]  # no flags completed: the profile's line
    (series,) = {each[3] for each in ran}
    # an interrupted tuning of two repeats, made three, resumed: the complete pairs are kept
    log = tmp_path / "resumed" / "autotune.jsonl"
    log.parent.mkdir()
    kept = [*repeats_of("a", [100.0, 101.0], series="earlier"), *repeats_of("b", [90.0], ["-ub", "64"],
                                                                            series="earlier")]
    log.write_text("".join(run.model_dump_json() + "\n" for run in kept))
    ran.clear()
    results = run_autotune(base, trials, log.parent, resume=True, repeats=3)
    assert [(arm, index, order, series) for arm, index, order, series in ran] == [
        ("b", 2, 3, "earlier"), ("a", 3, 4, "earlier"), ("b", 3, 5, "earlier")]
    assert [(r.name, r.repeat, r.status) for r in results] == [
        ("a", 1, "complete"), ("b", 1, "complete"), ("a", 2, "complete"), ("b", 2, "failed"), ("a", 3, "failed"),
        ("b", 3, "failed")]
    assert results[:3] == [kept[0], kept[2], kept[1]]
