"""The MPS study's tables, read back from its folder: what each replica arm served against the card's ceiling, its
energy per token, how busy the GPU was, what autotune kept, and the small host.

Every figure comes from the arms' own run directories through the report's code (``analysis.report_model``), so
these tables and each run's ``report.md`` cannot disagree. The ceiling of a step is llama-batched-bench's decode
speed for as many sequences as the servers could decode at once: the users, or the slots (64) when there are
more users than slots, since a user past the slots waits and adds nothing to what decodes together.
"""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from analysis.ceiling import served_slots
from analysis.intervals import Estimate
from analysis.prices import PriceBook
from analysis.report_model import RunSection, build_section
from rigbench.autotune import (
    LOG_NAME,
    TrialResult,
    autotune_table,
    best_trial,
    kept_sentence,
    read_trials,
    trial_run,
    trial_runs,
)
from rigbench.studies.mps_study import ARMS_FOLDER, SMALL_HOST_FOLDER

TARGET_SHARE = 0.6  # the best arm's served ÷ ceiling the study aims for at 32 users and more
TARGET_FROM_USERS = 32


def trials_of(out: Path, folder: str) -> list[TrialResult]:
    return read_trials(out / folder / LOG_NAME)


def arm_label(trial: TrialResult, section: RunSection) -> str:
    """'1x64', '4x16 MPS', '4x16 no MPS': servers x slots each (as the run's manifest lists them), and whether
    replicas ran under MPS."""
    total = served_slots(section.figures.run)
    each = "?" if not total else str(total // trial.replicas)
    return f"{trial.replicas}x{each}" + ("" if trial.replicas == 1 else " MPS" if trial.mps else " no MPS")


def sections_of(folder: Path, trials: list[TrialResult], price_as: list[str]) -> dict[str, RunSection]:
    """Each complete trial's run as the report reads it, by its arm's label; of a trial run more than once, the
    repeat closest to its mean aggregate at the most users (``TrialRuns.kept``): a typical run, not the luckiest.
    The spread between the repeats is autotune's table's, below."""
    book = PriceBook.default()
    sections = {}
    for trial in trial_runs(trials):
        kept = trial.kept()
        run = trial_run(folder, kept) if kept is not None else None
        if run is not None:
            section = build_section(run, book, price_as)
            sections[arm_label(kept, section)] = section
    return sections


def ceiling_at(section: RunSection, users: int) -> float | None:
    """The card's batched decode tok/s for the sequences this step could decode at once (the report's own rule)."""
    return None if section.ceiling is None else section.ceiling.at(users, served_slots(section.figures.run))


def _range(estimate: Estimate, digits: int = 0) -> str:
    if estimate.value is None:
        return "-"
    text = f"{estimate.value:,.{digits}f}"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{estimate.low:,.{digits}f}-{estimate.high:,.{digits}f}]"
    return text


def served_table(sections: dict[str, RunSection]) -> str:
    users = sorted({step.users for section in sections.values() for step in section.figures.steps})
    rows = []
    for count in users:
        row: list[str] = [str(count)]
        for section in sections.values():
            step = next((s for s in section.figures.steps if s.users == count), None)
            if step is None:
                row.append("-")
                continue
            ceiling = ceiling_at(section, count)
            share = (f" ({step.aggregate_tok_s.value / ceiling:.2f})"
                     if ceiling and step.aggregate_tok_s.value is not None else "")
            row.append(_range(step.aggregate_tok_s) + share)
        any_section = next(iter(sections.values()), None)
        ceiling = ceiling_at(any_section, count) if any_section else None
        row.append("-" if ceiling is None else f"{ceiling:,.0f}")
        rows.append(row)
    return tabulate(rows, headers=["users", *sections, "ceiling (sequences = min(users, 64))"], tablefmt="github",
                    disable_numparse=True)


def energy_table(sections: dict[str, RunSection]) -> str:
    """J per output token [95%], and the GPU's mean SM utilisation and power, per arm and user count."""
    users = sorted({step.users for section in sections.values() for step in section.figures.steps})
    rows = []
    for count in users:
        row = [str(count)]
        for section in sections.values():
            step = next((s for s in section.figures.steps if s.users == count), None)
            energy = step.energy if step is not None else None
            if energy is None or energy.j_per_token is None:
                row.append("-")
                continue
            sm = [gpu.sm_util_pct for gpu in energy.gpus if gpu.sm_util_pct is not None]
            busy = f", SM {sum(sm) / len(sm):.0f}%" if sm else ""
            watts = f", {energy.mean_w:.0f} W" if energy.mean_w is not None else ""
            row.append(_range(energy.j_per_token, 4) + busy + watts)
        rows.append(row)
    return tabulate(rows, headers=["users", *sections], tablefmt="github", disable_numparse=True)


def cost_table(sections: dict[str, RunSection]) -> str | None:
    """$/Mtok at the largest step of each arm, at each price the runs were given (None where none is priced)."""
    rows = []
    for label, section in sections.items():
        if not section.prices or not section.figures.steps:
            continue
        last = max(range(len(section.figures.steps)), key=lambda i: section.figures.steps[i].users)
        step = section.figures.steps[last]
        for column, choice in enumerate(section.prices):
            rows.append([label, step.users, _range(step.aggregate_tok_s), choice.label,
                         _range(section.cost_rows[last][column], 4)])
    if not rows:
        return None
    return tabulate(rows, headers=["arm", "users", "aggregate tok/s", "price", "$/Mtok"], tablefmt="github",
                    disable_numparse=True)


def target_line(folder: Path, sections: dict[str, RunSection], best: TrialResult | None) -> str:
    """Whether the arm autotune kept serves :data:`TARGET_SHARE` of the ceiling at 32 users and more."""
    run = trial_run(folder, best) if best is not None else None
    wanted = run.resolve() if run is not None else None
    section = next((s for s in sections.values() if s.figures.run.path.resolve() == wanted), None)
    if best is None or section is None:
        return "No arm completed: the target cannot be judged."
    label = next(name for name, each in sections.items() if each is section)
    shares = []
    for step in section.figures.steps:
        ceiling = ceiling_at(section, step.users)
        if step.users >= TARGET_FROM_USERS and ceiling and step.aggregate_tok_s.value is not None:
            shares.append((step.users, step.aggregate_tok_s.value / ceiling))
    if not shares:
        return f"No step of {label} at {TARGET_FROM_USERS} users or more has a ceiling to judge by."
    met = all(share >= TARGET_SHARE for _, share in shares)
    listed = ", ".join(f"{share:.2f} at {users}" for users, share in shares)
    return (f"Target ({TARGET_SHARE} of the ceiling at {TARGET_FROM_USERS}-128 users) "
            f"{'met' if met else 'NOT met'} by {label}: {listed}.")


def study_tables(out: Path, price_as: list[str] | None = None) -> str:
    """The study's tables as Markdown."""
    lines: list[str] = []
    for title, folder in (("The H200's own host", ARMS_FOLDER), ("A small host's cores", SMALL_HOST_FOLDER)):
        trials = trials_of(out, folder)
        if not trials:
            continue
        sections = sections_of(out / folder, trials, price_as or [])
        best = best_trial(trials)
        lines += [f"## {title} ({folder}/)", ""]
        lines += ["### Served aggregate tok/s [95% interval] (÷ the card's batched ceiling)", "",
                  served_table(sections), ""]
        if any(step.energy is not None and step.energy.j_per_token is not None
               for section in sections.values() for step in section.figures.steps):
            lines += ["### GPU energy per output token, J [95% interval], mean SM utilisation and power", "",
                      energy_table(sections), ""]
        costs = cost_table(sections)
        if costs:
            lines += ["### $ per million output tokens at the largest step", "", costs, ""]
        lines += ["### Autotune's trials", "", autotune_table(trials, best), "", kept_sentence(trials, best), ""]
        if folder == ARMS_FOLDER:
            lines += [target_line(out / folder, sections, best), ""]
    return "\n".join(lines)
