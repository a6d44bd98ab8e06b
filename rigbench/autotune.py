"""Autotune: sweep a few llama-server settings on this card and keep the best, recording every trial.

Why a command rather than a table of advice: what limits llama-server differs per card and
model (sampling over a 262,144-token vocabulary on the CPU, slots, batch sizes, the unified
KV cache), so it is measured where it runs. Each trial is a short local-rig sweep (by default
1 user and 64 users) with the profile's serving line plus the trial's flags; one line per
trial goes to ``autotune.jsonl`` as soon as it ends, failures included, so an interrupted
tuning loses nothing already measured.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, Field
from tabulate import tabulate

from analysis.summary import read_summary
from core.errors import RigbenchError, RunInterrupted, UsageError
from core.profile import load_profile
from core.rundir import RunDir, utc_now
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
    """One trial's settings and headline figures (None where the trial failed)."""

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


def beyond_noise(trial: TrialResult, baseline: TrialResult) -> bool:
    """Whether ``trial``'s aggregate at the largest step is above ``baseline``'s beyond both 95%
    intervals (true where either lacks an interval: nothing to judge the noise by)."""
    low, high = trial.aggregate_low_at_max_users, baseline.aggregate_high_at_max_users
    return low is None or high is None or low > high


def baseline_trial(results: list[TrialResult]) -> TrialResult | None:
    """The first complete trial that adds no flags to one server: the line as the profile ships it."""
    return next((r for r in results if r.status == "complete" and not r.overrides and r.replicas == 1), None)


def best_trial(results: list[TrialResult], min_one_user_vs_bench: float = 0.9) -> TrialResult | None:
    """The highest aggregate at the largest step among trials whose one user keeps at least
    ``min_one_user_vs_bench`` of llama-bench (all complete trials when no bench figure), leaving
    out trials that change every request's sampling (:data:`SAMPLING_CHAIN_FLAGS`). A trial that
    is higher than the profile's own line only within the noise does not replace it: short windows
    at many users give wide intervals, and a flag kept on noise is a wrong default that looks measured."""
    complete = [
        r for r in results
        if r.status == "complete" and r.aggregate_tok_s_at_max_users and not changes_sampling(r.overrides)
    ]
    eligible = [
        r for r in complete
        if (r.one_user_vs_bench is None and r.bench_tg is None)  # no ceiling given: nothing to keep
        or (r.one_user_vs_bench is not None and r.one_user_vs_bench >= min_one_user_vs_bench)
    ]
    pool = eligible or complete
    best = max(pool, key=lambda r: r.aggregate_tok_s_at_max_users or 0.0, default=None)
    baseline = baseline_trial(pool)
    if best is not None and baseline is not None and best is not baseline and not beyond_noise(best, baseline):
        return baseline
    return best


def replica_arms(counts: list[int], mps: str, mps_possible: bool) -> list[ReplicaArm]:
    """The replica trials for totals ``counts`` (each above 1): ``mps`` ``both`` tries each count without MPS and,
    where ``mps_possible`` (the control program is found and the replicas share a GPU), under it; ``on`` and
    ``off`` one of the two; ``profile`` as the profile says."""
    modes: list[bool | None] = {"both": [False, True] if mps_possible else [False], "on": [True], "off": [False],
                                "profile": [None]}[mps]
    return [ReplicaArm(count=count, mps=mode) for count in counts if count > 1 for mode in modes]


LOG_NAME = "autotune.jsonl"


def read_trials(log: Path) -> list[TrialResult]:
    """The trials an earlier tuning in this folder recorded (none when it has no log)."""
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
    """Every complete trial's run of an autotune folder, in the order they ran (the profile's line first): what
    ``rigbench report`` compares."""
    trials = read_trials(Path(folder) / LOG_NAME)
    runs = [trial_run(folder, trial) for trial in trials if trial.status == "complete"]
    found = [run for run in runs if run is not None and run.is_dir()]
    if not found:
        raise UsageError(f"{folder}: the autotune folder has no complete trial whose run is there")
    return found


def kept_run(folder: Path) -> tuple[Path, TrialResult]:
    """The run of the trial autotune kept in ``folder`` (:func:`best_trial`): a card's best measured configuration,
    which ``rigbench plan`` prices."""
    trials = read_trials(Path(folder) / LOG_NAME)
    best = best_trial(trials)
    run = trial_run(folder, best) if best is not None else None
    if best is None or run is None or not run.is_dir():
        raise UsageError(f"{folder}: the autotune folder has no kept trial whose run is there "
                         f"({len(trials)} trial(s) recorded)")
    return run, best


def run_autotune(
    base_options,  # rigbench.local_rig.LocalRigOptions
    trials: dict[str, list[str]],
    out_dir: Path,
    bench_tg: float | None = None,
    arms: list[ReplicaArm] | None = None,
    resume: bool = False,
) -> list[TrialResult]:
    """Run each trial as a local-rig sweep; append its result to ``out_dir/autotune.jsonl``.

    ``arms`` (replica totals, each above 1, with MPS on, off or as the profile says): then the best flags so far
    are tried again as that many servers sharing the same slots and dividing
    the cores (``core.replicas``), since one llama-server's decode loop, not the card, can be what limits a small
    model at many users, and under MPS or not, since replicas sharing a GPU without it take turns on the card.
    ``resume``: a trial this folder's log already has complete is kept, not run again (a tuning cut short by a
    lost machine redoes only what is missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / LOG_NAME
    done = {result.name: result for result in read_trials(log) if result.status == "complete"} if resume else {}
    results: list[TrialResult] = []
    for name, overrides in trials.items():
        results.append(done.get(name) or _trial(base_options, name, overrides, None, out_dir, log, bench_tg))
    if arms:
        best = best_trial(results)
        name, overrides = (best.name, best.overrides) if best is not None else ("profile", [])
        for arm in arms:
            results.append(done.get(arm.name(name)) or _trial(base_options, arm.name(name), overrides, arm, out_dir,
                                                                log, bench_tg))
    return results


def _trial(base_options, name: str, overrides: list[str], arm: ReplicaArm | None, out_dir: Path, log: Path,
           bench_tg: float | None) -> TrialResult:
    """One trial as a local-rig sweep, its result appended to the log as soon as it ends; without an ``arm`` (a
    flag trial) it is served as the run's options or the profile say."""
    started = utc_now()
    asked = None if arm is None else arm.mps
    options = replace(
        base_options,
        runs_root=out_dir,
        server_overrides=[*base_options.server_overrides, *overrides],
        label=name.replace("+", "-").replace("@", "-"),
        replicas=base_options.replicas if arm is None else arm.count,
        mps=base_options.mps if asked is None else asked,
    )
    # what the trial serves: its replica arm's count, else the run's own (--replicas) or the profile's
    replicas = options.replicas or load_profile(options.profile).server.replicas
    try:
        report = run_local_rig(options)
        figures = headline_figures(report.parent / "summary.json")
        result = TrialResult(
            name=name,
            overrides=overrides,
            run_path=str(report.parent),
            status="complete",
            started_at=started,
            bench_tg=bench_tg,
            replicas=replicas,
            mps=ran_under_mps(report.parent),
            mps_asked=asked,
            **figures,
        )
        if bench_tg and result.one_user_server_tok_s:
            result.one_user_vs_bench = result.one_user_server_tok_s / bench_tg
    except RigbenchError as error:
        stopped = isinstance(error, RunInterrupted)  # Ctrl-C or a signal ends the tuning, not only this trial
        result = TrialResult(
            name=name,
            overrides=overrides,
            status="interrupted" if stopped else "failed",
            error=str(error)[:2000],
            started_at=started,
            bench_tg=bench_tg,
            replicas=replicas,
            mps_asked=asked,
        )
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


def kept_sentence(results: list[TrialResult], best: TrialResult | None) -> str:
    """What autotune keeps, in one line, and why the profile's line stays when it does."""
    if best is None:
        return "best: none (no trial completed)"
    line = f"best: {best.name}: {' '.join(best.overrides) or '(profile as is)'}"
    if best.replicas > 1:
        under = "" if best.mps is None else " under MPS" if best.mps else " without MPS"
        line += f" as {best.replicas} replicas{under} ({profile_setting(best)})"
        one = baseline_trial(results)
        if one is not None and one.one_user_server_tok_s and best.one_user_server_tok_s:
            line += (f"; one user gets {best.one_user_server_tok_s / one.one_user_server_tok_s:.2f} of the one "
                     f"server's {one.one_user_server_tok_s:.1f} tok/s")
    higher = [r.name for r in results if r.status == "complete" and r is not best
              and (r.aggregate_tok_s_at_max_users or 0.0) > (best.aggregate_tok_s_at_max_users or 0.0)
              and not changes_sampling(r.overrides)]
    if higher and not best.overrides and best.replicas == 1:
        line += (f" ({', '.join(higher)} measured higher at the largest step, but within the 95% intervals: "
                 "not beyond noise)")
    return line


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


def autotune_table(results: list[TrialResult], best: TrialResult | None) -> str:

    def fmt(number: float | None, digits: int = 1) -> str:
        return "-" if number is None else f"{number:,.{digits}f}"

    rows = [
        [
            ("**" + r.name + "**") if best is not None and r.name == best.name else r.name,
            " ".join(r.overrides) or "(profile as is)",
            r.replicas,
            mps_cell(r),
            r.status,
            fmt(r.one_user_server_tok_s),
            fmt(r.one_user_client_tok_s),
            fmt(r.one_user_vs_bench, 2),
            fmt(r.aggregate_tok_s_at_max_users)
            + (f" [{fmt(r.aggregate_low_at_max_users)}-{fmt(r.aggregate_high_at_max_users)}]"
               if r.aggregate_low_at_max_users is not None and r.aggregate_high_at_max_users is not None else ""),
            fmt(r.scaling_vs_one_user, 2),
        ]
        for r in results
    ]
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
