"""The report's "where one decode call's time goes" section: each run's budget (``analysis.time_budget``)
against its batched ceiling, with the pairs of runs in the same report that split it.

Why across the report's runs: one run shows how long a call took beyond the card's step, not
why; a second run of the same model on the same machine that differs in one property (sampling
on the CPU or GPU, scattered or packed slots) shows what that property costs. So the pairs are
found among the runs given to one ``rigbench report``, and each run's section says which.
"""

from __future__ import annotations

from tabulate import tabulate

from analysis.arms import arm_of
from analysis.ceiling import served_slots
from analysis.report_model import RunSection
from analysis.time_budget import NEAR_CEILING, PARTS, ArmRun, Pair, RunBudget, arm_run, run_budgets

TITLE = "### Where one decode call's time goes"
DRAFTER = ("With a drafter one decode call verifies several drafted tokens per sequence (and the draft model "
           "makes calls of its own), so it does not compare with one step of the card's batched decode: no budget.")


def _arm_run(section: RunSection) -> ArmRun | None:
    """The run as an arm with its steps, when it has what a budget needs: a closed loop, a matching
    ceiling, and the server's decode counts."""
    figures = section.figures
    if figures.open_loop or section.ceiling is None or not figures.decode_calls_per_s:
        return None
    arm = arm_of(figures.run.manifest, section.label)
    if arm is None:
        return None
    rates = figures.decode_calls_per_s
    calls = {step.users: rates[step.index] for step in figures.steps if step.index in rates}
    return arm_run(arm, figures.steps, calls, section.ceiling, served_slots(figures.run))


def attach_budgets(sections: list[RunSection]) -> None:
    """Set each section's budget, the pairs found across all the sections given."""
    measured = [(section, run) for section in sections if (run := _arm_run(section)) is not None]
    for section, _ in measured:
        if section.figures.run.manifest.drafter is not None:
            section.budget = RunBudget([], [], DRAFTER)
    paired = [(section, run) for section, run in measured if section.budget is None]
    pairs, budgets = run_budgets([run for _, run in paired])
    for (section, run), steps in zip(paired, budgets, strict=True):
        if steps:
            section.budget = RunBudget(steps, [pair for pair in pairs if pair.costly.arm.group == run.arm.group])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pair_text(pair: Pair) -> str:
    costly, cheap = pair.part.sides
    return f"`{pair.costly.arm.label}` {costly} against `{pair.cheap.arm.label}` {cheap}"


def pairs_sentence(pairs: list[Pair]) -> str:
    """Which runs were paired for what, and what stays in the server loop for want of a pair."""
    if not pairs:
        return ("No two runs of this model and machine in this report differ in sampling alone or in the slot "
                "layout alone, so the rest of the call beyond the card's step is not split further: the server "
                "loop holds it all.")
    named = []
    for part in PARTS:
        found = [_pair_text(pair) for pair in pairs if pair.part is part]
        named.append(f"for {part.name}, " + ", and ".join(found) if found else
                     f"for {part.name}, none (what it costs is not split from the server loop)")
    return "Paired in this report (same model file and machine, otherwise alike): " + "; ".join(named) + "."


def budget_section(budget: RunBudget | None) -> list[str]:
    """Markdown: per step the card's step, the server's call and its parts, and the reading."""
    if budget is None:
        return []
    if budget.left_out:
        return [TITLE, "", budget.left_out, ""]
    rows = [[step.users, f"{step.served_share:.2f}", _ms(step.ceiling_ms), _ms(step.call_ms), _ms(step.sampling_ms),
             _ms(step.slots_ms), _ms(step.rest_ms), step.reading] for step in budget.steps]
    return [
        TITLE, "",
        "The card's step is llama-batched-bench's time for one step of as many sequences (users ÷ its decode "
        "tok/s: no server, no sampling); the server's call is one decode call of llama-server (1000 ÷ its "
        "`llamacpp:n_decode_total` calls per second over the window, prompt calls included). Sampling and slot "
        "layout are what a run sampling on the CPU, or with scattered slots, took per call over a partner that "
        "differs in that alone; the server loop is the rest (HTTP, scheduling, per-token bookkeeping).",
        "",
        pairs_sentence(budget.pairs),
        "",
        tabulate(rows, headers=["users", "served ÷ ceiling", "card's step ms", "server's call ms", "sampling ms",
                                "slot layout ms", "server loop ms", "reading"],
                 tablefmt="github", disable_numparse=True),
        "",
        f"Reading: at {NEAR_CEILING:g} of the ceiling or more, near it; below, the largest part of the call "
        "beyond the card's step names what bounds the step.",
        "",
    ]
