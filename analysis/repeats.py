"""Runs of the same thing, repeated: how far they land apart, and comparisons judged by that spread.

Why this and not the intervals inside one run: a run's sub-window and request intervals say how well one
run pinned its own figure, not where a second run of the same arm would land. A busy machine, a server's warm
state, clocks and other work move a run as a whole, so two runs of one profile can sit 30 % apart with
narrow intervals each. A difference between arms is therefore judged against the spread between repeats of
each arm (``--repeats N``; ``core.repeat_order`` makes them A B A B):

- an arm's figure at a step is the mean of its repeats' figures, with a Student-t interval over them
  (n = the repeats, every source of run-to-run noise inside it);
- B against A is the ratio of their figures; with the arms interleaved in one series, repeat i of A and repeat
  i of B ran side by side, so the ratio's interval is the paired t interval of log(B_i / A_i) (drift that moves
  both cancels); otherwise (two series, or unequal repeats) Welch's t on the log figures;
- a difference is *beyond noise* only when that interval leaves out 1; with one repeat on either side the
  spread between runs is unknown, and no verdict is given (the ratio stands alone, saying how to measure it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from analysis.intervals import CONFIDENCE, Estimate, bounded
from analysis.report_model import RunSection
from analysis.run_name import model_name, short_names
from analysis.step import StepFigures

Verdict = Literal["beyond noise", "within noise", "unknown"]
StepKey = tuple[float, int]  # (users or offered rate, context tokens): how steps are paired
MEASURE_IT = "--repeats 3 measures it (or rigbench selftest --aa for this machine's own spread)"
ONE_RUN = "one run each: the spread between runs is unknown"


@dataclass(frozen=True)
class RepeatedFigure:
    """A figure read off one step of each repeat: its name, which way is better, how to read it."""

    name: str
    higher_is_better: bool
    read: Callable[[StepFigures], Estimate | None]
    unit: str = ""
    digits: int = 1


AGGREGATE = RepeatedFigure("aggregate tok/s", True, lambda step: step.aggregate_tok_s)
PER_USER = RepeatedFigure("per-user tok/s", True, lambda step: step.per_user_tok_s)
TTFT_P90 = RepeatedFigure("TTFT p90", False, lambda step: step.ttft_s.get("p90"), " s", 3)
FIGURES = (AGGREGATE, PER_USER, TTFT_P90)


@dataclass(frozen=True)
class ArmRuns:
    """One arm's runs in repeat order: a series' runs of one arm, or a run made alone (one repeat)."""

    label: str
    series: str | None
    sections: tuple[RunSection, ...]
    indexes: tuple[int, ...]  # each run's repeat index (1 for a run made alone)

    @property
    def repeats(self) -> int:
        """Runs of the arm: a repeat resumed into a linked run (its remaining steps) is still one."""
        return len(set(self.indexes))

    def values(self, figure: RepeatedFigure, key: StepKey) -> dict[int, float]:
        """The figure at the step of each repeat that measured it, by repeat index (absent figures left out)."""
        found = {}
        for index, section in zip(self.indexes, self.sections, strict=True):
            step = step_at(section, key)
            estimate = figure.read(step) if step is not None else None
            if estimate is not None and estimate.value is not None and math.isfinite(estimate.value):
                found[index] = float(estimate.value)
        return found

    def step_keys(self) -> list[StepKey]:
        """The steps any repeat measured, in the first repeat's order (then any others)."""
        keys: list[StepKey] = []
        for section in self.sections:
            keys += [key for key in (step_key(step) for step in section.figures.steps) if key not in keys]
        return keys

    def step_label(self, key: StepKey) -> str:
        for section in self.sections:
            step = step_at(section, key)
            if step is not None:
                return step.load_label + (f", context {step.context_tokens}" if step.context_tokens else "")
        return str(key[0])


def step_key(step: StepFigures) -> StepKey:
    return step.load, step.context_tokens


def step_at(section: RunSection, key: StepKey) -> StepFigures | None:
    return next((step for step in section.figures.steps if step_key(step) == key), None)


def arms_of(sections: Sequence[RunSection]) -> list[ArmRuns]:
    """The report's runs as arms, in the order their first run is given: runs of one series and arm are one
    arm's repeats (ordered by repeat); any other run is an arm of one repeat, named as the report names it."""
    _, names = short_names([section.figures.run.manifest for section in sections])
    grouped: dict[tuple, list[tuple[int, RunSection]]] = {}
    labels: dict[tuple, str] = {}
    report_names: dict[tuple, str] = {}  # the report's name of the arm's first run: what tells two arms apart
    for name, section in zip(names, sections, strict=True):
        manifest = section.figures.run.manifest
        repeat = manifest.repeat
        key = (repeat.series, repeat.arm) if repeat is not None else ("", manifest.run_id)
        grouped.setdefault(key, []).append((repeat.index if repeat is not None else 1, section))
        labels.setdefault(key, repeat.arm if repeat is not None and repeat.arm != "default"
                          else _series_label(manifest) if repeat is not None else name)
        report_names.setdefault(key, name)
    taken = [label for label in labels.values()]
    for key, label in labels.items():  # two series' arms of one name (two rigs' default arms): named apart
        if taken.count(label) > 1:
            labels[key] = f"{label} ({report_names[key]})" if report_names[key] != label else f"{label} ({key[0]})"
    arms = []
    for key, members in grouped.items():
        members.sort(key=lambda member: member[0])
        arms.append(ArmRuns(labels[key], key[0] or None, tuple(section for _, section in members),
                            tuple(index for index, _ in members)))
    return arms


def _series_label(manifest) -> str:
    """A series' one unnamed arm: its profile, else its model (the run id says nothing of what ran)."""
    return manifest.profile if manifest.profile not in ("", "none") else model_name(manifest)


def repeated(arms: Sequence[ArmRuns]) -> bool:
    """Whether any arm ran more than once: the report then has figures between runs to give."""
    return any(arm.repeats > 1 for arm in arms)


def between_runs(values: Sequence[float], floor: float | None = 0.0) -> Estimate:
    """The mean of the repeats' figures with its Student-t 95% interval over them (n = repeats); one repeat has
    no interval: the spread between runs is unknown."""
    x = np.asarray([value for value in values if math.isfinite(value)], dtype=float)
    n = len(x)
    if n == 0:
        return Estimate(None, None, None, 0, "no repeat measured it")
    value = float(x.mean())
    if n == 1:
        return Estimate(value, None, None, 1, "one run: the spread between runs is unknown")
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
    return bounded(Estimate(value, value - half, value + half, n, f"t over {n} runs"), floor)


def spread(values: Sequence[float]) -> float | None:
    """The coefficient of variation between repeats (sd / mean): how far one run lands from another, as a share;
    None below two repeats or at a mean of 0."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or x.mean() == 0:
        return None
    return float(x.std(ddof=1) / abs(x.mean()))


@dataclass(frozen=True)
class ArmRatio:
    """B against A at one step for one figure, judged by the spread between runs."""

    step: str
    figure: RepeatedFigure
    ratio: Estimate  # B / A
    verdict: Verdict
    paired: bool

    @property
    def better(self) -> bool | None:
        """Whether B is better than A beyond noise (None: not beyond noise, or unknown)."""
        if self.verdict != "beyond noise" or self.ratio.value is None:
            return None
        return (self.ratio.value > 1) == self.figure.higher_is_better


def ratio_between_runs(a: dict[int, float], b: dict[int, float], paired: bool) -> tuple[Estimate, Verdict, bool]:
    """B / A from each arm's repeats (by repeat index), its 95% interval and verdict, and whether it was paired.
    Paired: the repeats both arms have, side by side in one series (t on the log ratios); else Welch's t on
    the log figures. Figures of 0 or below cannot be logged: the ratio of means is given without a verdict."""
    a_values, b_values = list(a.values()), list(b.values())
    n = len(a_values) + len(b_values)
    if not a_values or not b_values:
        return Estimate(None, None, None, n, "a side has no figure"), "unknown", False
    if min(a_values + b_values) <= 0:
        mean_a = float(np.mean(a_values))
        value = float(np.mean(b_values)) / mean_a if mean_a else None
        return Estimate(value, None, None, n, "a figure of 0: no interval"), "unknown", False
    shared = sorted(set(a) & set(b))
    if paired and len(shared) >= 2:
        logs = np.log([b[index] / a[index] for index in shared])
        centre, half = _t_half(logs)
        estimate = Estimate(math.exp(centre), math.exp(centre - half), math.exp(centre + half), len(shared),
                            f"paired t over {len(shared)} rounds")
        return estimate, _verdict(estimate), True
    log_a, log_b = np.log(a_values), np.log(b_values)
    value = math.exp(float(log_b.mean() - log_a.mean()))
    if len(log_a) < 2 or len(log_b) < 2:
        which = "each" if len(log_a) < 2 and len(log_b) < 2 else "of A" if len(log_a) < 2 else "of B"
        method = ONE_RUN if which == "each" else f"one run {which}: the spread between runs is unknown"
        return Estimate(value, None, None, n, method), "unknown", False
    var_a, var_b = float(log_a.var(ddof=1)) / len(log_a), float(log_b.var(ddof=1)) / len(log_b)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        estimate = Estimate(value, value, value, n, "Welch t (no spread)")
        return estimate, _verdict(estimate), False
    freedom = (var_a + var_b) ** 2 / (var_a**2 / (len(log_a) - 1) + var_b**2 / (len(log_b) - 1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, freedom)) * se
    centre = math.log(value)
    estimate = Estimate(value, math.exp(centre - half), math.exp(centre + half), n,
                        f"Welch t over {len(log_a)} and {len(log_b)} runs")
    return estimate, _verdict(estimate), False


def _t_half(x: np.ndarray) -> tuple[float, float]:
    """Mean and Student-t 95% half-width of a sample of two or more."""
    n = len(x)
    return float(x.mean()), float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)


def _verdict(ratio: Estimate) -> Verdict:
    if ratio.low is None or ratio.high is None:
        return "unknown"
    return "beyond noise" if ratio.low > 1 or ratio.high < 1 else "within noise"


def paired_arms(a: ArmRuns, b: ArmRuns) -> bool:
    """Repeat i of each ran side by side: both arms of one series."""
    return a.series is not None and a.series == b.series


def compare_arms(a: ArmRuns, b: ArmRuns, figures: Sequence[RepeatedFigure] = FIGURES) -> list[ArmRatio]:
    """B against A at every step both measured, for each figure."""
    rows = []
    for key in a.step_keys():
        if key not in b.step_keys():
            continue
        for figure in figures:
            ratio, verdict, paired = ratio_between_runs(a.values(figure, key), b.values(figure, key),
                                                        paired_arms(a, b))
            rows.append(ArmRatio(a.step_label(key), figure, ratio, verdict, paired))
    return rows


def split_rounds(arm: ArmRuns) -> tuple[ArmRuns, ArmRuns]:
    """An A/A check from one arm's runs: odd runs as A, even runs as B, run 2k-1 paired with run 2k (side by side
    in time, as a series' rounds). Identical arms: a verdict of beyond noise here is a false alarm."""
    odd = tuple(range(0, arm.repeats - arm.repeats % 2, 2))
    rounds = tuple(range(1, len(odd) + 1))
    a = ArmRuns(f"{arm.label} (odd runs)", arm.series, tuple(arm.sections[i] for i in odd), rounds)
    b = ArmRuns(f"{arm.label} (even runs)", arm.series, tuple(arm.sections[i + 1] for i in odd), rounds)
    return a, b
