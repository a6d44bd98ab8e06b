"""Capacity plans: how many instances of each measured rig serve N users at the targets.

For each run (one rig configuration) and each price, read the sweep *conservatively*:

- a step meets the targets when the lower end of its median per-user tok/s interval (client
  measure, what a user sees; server timings when the client cannot give it) is at least
  ``min_tok_s``, the upper end of its TTFT p90 interval is at most ``ttft_p90_s``, and it had
  no errors;
- walking up the user counts, capacity is the last step that meets them before the first
  that does not (a later step that passes again is not trusted); between that step and the
  first failing one the crossing of each failed target is interpolated linearly in users and
  rounded down (no interpolation past a failure caused by errors, and none beyond the largest
  measured step);
- instances = ceil(N / capacity); $/h = instances x price; $/Mtok at capacity uses the lower
  end of the aggregate tok/s interval, interpolated the same way.

An open-loop run (steps of offered requests/s) gives capacity in requests per second: the
highest offered rate whose step meets the targets (TTFT counted from the intended starts), before
the first that does not. Rates are not interpolated: past the server's saturation an open loop's
queue grows for as long as the step lasts, so latency is far from linear in the rate. Instances =
ceil(requests/s to serve / capacity), so such a plan needs the rate to serve (``Targets.rate``);
users do not convert to requests/s.

A capacity search (``rigbench sweep --find-max``, ``core.rundir.capacity_search``) needs no reading
of steps: its result is the largest load it measured meeting every service-level target (each
target's 95% interval within it, no failed request), so its capacity is that load, with the lower
end of that probe's aggregate tok/s interval, priced as that probe's run is; its own targets stand in
for ``min_tok_s`` and ``ttft_p90_s``.

Which rigs: a run's plans come from its prices (``analysis.cost``): the type it ran on, the type
``--price-as`` says its machine counts as, or the hourly price ``--usd-per-hour`` gives it, and only with
``--hypothetical`` types it is extrapolated to. A run with no price is not ranked (its "not priced" line
says why). For a price that is a per-GPU share of a multi-GPU instance, an "instance" is one GPU of it;
for a given price, a machine like the one measured. A price of hardware that did not measure the run
names the machine that did in its label (``g6e.xlarge on-demand (hypothetical), measured on CPU (2
cores)``) and in the plan's JSON (``measured_on``): a plan read off a CPU run and priced as an L40S
says so on every line.

An arm run in repeats (``--repeats N``: runs of one series and arm) is one candidate, not N: its runs measured one
rig. A plan must hold on the worst run seen, so its instances are sized from the lowest capacity among the repeats,
its $/Mtok and J/token are that repeat's, and its basis names every repeat's capacity (``lowest of 3 repeats (8, 8,
6 users): ...``). A repeat whose smallest step has no figure to read is absent (-) there, not a capacity of 0.
Repeats of one arm that measured different workloads are refused, as ``rigbench gate`` refuses them.

Plans are ranked by $/h, then $/Mtok. Beside each plan: the share of the card's bandwidth roof
(``analysis.roofline``) that the last measured step meeting the targets reached, so a plan that
leaves most of the card's memory bandwidth unused says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from analysis.cost import PriceChoice, dollars_per_mtok
from analysis.figures import RunFigures
from analysis.gate import WORKLOAD_KEYS, workload
from analysis.goodput_section import targets_text
from analysis.intervals import Estimate
from analysis.repeats import ArmRuns, arms_of
from analysis.roofline import RunRoofline, StepRoofline
from analysis.step import StepFigures
from core.errors import AnalysisError
from core.rundir.capacity_search import CapacitySearch
from core.wording import counted


@dataclass(frozen=True)
class Targets:
    users: int
    min_tok_s: float
    ttft_p90_s: float
    rate: float | None = None  # requests/s to serve, for open-loop runs


@dataclass(frozen=True)
class Capacity:
    """What one instance serves at the targets: users (closed loop) or requests/s (open loop)."""

    users_per_instance: float
    aggregate_tok_s: float | None
    basis: str
    unit: str = "users"

    @property
    def per_instance(self) -> float:
        return self.users_per_instance

    def describe(self) -> str:
        return f"{self.users_per_instance:g} {'req/s' if self.unit == 'requests/s' else 'users'}"


@dataclass(frozen=True)
class Plan:
    run_label: str
    price: PriceChoice
    capacity: Capacity
    instances: int | None
    usd_per_hour: float | None
    usd_per_mtok: float | None
    roof: StepRoofline | None = None  # the last measured step meeting the targets, against the card's roof
    j_per_token: Estimate | None = None  # the GPUs' joules per output token at that step, where the run sampled them
    # an arm's repeats pooled into this plan: (run id, repeat index, its capacity; None where it read no figure)
    repeats: tuple[tuple[str, int, float | None], ...] = ()
    capacity_from: str | None = None  # the repeat whose capacity, $/Mtok and energy the pooled plan gives

    def roof_cell(self) -> str:
        """'12.3% at 16 users' (aggregate tok/s over the batch roof), or '-' without a roofline."""
        if self.roof is None or self.roof.aggregate_fraction is None:
            return "-"
        step = self.roof.figures
        where = step.load_label
        return f"{self.roof.aggregate_fraction:.1%} at {where}"

    def instances_text(self) -> str:
        """'3 instances', '3 GPUs, each 1/8 of a p5en.48xlarge' for a per-GPU share, or '3 machines like the one
        measured' at a given price."""
        if self.price.gpu_share > 1:
            return (f"{counted(self.instances, 'GPU')}, each 1/{self.price.gpu_share} of a "
                    f"{self.price.quote.instance_type}")
        if self.price.basis == "given":
            return f"{counted(self.instances, 'machine')} like the one measured"
        return counted(self.instances, "instance")

    def to_dict(self) -> dict:
        if self.capacity.unit == "requests/s":
            capacity = {"users_per_instance": None, "requests_per_second_per_instance": self.capacity.per_instance}
        else:
            capacity = {"users_per_instance": self.capacity.per_instance}
        return {
            "run": self.run_label,
            "price": self.price.quote.model_dump(),
            "hypothetical": self.price.hypothetical,
            "price_basis": self.price.basis,
            "gpu_share": self.price.gpu_share,
            "price_label": self.price.label,
            "measured_on": self.price.measured_on,  # the machine that measured it, where it is not the priced type
            **capacity,
            "aggregate_tok_s_at_capacity": self.capacity.aggregate_tok_s,
            "basis": self.capacity.basis,
            "instances": self.instances,
            "usd_per_hour": self.usd_per_hour,
            "usd_per_mtok": self.usd_per_mtok,
            "bandwidth_roof_fraction": None if self.roof is None else self.roof.aggregate_fraction,
            "bandwidth_roof_tok_s": None if self.roof is None else self.roof.roof_batch,
            **({"capacity_from": self.capacity_from, "repeats": [
                {"run_id": run_id, "repeat": index, "capacity_per_instance": value}
                for run_id, index, value in self.repeats]} if self.repeats else {}),
        }


def conservative_per_user(step: StepFigures) -> float | None:
    estimate = step.per_user_tok_s
    if estimate.value is None:
        return None
    return estimate.low if estimate.low is not None else estimate.value


def conservative_ttft_p90(step: StepFigures) -> float | None:
    estimate = step.ttft_s["p90"]
    if estimate.value is None:
        return None
    return estimate.high if estimate.high is not None else estimate.value


def conservative_aggregate(step: StepFigures) -> float | None:
    estimate = step.aggregate_tok_s
    return estimate.low if estimate.low is not None else estimate.value


def meets(step: StepFigures, targets: Targets) -> bool:
    per_user, ttft = conservative_per_user(step), conservative_ttft_p90(step)
    return (
        step.error_count == 0
        and per_user is not None
        and per_user >= targets.min_tok_s
        and ttft is not None
        and ttft <= targets.ttft_p90_s
    )


def crossing(u1: float, v1: float, u2: float, v2: float, target: float) -> float:
    """Users where the line through (u1, v1) and (u2, v2) reaches target (v1 meets it, v2 not)."""
    if v2 == v1:
        return u1
    return u1 + (target - v1) * (u2 - u1) / (v2 - v1)


def _interpolate(u1: float, v1: float | None, u2: float, v2: float | None, users: float) -> float | None:
    if v1 is None or v2 is None or u2 == u1:
        return v1
    return v1 + (v2 - v1) * (users - u1) / (u2 - u1)


def last_pass_first_fail(
    ordered: list[StepFigures], targets: Targets
) -> tuple[StepFigures | None, StepFigures | None]:
    """Along steps in order of load: the last that meets the targets before the first that does not."""
    last_pass: StepFigures | None = None
    for step in ordered:
        if not meets(step, targets):
            return last_pass, step
        last_pass = step
    return last_pass, None


def rate_capacity(steps: list[StepFigures], targets: Targets) -> Capacity:
    """An open-loop sweep's capacity: the highest offered rate meeting the targets before the first failure."""
    ordered = sorted(steps, key=lambda s: s.load)
    last_pass, first_fail = last_pass_first_fail(ordered, targets)
    unit = "requests/s"
    if last_pass is None:
        return Capacity(0, None, f"targets not met at the smallest offered rate ({ordered[0].load:g} req/s)", unit)
    rate = last_pass.load
    if first_fail is None:
        basis = f"targets met at every offered rate; capacity at least {rate:g} req/s (no extrapolation)"
        return Capacity(rate, conservative_aggregate(last_pass), basis, unit)
    why = "errors" if first_fail.error_count > 0 else "targets missed"
    basis = (
        f"highest offered rate meeting the targets {rate:g} req/s; {why} at {first_fail.load:g} req/s "
        "(rates not interpolated)"
    )
    return Capacity(rate, conservative_aggregate(last_pass), basis, unit)


def capacity(steps: list[StepFigures], targets: Targets) -> Capacity:
    if any(step.rate is not None for step in steps):
        return rate_capacity(steps, targets)
    ordered = sorted(steps, key=lambda s: s.users)
    last_pass, first_fail = last_pass_first_fail(ordered, targets)
    if last_pass is None:
        return Capacity(0, None, f"targets not met at the smallest measured step ({counted(ordered[0].users, 'user')})")
    if first_fail is None:
        return Capacity(
            last_pass.users,
            conservative_aggregate(last_pass),
            f"targets met at every measured step; capacity at least {last_pass.users} (no extrapolation)",
        )
    u1, u2 = last_pass.users, first_fail.users
    if first_fail.error_count > 0:
        return Capacity(u1, conservative_aggregate(last_pass), f"errors at {counted(u2, 'user')}; measured step {u1}")
    limits = [float(u2)]
    p1, p2 = conservative_per_user(last_pass), conservative_per_user(first_fail)
    if p1 is not None and p2 is not None and p2 < targets.min_tok_s:
        limits.append(crossing(u1, p1, u2, p2, targets.min_tok_s))
    t1, t2 = conservative_ttft_p90(last_pass), conservative_ttft_p90(first_fail)
    if t1 is not None and t2 is not None and t2 > targets.ttft_p90_s:
        limits.append(crossing(u1, t1, u2, t2, targets.ttft_p90_s))
    users = max(float(u1), float(math.floor(min(limits))))
    if users >= u2:
        users = float(u1)
    aggregate = _interpolate(u1, conservative_aggregate(last_pass), u2, conservative_aggregate(first_fail), users)
    return Capacity(users, aggregate, f"interpolated between measured steps {u1} and {u2} users")


def roof_at_capacity(figures: RunFigures, targets: Targets, roofline: RunRoofline | None) -> StepRoofline | None:
    """The roofline of the last measured step meeting the targets (capacity's own reading of the sweep)."""
    if roofline is None:
        return None
    last_pass, _ = last_pass_first_fail(sorted(figures.steps, key=lambda s: s.load), targets)
    return roofline.step(last_pass.index) if last_pass is not None else None


def energy_at_capacity(figures: RunFigures, targets: Targets) -> Estimate | None:
    """J per output token at the last measured step meeting the targets (capacity's own reading)."""
    last_pass, _ = last_pass_first_fail(sorted(figures.steps, key=lambda s: s.load), targets)
    return None if last_pass is None or last_pass.energy is None else last_pass.energy.j_per_token


# why a search stopped, as a plan's basis says it
SEARCH_STOPS = {"resolution": "measured to its resolution", "max_load_met": "at its --max-load: it may serve more",
                "first_missed": "its first probe already missed", "probe_failed": "a probe failed: not narrowed"}


def search_capacity(search: CapacitySearch) -> Capacity:
    """A capacity search's answer as capacity: its largest load meeting every target, measured (no interpolation
    and no guess from a knee), with the lower end of that probe's aggregate tok/s interval."""
    unit = "users" if search.mode == "users" else "requests/s"
    result = search.result
    named = f"capacity search {search.search_id}"
    if result is None:
        return Capacity(0, None, f"{named}: no result recorded (it stopped while a probe ran)", unit)
    if result.largest_meeting is None:
        return Capacity(0, None, f"{named}: no probed load met {targets_text(search.targets)} "
                        f"({SEARCH_STOPS[result.reason]})", unit)
    probe = search.probe(result.largest_meeting)
    aggregate = None if probe is None else (
        probe.aggregate_tok_s_low if probe.aggregate_tok_s_low is not None else probe.aggregate_tok_s)
    missing = "" if result.smallest_missing is None else f", {search.load_text(result.smallest_missing)} did not"
    basis = (f"{named}: {search.load_text(result.largest_meeting)} met {targets_text(search.targets)}{missing} "
             f"({SEARCH_STOPS[result.reason]})")
    return Capacity(result.largest_meeting, aggregate, basis, unit)


def plan_for(figures: RunFigures, price: PriceChoice, targets: Targets, roofline: RunRoofline | None = None,
             search: CapacitySearch | None = None) -> Plan:
    """``search``: the capacity search ``figures`` is the best probe of; its result is the capacity."""
    if search is not None:
        cap = search_capacity(search)
        at = figures.steps[0] if cap.per_instance > 0 and figures.steps else None
        roof = roofline.step(at.index) if roofline is not None and at is not None else None
        energy = at.energy.j_per_token if at is not None and at.energy is not None else None
    else:
        cap = capacity(figures.steps, targets)
        roof = roof_at_capacity(figures, targets, roofline)
        energy = energy_at_capacity(figures, targets)
    if cap.per_instance <= 0:
        return Plan(figures.run.label, price, cap, None, None, None, roof, energy)
    if cap.unit == "requests/s":
        if targets.rate is None:
            basis = f"{cap.basis}; an open-loop run: give the requests/s to serve to size instances"
            return Plan(figures.run.label, price, replace(cap, basis=basis), None, None, None, roof, energy)
        demand = targets.rate
    elif targets.users <= 0:
        basis = f"{cap.basis}; a closed-loop run: give the users to serve to size instances"
        return Plan(figures.run.label, price, replace(cap, basis=basis), None, None, None, roof, energy)
    else:
        demand = targets.users
    instances = math.ceil(demand / cap.per_instance)
    hourly = price.quote.usd_per_hour
    return Plan(
        figures.run.label,
        price,
        cap,
        instances,
        instances * hourly,
        dollars_per_mtok(hourly, cap.aggregate_tok_s),
        roof,
        energy,
    )


def rank(plans: list[Plan]) -> list[Plan]:
    """Feasible plans by $/h then $/Mtok; plans that cannot meet the targets last."""
    return sorted(
        plans,
        key=lambda p: (p.usd_per_hour is None, p.usd_per_hour or 0.0, p.usd_per_mtok or math.inf, p.run_label),
    )


def plans_for_sections(sections: list, targets: Targets,
                       searches: Mapping[Path, CapacitySearch] | None = None) -> list[Plan]:
    """Every (candidate, price) pair of report sections (``report_model.RunSection``), ranked: a run is a candidate,
    except that an arm's repeats are one (:func:`pooled_plans`), since they measured one rig, not several;
    ``searches``: by a section's run path, the capacity search it is the best probe of (its capacity is the
    search's result)."""
    searches = searches or {}
    plans: list[Plan] = []
    for arm in arms_of(sections):
        if poolable(arm, searches):
            plans += pooled_plans(arm, targets)
            continue
        plans += [plan_for(section.figures, price, targets, section.roofline, searches.get(section.figures.run.path))
                  for section in arm.sections for price in section.prices]
    return rank(plans)


def poolable(arm: ArmRuns, searches: Mapping[Path, CapacitySearch]) -> bool:
    """Whether an arm's runs pool into one candidate: two or more repeats, each one run (a repeat resumed into a
    linked run holds part of its sweep in each, and neither part alone reads its capacity), none a search's."""
    return (len(arm.sections) > 1 and len(set(arm.indexes)) == len(arm.indexes)
            and not any(section.figures.run.path in searches for section in arm.sections))


def reads_no_figure(steps: list[StepFigures]) -> bool:
    """Whether a sweep's capacity rests on no measured figure: its smallest step had no error but lacks the per-user
    tok/s or TTFT p90 the targets are read on, so its "not met" is a 0 with nothing behind it, not a capacity."""
    if not steps:
        return True
    first = min(steps, key=lambda step: step.load)
    return first.error_count == 0 and (conservative_per_user(first) is None or conservative_ttft_p90(first) is None)


def refuse_mixed_workloads(arm: ArmRuns) -> None:
    """Repeats of one arm that measured different workloads are not one rig's runs: pooling them would price one
    workload by another's capacity, so they are refused, naming the difference (as ``rigbench gate`` does)."""
    first = arm.sections[0].figures.run.manifest
    ours = workload(first)
    for section in arm.sections[1:]:
        other = section.figures.run.manifest
        theirs = workload(other)
        differences = [f"{key} {ours[key][1]} in {first.run_id}, {theirs[key][1]} in {other.run_id}"
                       for key in WORKLOAD_KEYS if ours[key][0] != theirs[key][0]]
        if differences:
            raise AnalysisError(f"runs {first.run_id} and {other.run_id} are repeats of arm {arm.label} but measure "
                                f"different workloads ({'; '.join(differences)}); a plan pools an arm's repeats, so "
                                "give repeats of one workload")


def worst_first(plan: Plan) -> tuple[float, float]:
    """The lower capacity first, then the lower aggregate at capacity (one not measured last)."""
    aggregate = plan.capacity.aggregate_tok_s
    return plan.capacity.per_instance, math.inf if aggregate is None else aggregate


def pooled_plans(arm: ArmRuns, targets: Targets) -> list[Plan]:
    """One plan per price for an arm run in repeats. A plan must hold on the worst run seen, so instances are sized
    from the lowest capacity among the repeats, and its $/Mtok, energy and roof come from that same repeat (the
    lower aggregate on a tie); the basis names every repeat's capacity. A repeat that read no figure
    (:func:`reads_no_figure`) is shown absent (-) and does not count as the lowest."""
    refuse_mixed_workloads(arm)
    manifest = arm.sections[0].figures.run.manifest
    label = f"{manifest.rig.instance_type or manifest.rig.kind} {arm.label} ({counted(len(arm.sections), 'repeat')})"
    plans = []
    for price_label in dict.fromkeys(price.label for section in arm.sections for price in section.prices):
        readings = []  # (repeat index, run id, its plan, whether its capacity rests on a figure)
        for index, section in zip(arm.indexes, arm.sections, strict=True):
            price = next((each for each in section.prices if each.label == price_label), None)
            if price is not None:
                readings.append((index, section.figures.run.manifest.run_id,
                                 plan_for(section.figures, price, targets, section.roofline),
                                 not reads_no_figure(section.figures.steps)))
        measured = [(plan, run_id) for _, run_id, plan, read in readings if read]
        worst, run_id = (min(measured, key=lambda item: worst_first(item[0])) if measured
                         else (readings[0][2], readings[0][1]))
        unit = "req/s" if worst.capacity.unit == "requests/s" else "users"
        values = ", ".join(f"{plan.capacity.per_instance:g}" if read else "-" for _, _, plan, read in readings)
        absent = "; - read no figure at its smallest step" if not all(read for *_, read in readings) else ""
        said = (f"lowest of {counted(len(readings), 'repeat')} ({values} {unit}{absent})" if measured
                else f"no repeat of {len(readings)} read a capacity ({values}{absent})")
        plans.append(replace(worst, run_label=label, capacity=replace(worst.capacity,
                                                                       basis=f"{said}: {worst.capacity.basis}"),
                             repeats=tuple((run, index, plan.capacity.per_instance if read else None)
                                           for index, run, plan, read in readings), capacity_from=run_id))
    return plans


def plan_table(plans: list[Plan]) -> str:

    mixed = any(plan.capacity.unit != "users" for plan in plans)
    rows = []
    for rank_number, plan in enumerate(plans, 1):
        feasible = plan.instances is not None
        rows.append(
            [
                rank_number if feasible else "-",
                plan.run_label,
                plan.price.label,
                plan.capacity.describe() if mixed else f"{plan.capacity.users_per_instance:g}",
                plan.instances if feasible else "-",
                f"{plan.usd_per_hour:.3f}" if plan.usd_per_hour is not None else "-",
                f"{plan.usd_per_mtok:.3f}" if plan.usd_per_mtok is not None else "-",
                plan.roof_cell(),
                plan.capacity.basis,
            ]
        )
    capacity_header = "capacity/instance" if mixed else "users/instance"
    headers = [
        "rank", "rig (run)", "price", capacity_header, "instances", "$/h", "$/Mtok at capacity",
        "aggregate, of the measured card's bandwidth roof", "basis",
    ]
    if any(plan.j_per_token is not None for plan in plans):  # a column only where some run sampled energy
        headers.insert(7, "J per output token at capacity (lower is better)")
        for row, plan in zip(rows, plans, strict=True):
            row.insert(7, "-" if plan.j_per_token is None else plan.j_per_token.short(4))
    return tabulate(rows, headers=headers, tablefmt="github")
