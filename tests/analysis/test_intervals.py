"""Intervals: hand-computed values, and intervals that hold them, small and large samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import intervals


def test_quantile_uses_linear_interpolation_between_order_statistics():
    # sorted 1,2,3,4: p50 at rank 1.5 -> 2.5; p90 at rank 2.7 -> 3 + 0.7 * (4 - 3) = 3.7
    assert intervals.quantile([4, 1, 3, 2], 0.5).value == pytest.approx(2.5)
    assert intervals.quantile([4, 1, 3, 2], 0.9).value == pytest.approx(3.7)
    assert intervals.quantile([4, 1, 3, 2], 0.99).value == pytest.approx(3.97)


def test_small_sample_median_gets_a_bootstrap_interval_around_it():
    estimate = intervals.median(np.arange(1, 102, dtype=float))
    assert estimate.value == 51
    assert estimate.method == "bootstrap"
    assert estimate.n == 101
    assert estimate.low < 51 < estimate.high
    # uniform 1..101: standard error of the median = 101 / (2 * sqrt(101)) = 5.0, so about -+10
    assert 36 < estimate.low < 46 and 56 < estimate.high < 66


def test_large_sample_median_uses_order_statistics():
    values = np.arange(10_001, dtype=float)  # median 5000; 95% ranks about 5000 -+ 98
    estimate = intervals.median(values)
    assert estimate.method == "order statistics"
    assert estimate.value == 5000
    assert 4895 <= estimate.low <= 4905 and 5095 <= estimate.high <= 5105


def test_nan_values_are_left_out_and_counted_out_of_n():
    estimate = intervals.mean([1.0, float("nan"), 3.0, 5.0])
    assert estimate.value == 3.0 and estimate.n == 3


def test_empty_and_tiny_samples_say_so_instead_of_inventing_a_figure():
    assert intervals.median([]).value is None
    assert intervals.median([]).format() == "- (n=0)"
    two = intervals.median([1.0, 2.0])
    assert two.value == 1.5 and two.low is None and two.format() == "1.5 n=2"


def test_identical_values_give_a_zero_width_interval():
    estimate = intervals.median([7.0] * 20)
    assert (estimate.low, estimate.value, estimate.high) == (7.0, 7.0, 7.0)


def test_ratio_of_sums_is_not_the_mean_of_ratios():
    # accepted/drafted per request: 1/2 and 9/10 -> ratio of sums 10/12, mean of ratios 0.7
    estimate = intervals.ratio_of_sums([1, 9, 5], [2, 10, 6])
    assert estimate.value == pytest.approx(15 / 18)


def test_large_ratio_of_sums_uses_the_delta_method_and_covers_the_true_ratio():
    rng = np.random.default_rng(1)
    drafted = rng.integers(50, 150, 20_000).astype(float)
    accepted = rng.binomial(drafted.astype(int), 0.6).astype(float)
    estimate = intervals.ratio_of_sums(accepted, drafted)
    assert estimate.method == "delta method"
    assert estimate.low < 0.6 < estimate.high
    assert estimate.high - estimate.low < 0.01


def test_geometric_mean_of_category_means_by_hand():
    # means: chat (1+3)/2 = 2, code 8 -> sqrt(2 * 8) = 4
    estimate = intervals.geomean_of_means([[1.0, 3.0], [8.0, 8.0]])
    assert estimate.value == pytest.approx(4.0)
    assert estimate.n == 4
    assert estimate.low <= 4.0 <= estimate.high


def test_geometric_mean_large_sample_delta_interval_covers_the_value():
    rng = np.random.default_rng(2)
    groups = [rng.normal(100, 5, 3000), rng.normal(25, 2, 3000)]
    estimate = intervals.geomean_of_means(groups)
    assert estimate.method == "delta method"
    assert estimate.value == pytest.approx(50, rel=0.01)
    assert estimate.low < estimate.value < estimate.high


def test_ratio_of_geomeans_pairs_categories():
    # B/A per category: 20/10 = 2 and 8/1 = 8 -> geometric mean 4
    estimate = intervals.ratio_of_geomeans([[10.0, 10.0], [1.0, 1.0]], [[20.0, 20.0], [8.0, 8.0]])
    assert estimate.value == pytest.approx(4.0)


def test_ratio_of_estimates_combines_log_widths():
    a = intervals.Estimate(10.0, 9.0, 11.0, 5, "x")
    b = intervals.Estimate(20.0, 18.0, 22.0, 5, "x")
    ratio = intervals.ratio_of_estimates(a, b)
    half = math.sqrt(2) * (math.log(11) - math.log(9)) / 2
    assert ratio.value == 2.0
    assert ratio.low == pytest.approx(2 * math.exp(-half))
    assert ratio.high == pytest.approx(2 * math.exp(half))
