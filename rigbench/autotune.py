"""Autotune: sweep a few llama-server settings on this card and keep the best, recording every trial.

Why a command rather than a table of advice: what limits llama-server differs per card and
model (sampling over a 262,144-token vocabulary on the CPU, slots, batch sizes, the unified
KV cache), so it is measured where it runs. Each trial is a short local-rig sweep (by default
1 user and 64 users) with the profile's serving line plus the trial's flags; one line per
run goes to ``autotune.jsonl`` as soon as it ends, failures included, so an interrupted
tuning loses nothing already measured.

Why repeats (``--repeats N``): two runs of one trial can land far apart, further than either run's own
interval says, so a trial is kept over the profile's line only when it is higher beyond the spread between
repeated runs (``analysis.repeats``). The runs go in rounds: every trial once, then every trial again (A B A B,
``core.repeat_order``), so a machine's drift moves the trials alike; the replica arms, which serve the best
flags found, run their own rounds after the flag trials'. With one run per trial that spread is unknown, and
each run's own interval is all there is to judge by: the line printed says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, Field
from tabulate import tabulate

from analysis.intervals import Estimate
from analysis.repeats import Verdict, between_runs, ratio_between_runs
from analysis.summary import read_summary
from core.errors import RigbenchError, RunInterrupted, UsageError
from core.profile import load_profile
from core.repeat_order import Planned, interleaved, new_series_id
from core.rundir import RunDir, utc_now
from core.wording import counted
from rigbench.local_rig import run_local_rig

# Settings worth a trial on a GPU serving many users; each is added to the profile's line. Why
# these: sampling over a 262,144-token vocabulary on the CPU limits llama-server (on an H200,
# sampling on the GPU lifts one user from 0.78 to 0.92 of llama-bench and 64 users 2.2x); one
# KV stream per slot instead of the unified cache gives a further 1.2x at 64 users; the
# greedy-only chain is faster still but is never kept (see SAMPLING_CHAIN_FLAGS).
DEFAULT_TRIALS: dict[str, list[str]] = {
    "profile": [],
    "backend-sampling": ["--backend-sampling"],
    "backend-sampling+per-slot-kv": ["--backend-sampling", "-no-kvu"],
    "backend-sampling+greedy-chain": ["--backend-sampling", "--samplers", "temperature"],
}


class TrialResult(BaseModel):
    """One run of a trial: its settings and headline figures (None where the run failed). A trial run
    ``repeats`` times has one of these per run; a log from before repeats reads as repeat 1 of 1."""

    name: str
    overrides: list[str]
    run_path: str | None = None
    status: str
    error: str | None = None
    started_at: str
    one_user_server_tok_s: float | None = None
    one_user_client_tok_s: float | None = None
    max_users: int | None = None
    aggregate_tok_s_at_max_users: float | None = None
    aggregate_low_at_max_users: float | None = Field(None, description="its 95% interval's low end")
    aggregate_high_at_max_users: float | None = Field(None, description="its 95% interval's high end")
    one_user_vs_bench: float | None = None
    scaling_vs_one_user: float | None = None
    bench_tg: float | None = Field(None, description="llama-bench tg128 of the same model and build")
    replicas: int = Field(1, ge=1, description="llama-server processes sharing the trial's slots (and the cores)")
    mps: bool | None = Field(None, description="whether the trial's servers ran under CUDA MPS, as its run's "
                             "manifest says (None: not recorded, or the trial did not run)")
    mps_asked: bool | None = Field(None, description="the arm's own MPS setting (None: the profile's)")
    repeat: int = Field(1, ge=1, description="which run of the trial this is, from 1 (round 1 runs every trial once, "
                        "then round 2 ...)")
    repeats: int = Field(1, ge=1, description="the runs each trial was given (--repeats)")
    series: str | None = Field(None, description="the tuning's series, as the run's manifest.repeat records it "
                               "(None: a log from before repeats)")


class ReplicaArm(BaseModel):
    """One replica trial: the best flags again as ``count`` servers sharing the slots, under MPS or not."""

    count: int = Field(ge=2)
    mps: bool | None = Field(None, description="True: under MPS; False: without; None: as the profile says")

    def name(self, flags_name: str) -> str:
        suffix = "" if self.mps is None else "+mps" if self.mps else "+no-mps"
        return f"{flags_name}@{self.count}-replicas{suffix}"


def headline_figures(summary_path: Path) -> dict[str, float | int | None]:
    """One-user and largest-step figures from analysis' summary.json."""
    steps = read_summary(summary_path).runs[0].steps
    if not steps:
        return {}
    first = min(steps, key=lambda step: step.users)
    last = max(steps, key=lambda step: step.users)
    one_user_aggregate = first.aggregate_tok_s.value
    top_aggregate = last.aggregate_tok_s.value
    return {
        "one_user_server_tok_s": first.server_tok_s.value if first.users == 1 else None,
        "one_user_client_tok_s": first.client_tok_s.value if first.users == 1 else None,
        "max_users": last.users,
        "aggregate_tok_s_at_max_users": top_aggregate,
        "aggregate_low_at_max_users": last.aggregate_tok_s.low,
        "aggregate_high_at_max_users": last.aggregate_tok_s.high,
        "scaling_vs_one_user": top_aggregate / one_user_aggregate if one_user_aggregate and top_aggregate else None,
    }


# Flags that change the sampler chain of every request (a request's top_k, top_p, min_p or
# repeat_penalty is then ignored): measured like any trial, never kept as a serving default,
# since they trade what users asked for against speed (``--samplers temperature`` is faster
# and silently drops repeat_penalty).
SAMPLING_CHAIN_FLAGS = frozenset({"--samplers", "--sampling-seq", "--sampler-seq"})


def changes_sampling(overrides: list[str]) -> bool:
    # llama.cpp reads "--sampler_seq" as "--sampler-seq"; "--samplers=top_k" carries its value
    return any(token.split("=", 1)[0].replace("_", "-") in SAMPLING_CHAIN_FLAGS for token in overrides)


@dataclass(frozen=True)
class TrialRuns:
    """One trial's runs in a tuning, by repeat: the latest line of each repeat (a run made again replaces the
    earlier one), whatever its status. What the choice, the table and the kept run read a trial as."""

    name: str
    runs: tuple[TrialResult, ...]

    @property
    def first(self) -> TrialResult:
        """The trial's settings (flags, replicas, MPS asked), the same in every repeat."""
        return self.runs[0]

    @property
    def complete(self) -> list[TrialResult]:
        """The runs that completed with a figure at the largest step."""
        return [run for run in self.runs if run.status == "complete" and run.aggregate_tok_s_at_max_users]

    @property
    def repeated(self) -> bool:
        """Whether two or more runs completed: then the spread between runs can be measured."""
        return len(self.complete) >= 2

    def aggregates(self) -> dict[int, float]:
        """The aggregate at the largest step of each complete run, by repeat."""
        return {run.repeat: float(run.aggregate_tok_s_at_max_users or 0.0) for run in self.complete}

    @property
    def aggregate(self) -> Estimate:
        """The mean aggregate at the largest step over the complete runs, with its interval between them."""
        return between_runs(list(self.aggregates().values()))

    def mean(self, name: str) -> float | None:
        """The mean of one of :class:`TrialResult`'s figures over the complete runs that have it."""
        values = [getattr(run, name) for run in self.complete if getattr(run, name) is not None]
        return sum(values) / len(values) if values else None

    @property
    def series(self) -> str | None:
        """The series every complete run belongs to (None: none, or more than one)."""
        found = {run.series for run in self.complete}
        return found.pop() if len(found) == 1 else None

    def kept(self) -> TrialResult | None:
        """The complete run closest to the trial's mean aggregate, the earliest repeat on a tie (two runs always
        tie): the one run that stands for the trial where one run is wanted (a study's table); None
        where none completed."""
        mean = self.aggregate.value
        if mean is None:
            return None
        # rounded, so that a tie is not broken by the last bits of a float
        return min(self.complete, key=lambda run: (round(abs(float(run.aggregate_tok_s_at_max_users or 0.0) - mean),
                                                         6), run.repeat))


def trial_runs(results: Sequence[TrialResult]) -> list[TrialRuns]:
    """The runs grouped by trial, in the order each trial first ran, each trial's runs by repeat."""
    by_name: dict[str, dict[int, TrialResult]] = {}
    for result in results:
        by_name.setdefault(result.name, {})[result.repeat] = result
    return [TrialRuns(name, tuple(runs[index] for index in sorted(runs))) for name, runs in by_name.items()]


@dataclass(frozen=True)
class Judgement:
    """A trial against the profile's line at the largest step. Between runs (both with two complete runs or more):
    the ratio of their means and its interval over the repeats (``analysis.repeats``); else each run's own 95%
    interval, all there is when the spread between runs is unknown."""

    higher: bool  # higher beyond noise
    between_runs: bool
    ratio: Estimate | None = None  # trial / profile's line, between runs
    verdict: Verdict = "unknown"

    def ratio_text(self) -> str:
        ratio = self.ratio
        if ratio is None or ratio.value is None:
            return "-"
        interval = f" [{ratio.low:.2f}-{ratio.high:.2f}]" if ratio.low is not None and ratio.high is not None else ""
        return f"{ratio.value:.2f}{interval}"


def judge(trial: TrialRuns, baseline: TrialRuns) -> Judgement:
    """``trial`` against ``baseline`` (the profile's line). With two or more complete runs of each, by the spread
    between runs (paired where both ran in one series: repeat i of each ran in the same round); otherwise by the
    runs that stand for each (:meth:`TrialRuns.kept`): higher where the trial's interval is above the line's (or
    either lacks one: nothing to judge the noise by)."""
    if trial.repeated and baseline.repeated:
        paired = trial.series is not None and trial.series == baseline.series
        ratio, verdict, _ = ratio_between_runs(baseline.aggregates(), trial.aggregates(), paired)
        return Judgement(verdict == "beyond noise" and (ratio.value or 0.0) > 1, True, ratio, verdict)
    one, line = trial.kept(), baseline.kept()
    low = one.aggregate_low_at_max_users if one is not None else None
    high = line.aggregate_high_at_max_users if line is not None else None
    return Judgement(low is None or high is None or low > high, False)


def beyond_noise(trial: TrialRuns, baseline: TrialRuns) -> bool:
    """Whether ``trial``'s aggregate at the largest step is above ``baseline``'s beyond the noise (:func:`judge`)."""
    return judge(trial, baseline).higher


def is_profile_line(trial: TrialResult) -> bool:
    """A trial that adds no flags to one server: the line as the profile ships it."""
    return not trial.overrides and trial.replicas == 1


def _baseline(trials: list[TrialRuns]) -> TrialRuns | None:
    return next((trial for trial in trials if trial.complete and is_profile_line(trial.first)), None)


def keeps_one_user(trial: TrialRuns, min_one_user_vs_bench: float) -> bool:
    """Whether the trial's one user keeps ``min_one_user_vs_bench`` of llama-bench (its runs' mean); a trial with
    no ceiling given passes, one with a ceiling but no one-user figure does not."""
    ratio = trial.mean("one_user_vs_bench")
    if ratio is None:
        return all(run.bench_tg is None for run in trial.complete)
    return ratio >= min_one_user_vs_bench


def best_trial(results: list[TrialResult], min_one_user_vs_bench: float = 0.9) -> TrialResult | None:
    """The highest mean aggregate at the largest step among trials whose one user keeps at least
    ``min_one_user_vs_bench`` of llama-bench (all complete trials when none does), leaving out trials that change
    every request's sampling (:data:`SAMPLING_CHAIN_FLAGS`). A trial higher than the profile's own line only within
    the noise does not replace it (:func:`judge`: the spread between runs where each ran twice or more, else each
    run's interval): short windows at many users give wide intervals, runs of one thing land apart, and a flag kept
    on noise is a wrong default that looks measured. Returns the run that stands for the kept trial
    (:meth:`TrialRuns.kept`: the one run where it ran once)."""
    complete = [trial for trial in trial_runs(results)
                if trial.complete and not changes_sampling(trial.first.overrides)]
    eligible = [trial for trial in complete if keeps_one_user(trial, min_one_user_vs_bench)]
    pool = eligible or complete
    best = max(pool, key=lambda trial: trial.aggregate.value or 0.0, default=None)
    baseline = _baseline(pool)
    if best is not None and baseline is not None and best is not baseline and not beyond_noise(best, baseline):
        best = baseline
    return None if best is None else best.kept()


def replica_arms(counts: list[int], mps: str, mps_possible: bool) -> list[ReplicaArm]:
    """The replica trials for totals ``counts`` (each above 1): ``mps`` ``both`` tries each count without MPS and,
    where ``mps_possible`` (the control program is found and the replicas share a GPU), under it; ``on`` and
    ``off`` one of the two; ``profile`` as the profile says."""
    modes: list[bool | None] = {"both": [False, True] if mps_possible else [False], "on": [True], "off": [False],
                                "profile": [None]}[mps]
    return [ReplicaArm(count=count, mps=mode) for count in counts if count > 1 for mode in modes]


LOG_NAME = "autotune.jsonl"


def read_trials(log: Path) -> list[TrialResult]:
    """The runs an earlier tuning in this folder recorded, one per line (none when it has no log)."""
    if not log.exists():
        return []
    return [TrialResult.model_validate_json(line) for line in log.read_text().splitlines() if line.strip()]


def is_tuning(path: Path) -> bool:
    """Whether ``path`` is an autotune folder (it holds the trials' log)."""
    return (Path(path) / LOG_NAME).is_file()


def trial_run(folder: Path, trial: TrialResult) -> Path | None:
    """Where a trial's run is now: as recorded, else the run of that name in the tuning's folder (a folder copied
    from the machine that tuned, as a study's is)."""
    if trial.run_path is None:
        return None
    recorded = Path(trial.run_path)
    return recorded if recorded.is_dir() else Path(folder) / recorded.name


def tuning_runs(folder: Path) -> list[Path]:
    """Every complete run of an autotune folder, every repeat of each trial, in the order they ran (the profile's
    line first): what ``rigbench report`` compares (it groups a trial's repeats by their manifests' series)."""
    trials = read_trials(Path(folder) / LOG_NAME)
    runs = [trial_run(folder, trial) for trial in trials if trial.status == "complete"]
    found = [run for run in runs if run is not None and run.is_dir()]
    if not found:
        raise UsageError(f"{folder}: the autotune folder has no complete trial whose run is there")
    return found


def kept_runs(folder: Path) -> tuple[list[Path], TrialResult]:
    """The runs of the trial autotune kept in ``folder`` (:func:`best_trial`), every complete repeat of it that is
    there, and the run that stands for it: a card's best measured configuration, which ``rigbench plan`` prices. A
    plan pools a trial's repeats (their manifests name one series and arm) and sizes from the lowest, as it does for
    any arm's repeats given as runs: the folder and its runs plan alike."""
    trials = read_trials(Path(folder) / LOG_NAME)
    best = best_trial(trials)
    kept = next((runs for runs in trial_runs(trials) if best is not None and runs.name == best.name), None)
    found = [trial_run(folder, run) for run in kept.complete] if kept is not None else []
    runs = [run for run in found if run is not None and run.is_dir()]
    if best is None or not runs:
        raise UsageError(f"{folder}: the autotune folder has no kept trial whose run is there "
                         f"({counted(len(trials), 'trial')} recorded)")
    return runs, best


@dataclass(frozen=True)
class Trial:
    """One trial of a tuning: its name, the flags it adds to the profile's line, and the replica arm it is served as
    (None: as the run's options or the profile say)."""

    name: str
    overrides: list[str] = field(default_factory=list)
    arm: ReplicaArm | None = None


def plan_rounds(trials: list[Trial], repeats: int, series: str, start: int = 0) -> list[Planned[Trial]]:
    """Every run of ``repeats`` rounds over ``trials`` (round 1: each trial once, in order; then round 2 ...), their
    places in the series counted from ``start``: replica arms, planned once the flag trials are done, follow them."""
    planned = interleaved(trials, [trial.name for trial in trials], repeats, series)
    return [Planned(each.arm, each.repeat.model_copy(update={"order": each.repeat.order + start}))
            for each in planned]


def completed(results: list[TrialResult]) -> dict[tuple[str, int], TrialResult]:
    """The complete runs by (trial, repeat): what a resumed tuning keeps rather than runs again."""
    return {(result.name, result.repeat): result for result in results if result.status == "complete"}


def tuning_series(results: list[TrialResult], label: str = "autotune") -> str:
    """The series of the latest run recorded, so that a resumed tuning's runs join the runs they are compared with;
    a new series where none is recorded."""
    return next((result.series for result in reversed(results) if result.series), None) or new_series_id(label)


def run_autotune(
    base_options,  # rigbench.local_rig.LocalRigOptions
    trials: dict[str, list[str]],
    out_dir: Path,
    bench_tg: float | None = None,
    arms: list[ReplicaArm] | None = None,
    resume: bool = False,
    repeats: int = 1,
) -> list[TrialResult]:
    """Run each trial ``repeats`` times as local-rig sweeps, in rounds (:func:`plan_rounds`); append each run's
    result to ``out_dir/autotune.jsonl`` as it ends. Returns the runs in the order they ran.

    ``arms`` (replica totals, each above 1, with MPS on, off or as the profile says): then the best flags so far
    are tried again as that many servers sharing the same slots and dividing
    the cores (``core.replicas``), since one llama-server's decode loop, not the card, can be what limits a small
    model at many users, and under MPS or not, since replicas sharing a GPU without it take turns on the card;
    they depend on the flags the flag trials' rounds found best, so their own rounds come after those.
    ``resume``: a run (trial and repeat) this folder's log already has complete is kept, not run again, and the
    runs made join the log's series (a tuning cut short by a lost machine redoes only what is missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = read_trials(out_dir / LOG_NAME) if resume else []
    done, series = completed(earlier), tuning_series(earlier)
    flag_trials = plan_rounds([Trial(name, overrides) for name, overrides in trials.items()], repeats, series)
    results = run_planned(base_options, flag_trials, out_dir, bench_tg, done)
    if arms:
        best = best_trial(results)
        name, overrides = (best.name, best.overrides) if best is not None else ("profile", [])
        replica_trials = [Trial(arm.name(name), overrides, arm) for arm in arms]
        results += run_planned(base_options, plan_rounds(replica_trials, repeats, series, start=len(flag_trials)),
                               out_dir, bench_tg, done)
    return results


def run_planned(base_options, planned: list[Planned[Trial]], out_dir: Path, bench_tg: float | None,
                done: dict[tuple[str, int], TrialResult]) -> list[TrialResult]:
    """Each planned run in order, but those ``done`` already has."""
    return [done.get((each.arm.name, each.repeat.index)) or run_trial(base_options, each, out_dir, bench_tg)
            for each in planned]


def run_trial(base_options, planned: Planned[Trial], out_dir: Path, bench_tg: float | None = None) -> TrialResult:
    """One run of a trial as a local-rig sweep, its result appended to the log as soon as it ends; without a replica
    arm (a flag trial) it is served as the run's options or the profile say. The run is one repeat of the tuning's
    series (its manifest says which), its load run once."""
    trial, repeat = planned.arm, planned.repeat
    started = utc_now()
    asked = None if trial.arm is None else trial.arm.mps
    options = replace(
        base_options,
        runs_root=out_dir,
        server_overrides=[*base_options.server_overrides, *trial.overrides],
        label=trial.name.replace("+", "-").replace("@", "-"),
        replicas=base_options.replicas if trial.arm is None else trial.arm.count,
        mps=base_options.mps if asked is None else asked,
        load={key: value for key, value in base_options.load.items() if key != "repeats"},
        repeat=repeat,
    )
    # what the trial serves: its replica arm's count, else the run's own (--replicas) or the profile's
    replicas = options.replicas or load_profile(options.profile).server.replicas
    common = {"name": trial.name, "overrides": trial.overrides, "started_at": started, "bench_tg": bench_tg,
              "replicas": replicas, "mps_asked": asked, "repeat": repeat.index, "repeats": repeat.of,
              "series": repeat.series}
    log = out_dir / LOG_NAME
    try:
        report = run_local_rig(options)
        figures = headline_figures(report.parent / "summary.json")
        result = TrialResult(run_path=str(report.parent), status="complete", mps=ran_under_mps(report.parent),
                             **common, **figures)
        if bench_tg and result.one_user_server_tok_s:
            result.one_user_vs_bench = result.one_user_server_tok_s / bench_tg
    except RigbenchError as error:
        stopped = isinstance(error, RunInterrupted)  # Ctrl-C or a signal ends the tuning, not only this trial
        result = TrialResult(status="interrupted" if stopped else "failed", error=str(error)[:2000], **common)
        if stopped:
            _append(log, result)
            raise
    _append(log, result)
    return result


def ran_under_mps(run_path: Path) -> bool | None:
    """Whether the run's servers ran under MPS, as its manifest recorded it (None: not recorded)."""
    server = RunDir(run_path).read_manifest().server
    return None if server is None or server.mps is None else server.mps.ran


def _append(log: Path, result: TrialResult) -> None:
    with open(log, "a") as handle:
        handle.write(result.model_dump_json() + "\n")


SPREAD_UNKNOWN = ("the spread between runs is unknown, so each run's own 95% interval judged the trials "
                  "(--repeats 3 measures that spread)")


def kept_sentence(results: list[TrialResult], best: TrialResult | None) -> str:
    """What autotune keeps, in one line, and why the profile's line stays when it does; with one run of a trial the
    line says that the spread between runs is unknown, and how to measure it."""
    if best is None:
        return "best: none (no trial completed)"
    trials = trial_runs(results)
    kept = next((trial for trial in trials if trial.name == best.name), TrialRuns(best.name, (best,)))
    baseline = _baseline(trials)
    line = f"best: {best.name}: {' '.join(best.overrides) or '(profile as is)'}"
    if best.replicas > 1:
        under = "" if best.mps is None else " under MPS" if best.mps else " without MPS"
        line += f" as {best.replicas} replicas{under} ({profile_setting(best)})"
    judged = judge(kept, baseline) if baseline is not None and baseline is not kept else None
    if judged is not None and judged.between_runs:
        line += f" ({judged.ratio_text()} of the profile's line at the largest step between runs: {judged.verdict})"
    one_user = kept.mean("one_user_server_tok_s")
    alone = baseline.mean("one_user_server_tok_s") if baseline is not None else None
    if best.replicas > 1 and one_user and alone:
        line += f"; one user gets {one_user / alone:.2f} of the one server's {alone:.1f} tok/s"
    higher = [trial for trial in trials if trial.complete and trial is not kept
              and (trial.aggregate.value or 0.0) > (kept.aggregate.value or 0.0)
              and not changes_sampling(trial.first.overrides)]
    if higher and is_profile_line(best):
        line += higher_within_noise(higher, kept)
    if not kept.repeated or (baseline is not None and not baseline.repeated):
        once = [trial.name for trial in trials if trial.complete and not trial.repeated]
        line += (f"; one run per trial: {SPREAD_UNKNOWN}" if len(once) == len([t for t in trials if t.complete])
                 else f"; one run of {', '.join(once)}: {SPREAD_UNKNOWN}")
    return line


def higher_within_noise(higher: list[TrialRuns], kept: TrialRuns) -> str:
    """Why trials measured higher than the profile's line did not replace it: within each run's 95% intervals, or
    within the spread between runs (their ratios to the line given)."""
    judged = [(trial.name, judge(trial, kept)) for trial in higher]
    within_runs = [name for name, judgement in judged if not judgement.between_runs]
    between = [(name, judgement.ratio_text()) for name, judgement in judged if judgement.between_runs]
    text = ""
    if within_runs:
        text += (f" ({', '.join(within_runs)} measured higher at the largest step, but within the 95% intervals: "
                 "not beyond noise)")
    if between:
        text += (f" ({', '.join(name for name, _ in between)} measured higher at the largest step, but within the "
                 f"spread between runs, at {' and '.join(ratio for _, ratio in between)} of the profile's line: "
                 "not beyond noise)")
    return text


def profile_setting(trial: TrialResult) -> str:
    """The profile's lines that serve as ``trial`` did: its replica count and whether under MPS."""
    words = [f"[server] replicas = {trial.replicas}"]
    if trial.mps is not None:
        words.append(f"mps = {'true' if trial.mps else 'false'}")
    return ", ".join(words)


def mps_cell(trial: TrialResult) -> str:
    """'on' or 'off' as the run recorded it; what was asked where the trial did not run; '-' for neither."""
    if trial.mps is not None:
        return "on" if trial.mps else "off"
    return "-" if trial.mps_asked is None else f"{'on' if trial.mps_asked else 'off'} (asked)"


def _fmt(number: float | None, digits: int = 1) -> str:
    return "-" if number is None or not math.isfinite(number) else f"{number:,.{digits}f}"


def status_cell(trial: TrialRuns) -> str:
    """The runs' status: one word where every run ended alike, else how many of them completed."""
    statuses = {run.status for run in trial.runs}
    if len(statuses) == 1:
        return statuses.pop()
    done = sum(run.status == "complete" for run in trial.runs)
    return f"{done} of {len(trial.runs)} complete"


def aggregate_cell(trial: TrialRuns) -> str:
    """The aggregate at the largest step: the mean over two or more complete runs with its 95% interval between
    them and their count; else the one run's figure with its own 95% interval."""
    if trial.repeated:
        estimate = trial.aggregate
        return f"{_fmt(estimate.value)} [{_fmt(estimate.low)}-{_fmt(estimate.high)}] between {estimate.n} runs"
    run = trial.kept() or trial.first
    low, high = run.aggregate_low_at_max_users, run.aggregate_high_at_max_users
    return _fmt(run.aggregate_tok_s_at_max_users) + (f" [{_fmt(low)}-{_fmt(high)}]"
                                                     if low is not None and high is not None else "")


def trial_row(trial: TrialRuns, best: TrialResult | None) -> list:
    """One trial's row: its settings, and its figures as the mean over its complete runs (the one run's where it ran
    once, or where none completed)."""
    one = trial.first if not trial.complete else trial.kept() or trial.first

    def figure(name: str) -> float | None:
        return trial.mean(name) if trial.repeated else getattr(one, name)

    return [
        ("**" + trial.name + "**") if best is not None and trial.name == best.name else trial.name,
        " ".join(trial.first.overrides) or "(profile as is)",
        trial.first.replicas,
        mps_cell(one),
        status_cell(trial),
        _fmt(figure("one_user_server_tok_s")),
        _fmt(figure("one_user_client_tok_s")),
        _fmt(figure("one_user_vs_bench"), 2),
        aggregate_cell(trial),
        _fmt(figure("scaling_vs_one_user"), 2),
    ]


def autotune_table(results: list[TrialResult], best: TrialResult | None) -> str:
    """One row per trial (its runs together); the kept trial in bold."""
    rows = [trial_row(trial, best) for trial in trial_runs(results)]
    headers = [
        "trial",
        "flags added",
        "replicas",
        "MPS",
        "status",
        "1 user server tok/s",
        "1 user client tok/s",
        "1 user / llama-bench tg",
        "aggregate tok/s at max users [95%]",
        "max users / 1 user",
    ]
    return tabulate(rows, headers=headers, tablefmt="github")
