"""A run judged against a baseline run of the same workload, figure by figure: the CI gate.

Steps are paired as ``analysis.compare`` pairs them, by users (by offered rate between two
open-loop runs) and context tokens. At each pair these figures are checked:

================  ======  ============================================================
figure            better  what it is
================  ======  ============================================================
aggregate tok/s   higher  output tok/s of the measured window (sub-window interval)
per-user tok/s    higher  median per-user decode tok/s (client; server timings when the
                          client has none), the figure ``rigbench plan`` reads
TTFT p90          lower   seconds from a request's origin to its first token
error rate        lower   failed / measured requests (exact binomial interval)
$/Mtok <price>    lower   at each price both runs were costed at
================  ======  ============================================================

A figure *regresses* when it is worse than the baseline's by more than ``max_drop`` (a
fraction of the baseline's value) and the two 95% intervals do not overlap, so that a change
inside either run's noise does not fail a build. Where either figure has no interval (fewer
than three requests) the change alone decides, and the row says so. Absolute limits judge the
run's own value, whatever the baseline, at every step of the run: ``min_tok_s`` the per-user
tok/s, ``max_ttft_p90_s`` the TTFT p90.

Given several runs of each side (each arm's ``--repeats``), a figure is the mean over its runs with its
interval between them (``analysis.repeats``), and a regression is a change past ``max_drop`` that is also
beyond the spread between runs: the ratio's interval between runs (paired t over the rounds of one series,
else Welch's t on the log figures) leaves out 1. With one run on a side that spread is unknown: the change is
judged on the runs' own intervals as above, and the gate says so and how to measure it.

Runs of different workloads (model file, prompt set, reply length, sampling temperature,
arrival process) measure different things; they are refused unless asked for, and the refusal
names what differs. A closed-loop run and an open-loop one are never paired.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from analysis import intervals
from analysis.intervals import Estimate
from analysis.repeats import between_runs, ratio_between_runs
from analysis.report_model import RunSection
from analysis.step import StepFigures
from analysis.summary import RunSummary, run_summary
from core.errors import AnalysisError
from core.rundir import RunManifest
from core.workload import describe_arrivals, describe_conversations, describe_lengths


@dataclass(frozen=True)
class Thresholds:
    max_drop: float = 0.05  # a fraction of the baseline's value
    min_tok_s: float | None = None
    max_ttft_p90_s: float | None = None


@dataclass(frozen=True)
class GatedRun:
    """A run as the gate reads it: what was measured (manifest) and its figures (as summary.json holds them);
    ``repeats``: the other runs of the same arm given with it (its ``--repeats``), judged together with it by the
    spread between them."""

    manifest: RunManifest
    summary: RunSummary
    repeats: tuple[GatedRun, ...] = ()

    @classmethod
    def from_section(cls, section: RunSection) -> GatedRun:
        return cls(section.figures.run.manifest, run_summary(section))

    @classmethod
    def from_sections(cls, sections: list[RunSection], what: str) -> GatedRun:
        """One arm's runs as one gated run (the first, with the others as its repeats); runs of different arms or
        workloads are refused, naming them (``what``: RUN or --baseline)."""
        runs = [cls.from_section(section) for section in sections]
        first = runs[0]
        for other in runs[1:]:
            differences = workload_differences(other.manifest, first.manifest)
            if differences:
                raise AnalysisError(f"{what}: runs {first.manifest.run_id} and {other.manifest.run_id} measure "
                                    f"different workloads ({'; '.join(differences)}); give one arm's repeats")
            if arm_key(other.manifest) != arm_key(first.manifest):
                raise AnalysisError(f"{what}: runs {first.manifest.run_id} and {other.manifest.run_id} are different "
                                    f"arms ({arm_key(first.manifest)}, {arm_key(other.manifest)}); give one arm's "
                                    "repeats")
        return cls(first.manifest, first.summary, tuple(runs[1:]))

    @property
    def runs(self) -> list[GatedRun]:
        return [self, *self.repeats]

    @property
    def label(self) -> str:
        return self.summary.label

    @property
    def open_loop(self) -> bool:
        return any(step.rate is not None for step in self.summary.steps)


@dataclass(frozen=True)
class Figure:
    """A checked figure: its name, which way is better, and how to read it off a step."""

    name: str
    higher_is_better: bool
    read: Callable[[GatedRun, int], Estimate | None]  # (run, position of the step) -> the figure
    unit: str = ""
    scale: float = 1.0
    digits: int = 1


@dataclass(frozen=True)
class Check:
    """One step and figure: the baseline's figure (None for a step the baseline lacks), the run's,
    and why it fails (empty when it passes)."""

    step: str
    figure: Figure
    baseline: Estimate | None
    run: Estimate
    failures: tuple[str, ...] = ()
    note: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def judged(self) -> bool:
        """Failed, or both figures are there (without a baseline step: the run's, against a limit)."""
        if self.failed:
            return True
        return self.run.value is not None and (self.baseline is None or self.baseline.value is not None)

    @property
    def change(self) -> float | None:
        """run / baseline - 1; infinite when the baseline is 0 and the run is not."""
        if self.baseline is None or self.baseline.value is None or self.run.value is None:
            return None
        if self.baseline.value == 0:
            return 0.0 if self.run.value == 0 else math.inf
        return self.run.value / self.baseline.value - 1


@dataclass
class GateResult:
    run: GatedRun
    baseline: GatedRun
    thresholds: Thresholds
    checks: list[Check]
    notes: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.failed]

    @property
    def passed(self) -> bool:
        return not self.failures


def error_rate(step: StepFigures) -> Estimate:
    return intervals.proportion(step.error_count, step.requests)


def per_step(read: Callable[[StepFigures], Estimate | None]) -> Callable[[GatedRun, int], Estimate | None]:
    return lambda run, position: read(run.summary.steps[position])


AGGREGATE = Figure("aggregate tok/s", True, per_step(lambda step: step.aggregate_tok_s))
PER_USER = Figure("per-user tok/s", True, per_step(lambda step: step.per_user_tok_s))
TTFT_P90 = Figure("TTFT p90", False, per_step(lambda step: step.ttft_s.get("p90")), " s", 1.0, 3)
ERROR_RATE = Figure("error rate", False, per_step(error_rate), "%", 100.0, 1)
J_PER_TOKEN = Figure("J per output token", False,
                     per_step(lambda step: step.energy.j_per_token if step.energy is not None else None), " J", 1.0, 4)


def sampled_energy(run: GatedRun) -> bool:
    return any(step.energy is not None and step.energy.j_per_token is not None for step in run.summary.steps)


def cost_figure(label: str) -> Figure:
    return Figure(f"$/Mtok {label}", False, lambda run, position: run.summary.cost(position, label), "", 1.0, 3)


def worse_by(figure: Figure, baseline: float, run: float) -> float:
    """How much worse the run is, as a fraction of the baseline (negative when better)."""
    worse = baseline - run if figure.higher_is_better else run - baseline
    if baseline == 0:
        return 0.0 if worse == 0 else math.copysign(math.inf, worse)
    return worse / abs(baseline)


def intervals_apart(figure: Figure, baseline: Estimate, run: Estimate) -> bool | None:
    """True when the run's interval lies wholly on the worse side of the baseline's; None without intervals."""
    if None in (baseline.low, baseline.high, run.low, run.high):
        return None
    if figure.higher_is_better:
        return run.high < baseline.low  # type: ignore[operator]
    return run.low > baseline.high  # type: ignore[operator]


def judge(figure: Figure, baseline: Estimate, run: Estimate, max_drop: float) -> tuple[tuple[str, ...], str]:
    """(failures, note) of the run's figure against the baseline's."""
    if baseline.value is None or run.value is None:  # e.g. no request finished in the window
        if baseline.value is None and run.value is None:
            return (), "not judged: neither run has a value"
        return (), f"not judged: the {'run' if run.value is None else 'baseline'} has no value"
    worse = worse_by(figure, baseline.value, run.value)
    if worse <= max_drop:
        return (), ""
    apart = intervals_apart(figure, baseline, run)
    amount = "worse from 0" if math.isinf(worse) else f"worse by {worse:.1%}"
    if apart is None:
        return (f"{amount} (no interval: judged on the change alone)",), ""
    if apart:
        return (f"{amount}, 95% intervals apart",), ""
    return (), f"{amount} but inside the noise (intervals overlap)"


def limit_failures(figure: Figure, run: Estimate, thresholds: Thresholds) -> tuple[str, ...]:
    """The run's own value against an absolute limit; a step without the value cannot show it meets one."""
    if figure is PER_USER and thresholds.min_tok_s is not None:
        flag = f"--min-tok-s {thresholds.min_tok_s:g}"
        if run.value is None:
            return (f"no value to hold to {flag}",)
        if run.value < thresholds.min_tok_s:
            return (f"below {flag}",)
    if figure is TTFT_P90 and thresholds.max_ttft_p90_s is not None:
        flag = f"--max-ttft-p90 {thresholds.max_ttft_p90_s:g} s"
        if run.value is None:
            return (f"no value to hold to {flag}",)
        if run.value > thresholds.max_ttft_p90_s:
            return (f"above {flag}",)
    return ()


def limited_figures(thresholds: Thresholds) -> list[Figure]:
    limits = ((PER_USER, thresholds.min_tok_s), (TTFT_P90, thresholds.max_ttft_p90_s))
    return [figure for figure, limit in limits if limit is not None]


WORKLOAD_KEYS = ("model", "prompts", "max_tokens", "ignore_eos", "temperature", "arrivals", "requests")


def workload(manifest: RunManifest) -> dict[str, tuple[object, str]]:
    """What a run measured, beside its serving setup: key -> (value compared, value shown)."""
    model, load = manifest.model, manifest.load
    shown: dict[str, tuple[object, str]] = {
        "model": (model.sha256, f"{model.name} ({model.sha256[:12]})") if model else (None, "not recorded"),
    }
    if load is None:
        return shown | {key: (None, "not recorded") for key in WORKLOAD_KEYS[1:]}
    arrivals = describe_arrivals(load)
    prompts, replies = describe_lengths(load)  # drawn or traced lengths are part of the workload
    return shown | {
        "prompts": (prompts, prompts),
        "max_tokens": (load.max_tokens if replies == str(load.max_tokens) else replies, replies),
        "ignore_eos": (load.ignore_eos, "fixed length" if load.ignore_eos else "until the model stops"),
        "temperature": (load.temperature, f"{load.temperature:g}"),
        "arrivals": (arrivals, arrivals),
        "requests": (describe_conversations(load), describe_conversations(load)),
    }


def workload_differences(run: RunManifest, baseline: RunManifest) -> list[str]:
    """``<key> <X> in the run, <Y> in the baseline`` for each way the two workloads differ."""
    ours, theirs = workload(run), workload(baseline)
    return [
        f"{key} {ours[key][1]} in the run, {theirs[key][1]} in the baseline"
        for key in WORKLOAD_KEYS
        if ours[key][0] != theirs[key][0]
    ]


def step_key(step: StepFigures) -> tuple[float, int]:
    return step.load, step.context_tokens


def step_name(step: StepFigures) -> str:
    return step.load_label + (f", context {step.context_tokens}" if step.context_tokens else "")


def shared_prices(run: GatedRun, baseline: GatedRun) -> list[str]:
    theirs = {price.label for price in baseline.summary.prices}
    return [price.label for price in run.summary.prices if price.label in theirs]


def refuse_unusable(run: GatedRun, baseline: GatedRun, allow_different: bool) -> list[str]:
    """Raise when the two runs cannot be compared; else the notes to print (differences allowed)."""
    if run.open_loop != baseline.open_loop:
        kinds = {True: "open loop (requests/s)", False: "closed loop (users)"}
        raise AnalysisError(
            f"run {run.manifest.run_id} is {kinds[run.open_loop]} and baseline {baseline.manifest.run_id} is "
            f"{kinds[baseline.open_loop]}: their steps are different loads; gate against a baseline of the same kind"
        )
    differences = workload_differences(run.manifest, baseline.manifest)
    if differences and not allow_different:
        raise AnalysisError(
            f"run {run.manifest.run_id} and baseline {baseline.manifest.run_id} measure different workloads: "
            + "; ".join(differences)
            + "; gate against a baseline of the same workload, or pass --allow-different"
        )
    return [f"compared although they differ (--allow-different): {'; '.join(differences)}"] if differences else []


def arm_key(manifest: RunManifest) -> str:
    """What makes runs one arm: its series' arm label, else its load's arm, else its server line."""
    if manifest.repeat is not None:
        return manifest.repeat.arm
    if manifest.load is not None and manifest.load.arm:
        return manifest.load.arm
    return " ".join(manifest.server.args) if manifest.server is not None else "default"


def repeat_values(figure: Figure, gated: GatedRun, key: tuple[float, int]) -> dict[int, float]:
    """The figure at the step ``key`` of each of the arm's runs, by repeat index (absent figures left out)."""
    values = {}
    for position, each in enumerate(gated.runs):
        index = each.manifest.repeat.index if each.manifest.repeat is not None else position + 1
        at = next((i for i, step in enumerate(each.summary.steps) if step_key(step) == key), None)
        estimate = figure.read(each, at) if at is not None else None
        if estimate is not None and estimate.value is not None and math.isfinite(estimate.value):
            values[index] = float(estimate.value)
    return values


def pooled_error_rate(gated: GatedRun, key: tuple[float, int]) -> Estimate | None:
    """Failed of measured requests at the step over all of the arm's runs (None for one run: its own rate stands)."""
    if not gated.repeats:
        return None
    steps = [step for each in gated.runs for step in each.summary.steps if step_key(step) == key]
    return intervals.proportion(sum(step.error_count for step in steps), sum(step.requests for step in steps))


def same_series(run: GatedRun, baseline: GatedRun) -> bool:
    ours, theirs = run.manifest.repeat, baseline.manifest.repeat
    return ours is not None and theirs is not None and ours.series == theirs.series


def judge_between_runs(figure: Figure, run: GatedRun, baseline: GatedRun, key: tuple[float, int],
                       max_drop: float) -> tuple[Estimate, Estimate, tuple[str, ...], str] | None:
    """(baseline's figure, run's figure, failures, note) from the spread between each side's runs; None where a
    side has fewer than two runs with the figure or a figure of 0 cannot be set in ratio (the caller then judges
    the first runs' own intervals)."""
    base_values, run_values = repeat_values(figure, baseline, key), repeat_values(figure, run, key)
    if len(base_values) < 2 or len(run_values) < 2:
        return None
    ratio, verdict, _ = ratio_between_runs(base_values, run_values, same_series(run, baseline))
    if verdict == "unknown":
        return None
    base, ours = between_runs(list(base_values.values())), between_runs(list(run_values.values()))
    assert base.value is not None and ours.value is not None
    worse = worse_by(figure, base.value, ours.value)
    if worse <= max_drop:
        return base, ours, (), ""
    amount = f"worse by {worse:.1%}"
    if verdict == "beyond noise":
        return base, ours, (f"{amount}, beyond the spread between runs ({ratio.method})",), ""
    return base, ours, (), f"{amount} but inside the spread between runs ({ratio.method})"


ONE_RUN_NOTE = ("one run on a side: the spread between runs is unknown, so a change is judged on each run's own "
                "95% intervals, which hold the noise inside a run only; --repeats 3 on both (given as several RUN "
                "and --baseline paths) judges by the spread between runs")


def gate(run: GatedRun, baseline: GatedRun, thresholds: Thresholds, allow_different: bool = False) -> GateResult:
    """Every check of the run against the baseline; raises AnalysisError when they cannot be compared."""
    notes = refuse_unusable(run, baseline, allow_different)
    theirs = {step_key(step): position for position, step in enumerate(baseline.summary.steps)}
    costs = [cost_figure(label) for label in shared_prices(run, baseline)]
    energy = [J_PER_TOKEN] if sampled_energy(run) and sampled_energy(baseline) else []
    if sampled_energy(run) != sampled_energy(baseline):
        notes.append("J per output token not checked: only the " + ("run" if sampled_energy(run) else "baseline")
                     + " sampled its GPUs' energy")
    figures = [AGGREGATE, PER_USER, TTFT_P90, ERROR_RATE, *energy, *costs]
    checks: list[Check] = []
    unmatched = []
    for position, step in enumerate(run.summary.steps):
        base_position = theirs.pop(step_key(step), None)
        name = step_name(step)
        if base_position is None:
            unmatched.append(name)
            for figure in limited_figures(thresholds):  # only the absolute limits apply to it
                ours = figure.read(run, position) or intervals.empty()
                checks.append(Check(name, figure, None, ours, limit_failures(figure, ours, thresholds), "no baseline"))
            continue
        for figure in figures:
            ours = figure.read(run, position) or intervals.empty()
            base = figure.read(baseline, base_position) or intervals.empty()
            if figure is ERROR_RATE:  # failures are counted, not measured: each side's runs pooled
                base = pooled_error_rate(baseline, step_key(step)) or base
                ours = pooled_error_rate(run, step_key(step)) or ours
            between = None if figure is ERROR_RATE else judge_between_runs(figure, run, baseline, step_key(step),
                                                                            thresholds.max_drop)
            if between is not None:
                base, ours, failures, note = between
            else:
                failures, note = judge(figure, base, ours, thresholds.max_drop)
            checks.append(Check(name, figure, base, ours, failures + limit_failures(figure, ours, thresholds), note))
    if len(unmatched) == len(run.summary.steps):
        raise AnalysisError(
            f"run {run.manifest.run_id} and baseline {baseline.manifest.run_id} share no step (run: "
            f"{', '.join(unmatched)}; baseline: {', '.join(step_name(s) for s in baseline.summary.steps)}); "
            "gate against a baseline swept over the same steps"
        )
    if unmatched:
        notes.append(f"steps of the run the baseline lacks (absolute limits only): {', '.join(unmatched)}")
    if theirs:
        names = [step_name(baseline.summary.steps[position]) for position in sorted(theirs.values())]
        notes.append(f"steps of the baseline the run lacks (not checked): {', '.join(names)}")
    if not run.repeats or not baseline.repeats:
        notes.append(ONE_RUN_NOTE)
    for side, gated in (("run", run), ("baseline", baseline)):
        for each in gated.runs:
            if each.manifest.status != "complete":
                notes.append(f"the {side}'s {each.manifest.run_id} is {each.manifest.status}: only its steps with a "
                             "closed window are compared")
    return GateResult(run, baseline, thresholds, checks, notes)
