"""The answer at a glance: a paragraph per run saying what it found, in numbers with their 95%
intervals, and across runs which one serves the most and by how much.

Why a paragraph ahead of the tables: a reader opens a report to learn how much the rig serves,
where it stops scaling, how fast each user still reads and what a token costs; the per-step tables
hold the evidence, this holds the answer. Every number in it is a figure of the report's own
sections (the steps summary.json holds, formatted as the tables format them), so the paragraph
and the tables cannot disagree. The same text ends ``rigbench local`` and ``rigbench sweep`` on the
terminal. Its terms (the report's definitions repeat them, :data:`DEFINITIONS`):

- the *best step* has the highest aggregate output tok/s; a step whose aggregate is absent (every
  request running in its window failed) is none, and a run with no aggregate at all says what
  happened at each step instead;
- at the best step, what one user sees: TTFT p90, then median per-user decode speed;
- the *knee* is the first step past which no larger step's aggregate tok/s interval lies wholly
  above this step's: more load gained nothing beyond noise. The sentence gives the knee's interval
  and the highest larger step's figure, the two the rule compared (a larger step's value may lie
  above the knee's interval while its interval does not). When each step up to the largest kept
  gaining beyond noise, the sweep found no knee;
- the *per-user floor* is :data:`PER_USER_FLOOR_TOK_S` of median per-user decode speed (the
  ``--min-tok-s`` rigbench cloud plans for unless told otherwise), read on the figure's value;
- *what limited it* at the best step is, where the report has the data, the reading of where a
  decode call's time goes (``analysis.time_budget``), else the share of the card's batched ceiling
  (``analysis.ceiling``), else the bandwidth roofline's reading (``analysis.roofline``);
- *what limits the card*, where the run's telemetry shows it, is one sentence per finding of
  ``analysis.card_limits`` (replicas taking turns on a GPU without MPS, or one server limited by its own loop);
- $/Mtok is given at the best step for the prices the run is priced at (its own instance type, the
  type ``--price-as`` names, or an hourly price given); a run that is not priced says so and how to
  price it (:data:`NOT_PRICED`, naming ``rigbench report``: the glance also ends
  ``rigbench local`` and ``rigbench sweep``, which take no price);
- across runs, the arm with the highest best aggregate is said to serve more than another only when
  the ratio of their best aggregates has a 95% interval between runs wholly above 1 (``analysis.repeats``:
  each arm run ``--repeats`` times); with one run of an arm the spread between runs is unknown and no
  difference is called, only measured; one arm run several times says how far its runs landed apart;
  runs that saw different contention (other processes' CPU, GPU clocks and slowdowns: ``analysis.contention``)
  are said to have.
"""

from __future__ import annotations

from collections.abc import Sequence

from analysis.card_limits import card_limits, glance_sentence
from analysis.ceiling import served_slots
from analysis.contention import contention_sentence
from analysis.figures import failures, failures_said
from analysis.intervals import Estimate, decimals
from analysis.repeats import (
    AGGREGATE,
    MEASURE_IT,
    ArmRuns,
    StepKey,
    arms_of,
    between_runs,
    paired_arms,
    ratio_between_runs,
    spread,
    step_at,
)
from analysis.report_model import RunSection
from analysis.roofline import reading
from analysis.run_name import short_names
from analysis.step import StepFigures
from core.wording import counted, listed

PER_USER_FLOOR_TOK_S = 10.0
DEFINITIONS = (
    "At a glance: the best step is the one with the highest aggregate output tok/s, with what one user sees there "
    "(TTFT p90, median per-user decode speed) and its $/Mtok where the run is priced; the knee is the first step "
    "past which no larger step's aggregate tok/s interval lies wholly above this step's (more load gained nothing "
    f"beyond noise); the per-user floor is {PER_USER_FLOOR_TOK_S:g} tok/s of median per-user decode speed (what "
    "rigbench cloud plans for by default), read on the figure's value; what limited the best step is read from "
    "where a decode call's time goes, else the card's batched ceiling, else the bandwidth roofline. Across runs, "
    "one arm serves more than another only when the ratio of their best aggregates has a 95% interval between "
    "runs wholly above 1 (each arm run --repeats times: paired t over the rounds of one series, else Welch's t); "
    "with one run of an arm the spread between runs is unknown and no difference is called."
)


def figure(estimate: Estimate, digits: int = 1) -> str:
    """``value [low, high]`` as the tables write it (without n)."""
    return estimate.short(digits)


def at(step: StepFigures) -> str:
    """The step's load as a sentence says it: ``1 user``, ``64 users``, ``2 req/s``."""
    if step.rate is not None:
        return f"{step.rate:g} req/s"
    return counted(step.users, "user")


def by_load(section: RunSection) -> list[StepFigures]:
    return sorted(section.figures.steps, key=lambda step: step.load)


def best_step(section: RunSection) -> StepFigures | None:
    """The step with the highest aggregate output tok/s (the first of equals)."""
    measured = [step for step in by_load(section) if step.aggregate_tok_s.value is not None]
    return max(measured, key=lambda step: step.aggregate_tok_s.value or 0.0) if measured else None


def _high(estimate: Estimate) -> float:
    return estimate.high if estimate.high is not None else estimate.value or 0.0


def _low(estimate: Estimate) -> float:
    return estimate.low if estimate.low is not None else estimate.value or 0.0


def knee_step(steps: Sequence[StepFigures]) -> StepFigures | None:
    """The first step (by load) that no larger step's aggregate interval lies wholly above; None with one step."""
    measured = [step for step in steps if step.aggregate_tok_s.value is not None]
    if len(measured) < 2:
        return None
    for position, step in enumerate(measured):
        later = measured[position + 1:]
        if all(_low(other.aggregate_tok_s) <= _high(step.aggregate_tok_s) for other in later):
            return step
    return measured[-1]  # unreachable: the last step has no later one


def knee_sentence(steps: Sequence[StepFigures]) -> str:
    """The knee by its rule, with the figures the rule compared: the knee's interval and the highest larger step's."""
    knee = knee_step(steps)
    if knee is None:
        return ""
    measured = [step for step in steps if step.aggregate_tok_s.value is not None]
    bare = [at(step) for step in measured if step.aggregate_tok_s.low is None or step.aggregate_tok_s.high is None]
    caveat = (f" ({', '.join(bare)} had no interval: there the point value stands in for it, so noise is not "
              "ruled out)") if bare else ""
    absent = [at(step) for step in steps if step.aggregate_tok_s.value is None]
    if absent:
        caveat += f" ({', '.join(absent)} had no aggregate to compare: see the warnings)"
    if knee is measured[-1]:
        below = measured[-2]
        return (f"Aggregate still gained beyond noise at the largest step: its interval at {at(knee)} "
                f"({figure(knee.aggregate_tok_s)} tok/s) lies wholly above the one at {at(below)} "
                f"({figure(below.aggregate_tok_s)}): no knee within the sweep{caveat}.")
    later = [step for step in measured if step.load > knee.load]
    top = max(later, key=lambda step: step.aggregate_tok_s.value or 0.0)
    return (f"The knee is at {at(knee)}: no larger step's aggregate interval lies wholly above this one's "
            f"({figure(knee.aggregate_tok_s)} tok/s; the highest larger step, {at(top)}, has "
            f"{figure(top.aggregate_tok_s)}), so more load gained nothing beyond noise{caveat}.")


def floor_sentence(steps: Sequence[StepFigures], floor: float = PER_USER_FLOOR_TOK_S) -> str:
    """Where median per-user decode speed first falls below ``floor``, or that it never does."""
    measured = [step for step in steps if step.per_user_tok_s.value is not None]
    unmeasured = [at(step) for step in steps if step.per_user_tok_s.value is None]
    missing = (f"; not measured at {', '.join(unmeasured)} (no request finished inside the window)"
               if unmeasured else "")
    if not measured:
        return "Per-user decode speed was not measured at any step (no request finished inside a window)."
    below = next((step for step in measured if (step.per_user_tok_s.value or 0.0) < floor), None)
    if len(measured) == 1:
        only = measured[0]
        side = "below" if below is not None else "at or above"
        return (f"Per-user decode speed at {at(only)} is {figure(only.per_user_tok_s)} tok/s, {side} the {floor:g} "
                f"tok/s floor{missing}.")
    if below is None:
        lowest = min(measured, key=lambda step: step.per_user_tok_s.value or 0.0)
        return (f"Per-user decode speed stays at or above the {floor:g} tok/s floor at every step that measured it "
                f"(lowest {figure(lowest.per_user_tok_s)} tok/s at {at(lowest)}){missing}.")
    text = f"Per-user decode speed falls below the {floor:g} tok/s floor at {at(below)} " \
           f"({figure(below.per_user_tok_s)} tok/s)"
    above = [step for step in measured if step.load < below.load]
    if above:
        text += f"; {at(above[-1])} is the last step above it ({figure(above[-1].per_user_tok_s)} tok/s)"
    else:
        text += ", the first step measured"
    return text + missing + "."


NOT_PRICED = "Cost: not priced: rigbench report RUN --price-as TYPE (or --usd-per-hour USD) prices it."


def cost_sentence(section: RunSection, best: StepFigures) -> str:
    """$/Mtok at the best step for each price the run is priced at (its own, not a hypothetical type's); a run that
    is not priced is told how to price it."""
    position = section.figures.steps.index(best)
    costs = [
        f"${figure(cost, 3)} per million output tokens at {choice.label}"
        for choice, cost in zip(section.prices, section.cost_rows[position], strict=True)
        if not choice.hypothetical and cost.value is not None
    ]
    return f"At that step output costs {', and '.join(costs)}." if costs else NOT_PRICED


def latency_clause(step: StepFigures) -> str:
    """What one user sees at ``step``: time to first token (p90), then decode speed (median)."""
    ttft, speed = step.ttft_s["p90"], step.per_user_tok_s
    if ttft.value is None and speed.value is None:
        return "no request finished inside its window there, so latency was not measured"
    said = []
    if ttft.value is not None:
        said.append(f"a user waits {figure(ttft, 3)} s for the first token (TTFT p90)")
    if speed.value is not None:
        said.append(f"{'then ' if said else 'a user '}reads {figure(speed)} tok/s (median per-user decode speed)")
    return "there " + " and ".join(said)


def nothing_measured(section: RunSection) -> str:
    """A run no step of which has an aggregate: what happened at each step instead."""
    load = section.figures.run.manifest.load
    read_timeout = load.read_timeout_seconds if load is not None else None
    said = []
    for step in by_load(section):
        failed = failures(step)
        said.append(f"at {at(step)} every request running in the window failed ({failures_said(failed, read_timeout)})"
                    if failed else f"at {at(step)} no request ran in the window")
    return (f"No step has an aggregate output rate: {'; '.join(said)}. No throughput, latency or cost stands on "
            "that: see the warnings.")


def _limit_reading(section: RunSection, step: StepFigures) -> str:
    """The most specific reading the report has of one step; empty without one."""
    budget = section.budget
    if budget is not None and not step.open_loop:
        found = next((s for s in budget.steps if s.users == step.users), None)
        if found is not None:
            return (f"it served {found.served_share:.2f} of the card's batched ceiling (llama-batched-bench), "
                    f"{found.reading} (see where one decode call's time goes)")
    ceiling = section.ceiling
    if ceiling is not None and not step.open_loop and step.aggregate_tok_s.value is not None:
        batched = ceiling.at(step.users, served_slots(section.figures.run))
        if batched:
            return (f"it served {step.aggregate_tok_s.value / batched:.2f} of the card's batched ceiling "
                    "(llama-batched-bench with as many sequences)")
    roofline = section.roofline
    if roofline is not None and roofline.left_out is None:
        roof = roofline.step(step.index)
        if roof is not None:
            return reading(roof, roofline.drafter)
    return ""


def limit_sentence(section: RunSection, best: StepFigures) -> str:
    """What limited the best step; where it has no reading, the step just below it when that one has (a batch
    is not read from one user alone); else nothing."""
    said = _limit_reading(section, best)
    if said:
        return f"What limited it at {at(best)}: {said}."
    smaller = [step for step in by_load(section) if step.load < best.load]
    if not smaller or (not best.open_loop and best.users > 1 and smaller[-1].users == 1):
        return ""
    said = _limit_reading(section, smaller[-1])
    return (f"What limited it at {at(smaller[-1])}, the step below (no reading at {at(best)}): {said}."
            if said else "")


def run_headline(section: RunSection, sections: Sequence[RunSection] = ()) -> str:
    """One run's paragraph; ``sections``: the report's runs, which what limits the card reads across."""
    steps = by_load(section)
    best = best_step(section)
    if best is None:
        return nothing_measured(section)
    opening = (f"Best aggregate output {figure(best.aggregate_tok_s)} tok/s at {at(best)}; {latency_clause(best)} "
               "(95% intervals in brackets).")
    parts = [opening, knee_sentence(steps), floor_sentence(steps), cost_sentence(section, best),
             limit_sentence(section, best), glance_sentence(card_limits(section, sections))]
    return " ".join(part for part in parts if part)


def _percent(ratio: Estimate) -> str:
    """``+12.3% [+4.5%, +20.1%]``: the ratio's change in percent, with the decimals it needs (``decimals``)."""
    change = [None if v is None else (v - 1) * 100 for v in (ratio.value or 1.0, ratio.low, ratio.high)]
    places = decimals(*change, digits=1)
    text = f"{change[0]:+.{places}f}%"
    if change[1] is not None and change[2] is not None:
        text += f" [{change[1]:+.{places}f}%, {change[2]:+.{places}f}%]"
    return text


def comparison_headline(sections: Sequence[RunSection]) -> str:
    """Across runs: the arm with the highest best aggregate, and by how much it is above each other arm, judged
    by the spread between runs (``analysis.repeats``): beyond noise, inside it, or unknown with one run of an
    arm; one arm run several times: how far its runs landed apart. Empty for one run, or for runs of different
    load kinds (they are not paired)."""
    if len(sections) < 2 or len({section.figures.open_loop for section in sections}) > 1:
        return ""
    contention = contention_sentence(sections)
    return " ".join(part for part in (arms_headline(sections), contention) if part)


def arms_headline(sections: Sequence[RunSection]) -> str:
    """The comparison of the arms' best aggregates (``comparison_headline`` without the machine's noise)."""
    shared, _ = short_names([section.figures.run.manifest for section in sections])
    arms = [arm for arm in arms_of(sections) if arm_best(arm) is not None]
    if len(arms) == 1:
        return repeat_spread_sentence(arms[0], shared)
    if len(arms) < 2:
        return ""
    bests = {arm.label: arm_best(arm) for arm in arms}
    arms.sort(key=lambda arm: between_runs(list(bests[arm.label][1].values())).value or 0.0, reverse=True)
    top, others = arms[0], arms[1:]
    top_key, top_values = bests[top.label]
    above, level, unknown = [], [], []
    for arm in others:
        key, values = bests[arm.label]
        ratio, verdict, _ = ratio_between_runs(values, top_values, paired_arms(arm, top))
        said = f"{arm.label} ({arm_figure(arm, key)} at {at_key(arm, key)})"
        {"beyond noise": above, "within noise": level, "unknown": unknown}[verdict].append(
            f"{_percent(ratio)} above {said}" if verdict != "within noise" else said)
    runs = runs_said(arms, shared)
    opening = (f"Across {runs}, {top.label} has the highest aggregate output, {arm_figure(top, top_key)} tok/s at "
               f"{at_key(top, top_key)}")
    parts = []
    if above:
        parts.append(f"{listed(above)} (ratios of the best aggregates, 95% intervals between runs)")
    if level:
        parts.append(f"no difference beyond the spread between runs from {listed(level)}")
    if unknown:
        parts.append(f"measured {listed(unknown)}, but with one run of an arm the spread between runs is unknown, so "
                     f"no difference is called; {MEASURE_IT}")
    return f"{opening}: {'; '.join(parts)}."


def arm_best(arm: ArmRuns) -> tuple[StepKey, dict[int, float]] | None:
    """The arm's best step (the highest mean aggregate over its runs) and each run's aggregate there."""
    measured = [(key, arm.values(AGGREGATE, key)) for key in arm.step_keys()]
    measured = [(key, values) for key, values in measured if values]
    return max(measured, key=lambda item: float(sum(item[1].values())) / len(item[1])) if measured else None


def arm_figure(arm: ArmRuns, key: StepKey) -> str:
    """The arm's aggregate at a step: its one run's figure (with that run's own interval), or the mean of its runs
    with the interval between them."""
    if arm.repeats == 1:
        step = step_at(arm.sections[0], key)
        assert step is not None
        return figure(step.aggregate_tok_s)
    return figure(between_runs(list(arm.values(AGGREGATE, key).values())))


def at_key(arm: ArmRuns, key: StepKey) -> str:
    step = next(step for section in arm.sections if (step := step_at(section, key)) is not None)
    return at(step)


def runs_said(arms: Sequence[ArmRuns], shared: str) -> str:
    counts = sorted({arm.repeats for arm in arms})
    each = " of unequal runs" if len(counts) > 1 else f" x {counts[0]} runs" if counts[0] > 1 else ""
    return f"{len(arms)} arms{each}" + (f" of {shared}" if shared else "")


def repeat_spread_sentence(arm: ArmRuns, shared: str) -> str:
    """One arm run several times: its best aggregate between runs, and how far its runs landed apart."""
    best = arm_best(arm)
    if best is None or arm.repeats < 2:
        return ""
    key, values = best
    apart = spread(list(values.values()))
    where = f" ({shared})" if shared else ""
    text = (f"Across {arm.repeats} runs of {arm.label}{where}, the best aggregate output is {arm_figure(arm, key)} "
            f"tok/s at {at_key(arm, key)} (mean of the runs, 95% interval between them)")
    if apart is not None:
        text += f"; the runs landed {apart:.1%} apart (coefficient of variation): the noise a comparison is judged by"
    return text + "."


def headline(sections: Sequence[RunSection]) -> list[str]:
    """The report's paragraphs at a glance: across runs first, then each run's, a list item named by its run when
    there are several (so no line of it on a terminal starts like another line a script reads there)."""
    if len(sections) == 1:
        return [run_headline(sections[0], sections)]
    _, names = short_names([section.figures.run.manifest for section in sections])
    paragraphs = [comparison_headline(sections)]
    paragraphs += [f"- {name}: {run_headline(section, sections)}"
                   for name, section in zip(names, sections, strict=True)]
    return [paragraph for paragraph in paragraphs if paragraph]


def headline_text(sections: Sequence[RunSection]) -> str:
    """The paragraphs as the terminal shows them."""
    return "\n\n".join(headline(sections))
