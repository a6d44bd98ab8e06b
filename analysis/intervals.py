"""95% intervals for the figures users buy on: medians, percentiles, means, ratios.

Every figure in a report is an :class:`Estimate`: the value, its 95% interval, the number of
observations behind it and the method. Small samples use ``scipy.stats.bootstrap``
(percentile method, fixed seed so a re-rendered report is identical). Past
``BOOTSTRAP_MAX_N`` observations a bootstrap costs seconds per figure while the large-sample
answers are already exact enough, so: percentiles get the distribution-free order-statistic
interval (binomial ranks), means the normal interval, ratios and geometric means the delta
method. The method used is written beside the figure.

An interval never reaches past what the figure can be: a normal or delta-method interval is
symmetric and, on a skewed sample, can cross 0, so an interval of a figure that cannot be negative
(a mean or a ratio of sums of values none of which is negative: a rate, a latency, a count) is cut
at 0, and a share (a ratio of sums each part of which is part of its whole: drafts accepted of drafted) at 1
(:func:`bounded`; the method then says so). Bootstrap percentile, order-statistic, log-space and
Clopper-Pearson intervals lie inside what is possible by construction.

A figure is written (:meth:`Estimate.format`) with the decimals it needs (:func:`decimals`): at least
the table's, more where fewer would round it away (0.245 ms is not "0 [0, 0]").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_MAX_N = 1500
N_RESAMPLES = 999
SEED = 20260
_Z = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))
MAX_DECIMALS = 9
VALUE_DIGITS = 4  # significant digits of a value beyond which its interval's width adds no decimals


def _place(magnitude: float, significant: int) -> int:
    """The decimals that show ``significant`` significant digits of a nonzero ``magnitude``."""
    return significant - 1 - math.floor(math.log10(abs(magnitude)))


def decimals(value: float | None, low: float | None = None, high: float | None = None, digits: int = 1) -> int:
    """How many decimals a figure is written with: at least ``digits`` (the table's), and more where fewer would
    round the figure away: one significant digit of its interval's width, so the interval's ends stay apart (up
    to ``VALUE_DIGITS`` significant digits of the value: an interval narrower than that is written as one point),
    and of the value itself two significant digits where it has no interval (or a zero-width one), else one.
    At most MAX_DECIMALS."""
    needed = [digits]
    width = high - low if low is not None and high is not None else 0.0
    known = value is not None and value != 0 and math.isfinite(value)
    if known and width <= abs(value) * 1e-9:  # equal ends but for float rounding: a zero-width interval
        width = 0.0
    if width > 0 and math.isfinite(width):
        needed.append(min(_place(width, 1), _place(value, VALUE_DIGITS)) if known else _place(width, 1))
    if known:
        needed.append(_place(value, 1 if width > 0 else 2))
    return max(0, min(max(needed), MAX_DECIMALS))


def number(value: float, digits: int = 1, grouped: bool = False) -> str:
    """A plain figure (no interval) with the decimals it needs: ``digits``, more where fewer would round it away;
    ``grouped``: thousands separated by commas."""
    return f"{value:{',' if grouped else ''}.{decimals(value, digits=digits)}f}"


@dataclass(frozen=True)
class Estimate:
    """A figure with its spread: ``value [low, high] n=...`` (``None`` when n is too small)."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    method: str

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self, digits: int = 1) -> str:
        """``value [low, high] n=...`` with at least ``digits`` decimals, more where the figure needs them
        (:func:`decimals`); an interval open at one end (a cost whose throughput interval reaches 0) shows ∞."""
        if self.value is None:
            return f"- (n={self.n})"
        places = decimals(self.value, self.low, self.high, digits)
        text = f"{self.value:.{places}f}"
        if self.low is not None and self.high is not None:
            text += f" [{self.low:.{places}f}, {self.high:.{places}f}]"
        elif self.low is not None:
            text += f" [{self.low:.{places}f}, ∞]"
        return text + f" n={self.n}"

    def short(self, digits: int = 1) -> str:
        """``value [low, high]`` without n, as tables and sentences write a figure whose n is said elsewhere."""
        return self.format(digits).rsplit(" n=", 1)[0]


def empty(n: int = 0, method: str = "none") -> Estimate:
    """No figure: nothing stands behind one (``method`` may say why)."""
    return Estimate(None, None, None, n, method)


def bounded(estimate: Estimate, floor: float | None = 0.0, ceiling: float | None = None) -> Estimate:
    """The estimate with its interval cut to ``[floor, ceiling]``, what the figure can be (the method says so where
    it was cut); the value is never moved."""
    low, high, cut = estimate.low, estimate.high, []
    if floor is not None and low is not None and low < floor:
        low, cut = floor, [*cut, f"{floor:g}"]
    if ceiling is not None and high is not None and high > ceiling:
        high, cut = ceiling, [*cut, f"{ceiling:g}"]
    if not cut:
        return estimate
    return Estimate(estimate.value, low, high, estimate.n, f"{estimate.method}, cut at {' and '.join(cut)}")


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    return array[np.isfinite(array)]


def _bootstrap(samples: tuple[np.ndarray, ...], statistic: Callable, paired: bool = False) -> tuple[float, float]:
    """Percentile bootstrap interval; a degenerate sample (all equal) gives a zero-width one."""
    result = stats.bootstrap(
        samples,
        statistic,
        n_resamples=N_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        paired=paired,
        random_state=np.random.default_rng(SEED),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if math.isnan(low) or math.isnan(high):
        value = float(statistic(*samples, axis=-1))
        return value, value
    return low, high


def _order_statistics(ordered: np.ndarray, q: float) -> Estimate:
    """The q-quantile of a large sorted sample with its distribution-free interval (binomial ranks)."""
    n = len(ordered)
    value = float(np.quantile(ordered, q))  # the same order statistics as of the unsorted sample
    alpha = (1 - CONFIDENCE) / 2
    low_rank = int(stats.binom.ppf(alpha, n, q))
    high_rank = int(stats.binom.ppf(1 - alpha, n, q))
    low_rank, high_rank = max(low_rank - 1, 0), min(high_rank, n - 1)
    return Estimate(value, float(ordered[low_rank]), float(ordered[high_rank]), n, "order statistics")


def _small_quantile(x: np.ndarray, q: float) -> Estimate:
    n = len(x)
    if n == 0:
        return empty()
    value = float(np.quantile(x, q))
    if n < 3:
        return Estimate(value, None, None, n, "too few for an interval")
    low, high = _bootstrap((x,), lambda s, axis: np.quantile(s, q, axis=axis))
    return Estimate(value, low, high, n, "bootstrap")


def quantiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[Estimate]:
    """Several quantiles of one sample (as :func:`quantile` each); a large sample is sorted once for all."""
    x = _finite(values)
    if len(x) <= BOOTSTRAP_MAX_N:
        return [_small_quantile(x, q) for q in qs]
    ordered = np.sort(x)
    return [_order_statistics(ordered, q) for q in qs]


def quantile(values: Sequence[float] | np.ndarray, q: float) -> Estimate:
    """The q-quantile (numpy's default linear interpolation, Hyndman-Fan type 7) with its interval."""
    return quantiles(values, (q,))[0]


def median(values: Sequence[float] | np.ndarray) -> Estimate:
    return quantile(values, 0.5)


def mean(values: Sequence[float] | np.ndarray) -> Estimate:
    x = _finite(values)
    n = len(x)
    if n == 0:
        return empty()
    value = float(np.mean(x))
    if n < 3:
        return Estimate(value, None, None, n, "too few for an interval")
    if n <= BOOTSTRAP_MAX_N:
        low, high = _bootstrap((x,), lambda s, axis: np.mean(s, axis=axis))
        return Estimate(value, low, high, n, "bootstrap")
    half = _Z * float(np.std(x, ddof=1)) / math.sqrt(n)
    floor = 0.0 if x.min() >= 0 else None  # the mean of values none of which is negative is not negative
    return bounded(Estimate(value, value - half, value + half, n, "normal"), floor)


def ratio_of_sums(numerator: Sequence[float] | np.ndarray, denominator: Sequence[float] | np.ndarray,
                  share: bool = False) -> Estimate:
    """sum(a) / sum(b) over paired observations, e.g. drafted tokens accepted / drafted; ``share``: each a is a part
    of its b (accepted of drafted), so the ratio is at most 1 and its interval is cut there."""
    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = len(a)
    if n == 0 or b.sum() == 0:
        return empty(n)
    value = float(a.sum() / b.sum())
    if n < 3:
        return Estimate(value, None, None, n, "too few for an interval")
    if n <= BOOTSTRAP_MAX_N:
        low, high = _bootstrap((a, b), lambda x, y, axis: x.sum(axis=axis) / y.sum(axis=axis), paired=True)
        return Estimate(value, low, high, n, "bootstrap")
    residual = a - value * b
    half = _Z * float(np.std(residual, ddof=1)) / (math.sqrt(n) * float(np.mean(b)))
    # parts none of which is negative give a ratio that is not; a share is not above 1
    floor = 0.0 if a.min() >= 0 and b.min() >= 0 else None
    ceiling = 1.0 if share else None
    return bounded(Estimate(value, value - half, value + half, n, "delta method"), floor, ceiling)


def _log_geomean_of_means(groups: Sequence[np.ndarray]) -> tuple[float, float]:
    """log of the geometric mean of group means, and its delta-method variance."""
    logs, variance = [], 0.0
    for group in groups:
        m = float(np.mean(group))
        logs.append(math.log(m))
        if len(group) > 1:
            variance += float(np.var(group, ddof=1)) / (len(group) * m * m)
    k = len(groups)
    return sum(logs) / k, variance / (k * k)


def geomean_of_means(groups: Sequence[Sequence[float] | np.ndarray]) -> Estimate:
    """The seeds' figure: the geometric mean over prompt categories of each category's mean.

    Categories are resampled independently (stratified bootstrap), so each keeps its own size.
    """
    arrays = [g for g in (_finite(group) for group in groups) if len(g) > 0 and np.all(g > 0)]
    n = sum(len(g) for g in arrays)
    if not arrays:
        return empty(n)
    log_value, variance = _log_geomean_of_means(arrays)
    value = math.exp(log_value)
    if min(len(g) for g in arrays) < 2:
        return Estimate(value, None, None, n, "too few for an interval")
    if n <= BOOTSTRAP_MAX_N:

        def statistic(*samples: np.ndarray, axis: int) -> np.ndarray:
            logs = [np.log(np.mean(s, axis=axis)) for s in samples]
            return np.exp(np.mean(logs, axis=0))

        low, high = _bootstrap(tuple(arrays), statistic)
        return Estimate(value, low, high, n, "bootstrap (stratified)")
    half = _Z * math.sqrt(variance)
    return Estimate(value, math.exp(log_value - half), math.exp(log_value + half), n, "delta method")


def ratio_of_geomeans(groups_a: Sequence[np.ndarray], groups_b: Sequence[np.ndarray]) -> Estimate:
    """Geometric mean over categories of (mean of B / mean of A), categories paired by name
    by the caller. Resamples each arm and category independently."""
    pairs = [
        (a, b)
        for a, b in ((_finite(x), _finite(y)) for x, y in zip(groups_a, groups_b, strict=True))
        if len(a) > 0 and len(b) > 0 and np.all(a > 0) and np.all(b > 0)
    ]
    n = sum(len(a) + len(b) for a, b in pairs)
    if not pairs:
        return empty(n)
    log_a, var_a = _log_geomean_of_means([a for a, _ in pairs])
    log_b, var_b = _log_geomean_of_means([b for _, b in pairs])
    value = math.exp(log_b - log_a)
    if min(min(len(a), len(b)) for a, b in pairs) < 2:
        return Estimate(value, None, None, n, "too few for an interval")
    if n <= BOOTSTRAP_MAX_N:
        k = len(pairs)

        def statistic(*samples: np.ndarray, axis: int) -> np.ndarray:
            logs = [np.log(np.mean(s, axis=axis)) for s in samples]
            return np.exp(np.mean(logs[k:], axis=0) - np.mean(logs[:k], axis=0))

        samples = tuple(a for a, _ in pairs) + tuple(b for _, b in pairs)
        low, high = _bootstrap(samples, statistic)
        return Estimate(value, low, high, n, "bootstrap (stratified)")
    half = _Z * math.sqrt(var_a + var_b)
    return Estimate(value, math.exp(log_b - log_a - half), math.exp(log_b - log_a + half), n, "delta method")


def ratio_of_estimates(a: Estimate, b: Estimate) -> Estimate:
    """b / a for two independent figures; the interval combines their relative widths in
    log space (a normal approximation), and is absent when either interval is."""
    if a.value is None or b.value is None or a.value <= 0 or b.value <= 0:
        return empty(a.n + b.n)
    value = b.value / a.value
    if None in (a.low, a.high, b.low, b.high) or min(a.low, b.low) <= 0:  # type: ignore[type-var]
        return Estimate(value, None, None, a.n + b.n, "no interval")
    width_a = (math.log(a.high) - math.log(a.low)) / 2  # type: ignore[arg-type]
    width_b = (math.log(b.high) - math.log(b.low)) / 2  # type: ignore[arg-type]
    half = math.sqrt(width_a**2 + width_b**2)
    return Estimate(value, value * math.exp(-half), value * math.exp(half), a.n + b.n, "log-normal combination")


def proportion(successes: int, trials: int) -> Estimate:
    """successes / trials (e.g. failed / measured requests) with the exact Clopper-Pearson
    interval, which stays inside [0, 1] and is defined at 0 and at every request."""
    if trials <= 0:
        return empty()
    interval = stats.binomtest(successes, trials).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    return Estimate(successes / trials, float(interval.low), float(interval.high), trials, "Clopper-Pearson")
