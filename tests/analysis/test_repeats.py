"""Comparisons judged by the spread between runs: calibrated on seeded trials, and the interleaving order."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.repeats import between_runs, ratio_between_runs, spread
from core.repeat_order import interleaved

TRIALS = 2000


def seeded_rounds(rng: np.random.Generator, rounds: int, gain: float, run_noise: float, drift: float
                  ) -> tuple[dict[int, float], dict[int, float]]:
    """One trial: each round's runs of A and B, side by side in time. Every run lands apart by its own noise
    (log-normal, ``run_noise``), and a machine that drifts round to round (``drift``) moves both arms of a round
    alike; B is A times ``gain``."""
    level = 100.0 * np.exp(np.cumsum(rng.normal(0.0, drift, rounds)))
    a = level * np.exp(rng.normal(0.0, run_noise, rounds))
    b = gain * level * np.exp(rng.normal(0.0, run_noise, rounds))
    return ({i + 1: float(v) for i, v in enumerate(a)}, {i + 1: float(v) for i, v in enumerate(b)})


def called_different(gain: float, rounds: int, paired: bool, seed: int, run_noise: float = 0.02,
                     drift: float = 0.03) -> float:
    """The share of seeded trials whose B/A was called beyond noise at the 95% level."""
    rng = np.random.default_rng(seed)
    called = 0
    for _ in range(TRIALS):
        a, b = seeded_rounds(rng, rounds, gain, run_noise, drift)
        _, verdict, _ = ratio_between_runs(a, b, paired)
        called += verdict == "beyond noise"
    return called / TRIALS


def upper_share(expected: float, trials: int) -> float:
    """The most false alarms a calibrated 95% test shows in ``trials`` trials, 999 times in 1000."""
    return float(stats.binom.ppf(0.999, trials, expected)) / trials


@pytest.mark.parametrize(("rounds", "paired"), [(3, True), (5, True), (3, False), (5, False)])
def test_identical_arms_are_called_different_no_more_often_than_the_level_allows(rounds: int, paired: bool) -> None:
    share = called_different(1.0, rounds, paired, seed=rounds * 10 + paired)
    assert share <= upper_share(0.05, TRIALS), f"{share:.1%} of A/A trials called different"


def test_a_ten_percent_gain_is_found_in_three_interleaved_rounds() -> None:
    # the paired rounds cancel the machine's drift, which Welch's t over the same runs cannot
    paired = called_different(1.10, 3, True, seed=7)
    unpaired = called_different(1.10, 3, False, seed=7)
    assert paired >= 0.8, f"found in {paired:.0%} of trials"
    assert paired > unpaired


def test_one_run_a_side_gives_a_ratio_and_no_verdict() -> None:
    ratio, verdict, paired = ratio_between_runs({1: 100.0}, {1: 131.2}, True)
    assert verdict == "unknown" and not paired
    assert ratio.value == pytest.approx(1.312) and ratio.low is None and ratio.high is None
    assert "spread between runs is unknown" in ratio.method
    ratio, verdict, _ = ratio_between_runs({1: 100.0, 2: 104.0}, {1: 131.2}, True)
    assert verdict == "unknown" and ratio.method.startswith("one run of B")


def test_a_figure_of_zero_gets_no_verdict_rather_than_a_log_of_zero() -> None:
    ratio, verdict, _ = ratio_between_runs({1: 0.0, 2: 0.0}, {1: 0.1, 2: 0.2}, True)
    assert verdict == "unknown" and ratio.value is None and ratio.low is None


def test_between_runs_is_the_t_interval_of_the_runs_and_spread_their_variation() -> None:
    values = [100.0, 104.0, 98.0]
    estimate = between_runs(values)
    half = stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3)
    assert estimate.value == pytest.approx(100.666, abs=1e-3)
    assert (estimate.low, estimate.high) == pytest.approx((estimate.value - half, estimate.value + half))
    assert estimate.n == 3 and estimate.method == "t over 3 runs"
    assert spread(values) == pytest.approx(np.std(values, ddof=1) / np.mean(values))
    one = between_runs([100.0])
    assert one.low is None and "unknown" in one.method and spread([100.0]) is None


def test_arms_interleave_round_by_round() -> None:
    planned = interleaved(["server a", "server b", "server c"], ["a", "b", "c"], 2, "s1")
    assert [(p.repeat.arm, p.repeat.index) for p in planned] == [
        ("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("c", 2)]
    assert [p.repeat.order for p in planned] == list(range(6))
    assert [p.arm for p in planned[:3]] == ["server a", "server b", "server c"]
    assert {(p.repeat.series, p.repeat.of) for p in planned} == {("s1", 2)}
