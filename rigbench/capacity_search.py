"""``rigbench sweep --find-max users|rate --slo ...``: the most load that meets the service-level targets.

Why a search and not a sweep: a sweep's fixed steps (1, 2, 4, ... 64 users) place the answer
between two of them, and the plan has to guess where in between; a search measures where it is,
to a stated resolution, with as few probes as bisection allows.

How it goes: from the first load (1 user, or 1 request/s; ``--find-max users:4`` or ``rate:0.2``
starts elsewhere) the load doubles until a probe does not meet the targets or ``--max-load`` is
reached; then the bracket between the largest load that met them and the smallest that did not is
halved until it is within the resolution:

- users: whole users; ``--resolution`` default 1 (the answer is exact), or a whole number, or a share
  of the bracket's low end (``10%``);
- rate: requests/s; ``--resolution`` default 10% of the bracket's low end (open-loop latency is far
  from linear in the rate, and a relative answer keeps the probe count the same at any scale), or an
  absolute rate (``0.5``).

Each probe is a whole one-step run (warm-up, measured window, 95% intervals) in the search's folder
(``core.rundir.capacity_search``), so every tool that reads a run reads a probe. A probe *meets*
when every target's verdict is meets, the upper end of its percentile's interval within the target
(``analysis.goodput``), and none of its measured requests failed; unclear is not meeting (a
probe too short to tell is no evidence the load is served), so a search with short windows errs low.
It stops when the bracket is within the resolution, when the largest load allowed met every target,
when the first probe already missed, or when a probe's run failed or was stopped (the record keeps
what was found until then).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from analysis.figures import run_figures
from analysis.goodput_section import targets_text
from analysis.load import load_run
from analysis.step import StepFigures
from core.errors import RigbenchError
from core.load_reached import MARK_BELOW
from core.rundir import RunDir, RunManifest, new_run_id, utc_now
from core.rundir.capacity_search import (
    STOP_REASONS,
    CapacitySearch,
    SearchProbe,
    SearchResult,
    StopReason,
    TargetReading,
    write_search,
)
from core.wording import counted
from rigbench.search_plan import Outcome, SearchPlan

# ---------------------------------------------------------------- the bisection, free of runs


@dataclass
class Bisection:
    """The search's state: feed it each probe's outcome (``record``); it names the next load or stops."""

    plan: SearchPlan
    largest_meeting: float | None = None
    smallest_missing: float | None = None
    reason: StopReason | None = None
    detail: str = ""
    next_load: float | None = field(init=False)
    probed: list[tuple[float, Outcome]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.next_load = self.plan.first_load

    def record(self, load: float, outcome: Outcome, why: str = "") -> None:
        plan = self.plan
        self.probed.append((load, outcome))
        if outcome == "meets":
            self.largest_meeting = max(load, self.largest_meeting or load)
        elif self.smallest_missing is None or load < self.smallest_missing:
            self.smallest_missing = load
        self.next_load = None
        if outcome == "failed":
            self._stop("probe_failed", f"the probe at {plan.load_text(load)}: {why or 'failed'}")
        elif self.largest_meeting is None:
            lower = "" if plan.mode == "users" and load <= 1 else ", or start lower (--find-max users:N or rate:R)"
            self._stop("first_missed", f"{plan.load_text(load)} did not meet every target"
                       + (f" ({why})" if why else "") + f"; relax the targets{lower}")
        elif self.smallest_missing is None:
            if plan.max_load is not None and self.largest_meeting >= plan.max_load:
                self._stop("max_load_met", f"{plan.load_text(plan.max_load)} met every target; what it can serve may "
                           "be more: raise --max-load")
            else:
                doubled = self.largest_meeting * 2
                self.next_load = min(doubled, plan.max_load) if plan.max_load is not None else doubled
        else:
            self._bisect()

    def _bisect(self) -> None:
        low, high = self.largest_meeting, self.smallest_missing
        assert low is not None and high is not None
        plan = self.plan
        width, tolerance = high - low, plan.tolerance(low)
        whole = plan.mode == "users"
        if width <= tolerance or (whole and width <= 1):
            self._stop("resolution", f"{high:g} - {low:g} = {plan.load_text(width)}, within the resolution "
                       f"{plan.load_text(tolerance)}")
            return
        middle = float(low + (high - low) // 2) if whole else _round(low + width / 2)
        if not low < middle < high:  # rounded onto an end: no load between them is left to probe
            self._stop("resolution", f"{high:g} - {low:g} = {plan.load_text(width)}: no load between them at "
                       "four significant figures")
            return
        self.next_load = middle

    def _stop(self, reason: StopReason, detail: str) -> None:
        self.reason, self.detail, self.next_load = reason, detail, None

    def run(self, probe: Callable[[float], tuple[Outcome, str]]) -> Bisection:
        """Probe until it stops; ``probe(load)`` -> (outcome, why it did not meet)."""
        while self.next_load is not None:
            load = self.next_load
            outcome, why = probe(load)
            self.record(load, outcome, why)
        return self

    def result(self) -> SearchResult:
        assert self.reason is not None
        return SearchResult(largest_meeting=self.largest_meeting, smallest_missing=self.smallest_missing,
                            reason=self.reason, detail=self.detail)


def _round(rate: float) -> float:
    """A bisected rate to four significant figures: run ids and tables stay readable."""
    return float(f"{rate:.4g}") if rate > 0 else rate


# ---------------------------------------------------------------- probes as runs


def judge_probe(run: RunDir, manifest: RunManifest, load: float) -> tuple[SearchProbe, Outcome]:
    """A probe's record from its run: its one step's goodput against the targets."""
    base = {"load": load, "run_id": run.path.name, "status": manifest.status}
    try:
        figures = run_figures(load_run(run.path))
    except RigbenchError as error:
        detail = manifest.status_detail or str(error)
        return SearchProbe(**base, meets=False, detail=f"no measured window: {detail}"), "failed"
    step = figures.steps[0]
    goodput = step.goodput
    readings = {} if goodput is None else {
        key: TargetReading(target_s=judgement.target_s, value=judgement.estimate.value, low=judgement.estimate.low,
                           high=judgement.estimate.high, n=judgement.estimate.n, verdict=judgement.verdict)
        for key, judgement in goodput.targets.items()}
    why = [f"{key} {reading.verdict}" + _reading_why(reading) for key, reading in readings.items()
           if reading.verdict != "meets"]
    if step.error_count:
        why.append(f"{step.error_count} of {counted(step.requests, 'measured request')} failed")
    if step.load_reached is not None and step.load_reached < MARK_BELOW:
        why.append(f"the load that ran was {step.load_reached:.0%} of the {plan_text(load, step)} named")
    if manifest.status != "complete":
        why.append(f"run {manifest.status}: {manifest.status_detail or 'no detail'}")
    meets = manifest.status == "complete" and goodput is not None and not why
    record = SearchProbe(
        **base, meets=meets, targets=readings, requests=step.requests, errors=step.error_count,
        met_share=None if goodput is None else goodput.met_share.value,
        goodput_req_s=None if goodput is None else goodput.goodput_req_s,
        goodput_tok_s=None if goodput is None else goodput.goodput_tok_s,
        aggregate_tok_s=step.aggregate_tok_s.value, aggregate_tok_s_low=step.aggregate_tok_s.low,
        detail="; ".join(why) or None)
    # a run the sweep failed for what the load did to the server (its error rate, a load that could not run)
    # still measured its window: the server missed at this load, and the search narrows below it
    overloaded = manifest.status == "failed" and goodput is not None and step.requests > 0
    outcome: Outcome = ("meets" if meets else "misses" if manifest.status == "complete" or overloaded
                        else "failed")
    return record, outcome


def plan_text(load: float, step: StepFigures) -> str:
    return f"{load:g} req/s" if step.rate is not None else counted(float(load), "user")


def _reading_why(reading: TargetReading) -> str:
    if reading.value is None:
        return " (no request gave the figure)"
    if reading.verdict == "misses":
        return f" ({reading.value:.4g} s > {reading.target_s:g} s)"
    if reading.high is None:
        return f" ({reading.value:.4g} s, too few requests ({reading.n}) for an interval: measure longer)"
    if reading.high > reading.target_s:
        return f" ({reading.value:.4g} s, but its interval reaches {reading.high:.4g} s > {reading.target_s:g} s)"
    return (f" ({reading.value:.4g} s [{reading.low:.4g}, {reading.high:.4g}], from {counted(reading.n, 'request')}, "
            "too few to judge that percentile (a p90 needs 36), or one was cut by the sweep's stop: measure longer)")


def probe_line(number: int, plan: SearchPlan, probe: SearchProbe) -> str:
    readings = ", ".join(
        f"{key} {reading.value:.4g} s" + (f" [{reading.low:.4g}, {reading.high:.4g}]" if reading.high is not None
                                          and reading.low is not None else "") + f" {reading.verdict}"
        if reading.value is not None else f"{key} - {reading.verdict}"
        for key, reading in probe.targets.items())
    verdict = "meets" if probe.meets else "does not meet" if probe.targets else f"failed ({probe.status})"
    goodput = "" if probe.goodput_req_s is None else (
        f"; goodput {probe.goodput_req_s:.2f} req/s, {probe.goodput_tok_s or 0:,.1f} tok/s")
    return f"probe {number}: {plan.load_text(probe.load)}: {verdict} ({readings or probe.detail}){goodput}"


def result_line(search: CapacitySearch) -> str:
    result = search.result
    assert result is not None
    largest = search.load_text(result.largest_meeting) if result.largest_meeting is not None else "none"
    line = f"largest load meeting every target: {largest}"
    if result.smallest_missing is not None:
        line += f"; smallest not meeting: {search.load_text(result.smallest_missing)}"
    return f"{line}\nstopped: {STOP_REASONS[result.reason]}: {result.detail}"


def search_capacity(
    plan: SearchPlan,
    template: RunManifest,
    runs_dir: Path,
    run_probe: Callable[[RunDir], RunManifest],
    say: Callable[[str], None] = print,
) -> tuple[Path, CapacitySearch]:
    """Run the search: a folder in ``runs_dir`` with its record, and one run per probe made from ``template``
    (the manifest a sweep would start with, settings included) and run by ``run_probe``. A probe stopped by
    Ctrl-C or an error ends the search's record (probe failed) before the error goes on."""
    assert template.load is not None
    folder = Path(runs_dir) / new_run_id(f"find-max-{plan.mode}")
    folder.mkdir(parents=True, mode=0o700)
    server = template.server
    search = CapacitySearch(
        search_id=folder.name, created_at=utc_now(), mode=plan.mode, targets=plan.targets,
        first_load=plan.first_load, resolution=plan.resolution, resolution_relative=plan.relative,
        max_load=plan.max_load, url=server.url if server is not None else None)
    write_search(folder, search)
    say(f"capacity search {folder}: the most {plan.unit} meeting {targets_text(plan.targets)}")
    bisection = Bisection(plan)

    def probe(load: float) -> tuple[Outcome, str]:
        settings = plan.probe_settings(template.load, load)  # type: ignore[arg-type]
        label = f"probe-{load:g}{'users' if plan.mode == 'users' else 'rps'}"
        manifest = template.model_copy(update={"run_id": new_run_id(label), "created_at": utc_now(),
                                               "load": settings, "linked_runs": []})
        run = RunDir.create(folder, manifest)
        try:
            final = run_probe(run)
        except BaseException as error:
            stopped = run.read_manifest()
            why = str(error) or "stopped by Ctrl-C or a signal"
            search.probes.append(SearchProbe(load=load, run_id=run.path.name, status=stopped.status, meets=False,
                                             detail=why))
            bisection.record(load, "failed", why)
            _finish(folder, search, bisection)
            raise
        record, outcome = judge_probe(run, final, load)
        search.probes.append(record)
        write_search(folder, search)
        say(probe_line(len(search.probes), plan, record))
        return outcome, record.detail or ""

    bisection.run(probe)
    _finish(folder, search, bisection)
    say(result_line(search))
    return folder, search


def _finish(folder: Path, search: CapacitySearch, bisection: Bisection) -> None:
    search.result = bisection.result()
    search.ended_at = utc_now()
    write_search(folder, search)


def exit_problem(search: CapacitySearch) -> str | None:
    """What makes the command exit non-zero: a probe that failed (the search did not close its bracket)."""
    result = search.result
    if result is None or result.reason != "probe_failed":
        return None
    return f"capacity search {search.search_id} stopped: {result.detail}"
