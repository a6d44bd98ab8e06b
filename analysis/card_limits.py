"""What limits the card: a finding per cause the run's own telemetry shows, with the figures that show it.

Why: a small model on a large GPU rarely runs out of card. Two causes keep it idle or waste it, and
each has its fix: replicas that share a GPU without CUDA's Multi-Process Service take turns on it
(the driver time-slices their contexts, so SM utilisation reads busy while the aggregate falls), and
one llama-server decodes every busy slot in one loop whose sampling, bookkeeping and HTTP, not the
card, set the pace. The figures are the report's own: each step's aggregate tok/s with its interval
(``analysis.figures``), the GPU's mean SM utilisation over the window (``analysis.energy``), and the
server's ms per decode call against the card's batched step from the decode-call budget
(``analysis.time_budget``, set on the section by ``analysis.budget_section``). The rules:

- *taking turns on the GPU: serve them under MPS*: two or more replicas are placed on one GPU, the
  manifest records that MPS did not run for them, and at a closed-loop step every such GPU's mean SM
  utilisation is at least :data:`BUSY_SM_PCT` % while the aggregate fell beyond noise (its interval's
  high end below the low end of an earlier step with fewer users, or of a one-server run in the same
  report of the same model file on the same machine at the same user count);
- *limited by the server's own loop: add replicas*: one server (no replicas), and at a step of two
  users or more (one user cannot be spread over replicas) every sampled GPU's mean SM utilisation is
  below :data:`IDLE_SM_PCT` % while a decode call takes at least :data:`LOOP_OVER_CARD` times the card's
  batched step with as many sequences.

Where a figure a rule needs is absent (no SM samples, no interval, no ceiling, no decode-call counter,
a drafter's run, which has no budget, or a run that does not record whether MPS ran) the rule does not
fire: no finding is guessed. Replicas under MPS get none. Each finding is one line naming the largest
step where its rule holds, and the other steps where it holds too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from analysis.arms import arm_of
from analysis.intervals import Estimate
from analysis.report_model import RunSection
from analysis.step import StepFigures
from core.mps import shared_gpus
from core.wording import counted, listed

BUSY_SM_PCT = 90.0  # mean SM utilisation at or above this: the GPU reads busy
IDLE_SM_PCT = 50.0  # below this: the GPU is mostly idle
LOOP_OVER_CARD = 2.0  # the server's decode call at least this many times the card's batched step
MIN_LOOP_USERS = 2  # replicas spread users; one user gains nothing from them
TITLE = "### What limits the card"
FindingKind = Literal["taking_turns", "server_loop"]
ADVICE: dict[FindingKind, str] = {
    "taking_turns": "taking turns on the GPU: serve them under MPS",
    "server_loop": "limited by the server's own loop: add replicas",
}


@dataclass(frozen=True)
class Finding:
    """One cause, its line with the figures (the section's), and a shorter sentence for the glance."""

    kind: FindingKind
    line: str
    glance: str


def _has_interval(estimate: Estimate) -> bool:
    return estimate.value is not None and estimate.low is not None and estimate.high is not None


def _below(step: StepFigures, other: StepFigures) -> bool:
    """``step``'s aggregate lies wholly below ``other``'s, intervals and all."""
    mine, theirs = step.aggregate_tok_s, other.aggregate_tok_s
    return _has_interval(mine) and _has_interval(theirs) and mine.high < theirs.low  # type: ignore[operator]


def _also(users: list[int]) -> str:
    """The other steps where a rule holds, after the one a line names."""
    if not users:
        return ""
    at = counted(users[0], "user") if len(users) == 1 else f"{listed([str(count) for count in users])} users"
    return f"; the same at {at}"


def _sm(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"SM {low:.0f}%" if round(low) == round(high) else f"SM {low:.0f}-{high:.0f}%"


def step_sm(step: StepFigures, gpus: Sequence[int] | None = None) -> list[float] | None:
    """The mean SM utilisation of ``gpus`` over the step's window (every sampled GPU when None); None unless each
    of them was sampled with it."""
    if step.energy is None:
        return None
    by_gpu = {gpu.gpu: gpu.sm_util_pct for gpu in step.energy.gpus}
    wanted = list(by_gpu) if gpus is None else list(gpus)
    values = [by_gpu.get(gpu) for gpu in wanted]
    if not values or any(value is None for value in values):
        return None
    return values  # type: ignore[return-value]


def _closed_steps(section: RunSection) -> list[StepFigures]:
    figures = section.figures
    return [] if figures.open_loop else sorted(figures.steps, key=lambda step: step.users)


def _replica_count(section: RunSection) -> int:
    server = section.figures.run.manifest.server
    return len(server.replicas) if server is not None else 0


def _one_server_alike(section: RunSection, sections: Sequence[RunSection]) -> list[RunSection]:
    """The report's one-server closed-loop runs of the same model file on the same machine (as the decode-call
    budget groups runs), in the report's order."""
    arm = arm_of(section.figures.run.manifest, section.label)
    if arm is None:
        return []
    alike = []
    for other in sections:
        if other is section or other.figures.open_loop or _replica_count(other) >= 2:
            continue
        theirs = arm_of(other.figures.run.manifest, other.label)
        if theirs is not None and theirs.group == arm.group:
            alike.append(other)
    return alike


def _shared(section: RunSection) -> dict[int, int] | None:
    """GPU -> replicas on it, for the GPUs two or more replicas share, when the manifest says MPS did not run for
    them; None otherwise (one server, one replica per GPU, MPS ran, or whether it ran is not recorded)."""
    server = section.figures.run.manifest.server
    if server is None or len(server.replicas) < 2 or server.mps is None or server.mps.ran:
        return None
    placed = [replica.gpu for replica in server.replicas]
    shared = {gpu: placed.count(gpu) for gpu in shared_gpus(placed)}
    return shared or None


@dataclass(frozen=True)
class _TurnStep:
    step: StepFigures
    sm: list[float]
    earlier: StepFigures | None  # the earlier step with the highest aggregate that this one fell below
    alone: tuple[RunSection, StepFigures] | None  # a one-server run's step this one fell below


def taking_turns(section: RunSection, sections: Sequence[RunSection] = ()) -> Finding | None:
    """Replicas sharing a GPU without MPS, busy on it while the aggregate falls; None where that is not shown."""
    shared = _shared(section)
    if shared is None:
        return None
    steps = _closed_steps(section)
    alike = _one_server_alike(section, sections)
    found = []
    for position, step in enumerate(steps):
        sm = step_sm(step, list(shared))
        if sm is None or min(sm) < BUSY_SM_PCT:
            continue
        fell_from = [earlier for earlier in steps[:position] if earlier.users < step.users and _below(step, earlier)]
        earlier = max(fell_from, key=lambda s: s.aggregate_tok_s.value or 0.0) if fell_from else None
        alone = next(((other, theirs) for other in alike for theirs in _closed_steps(other)
                      if theirs.users == step.users and _below(step, theirs)), None)
        if earlier is not None or alone is not None:
            found.append(_TurnStep(step, sm, earlier, alone))
    if not found:
        return None
    named = found[-1]
    step = named.step
    replicas = sum(shared.values())
    gpus = ("GPU " if len(shared) == 1 else "GPUs ") + listed([str(gpu) for gpu in shared])
    evidence = []
    if named.earlier is not None:
        evidence.append(f"the aggregate fell to {step.aggregate_tok_s.short()} tok/s from "
                        f"{named.earlier.aggregate_tok_s.short()} at {counted(named.earlier.users, 'user')}")
    if named.alone is not None:
        other, theirs = named.alone
        subject = "below" if evidence else f"the aggregate, {step.aggregate_tok_s.short()} tok/s, is below"
        evidence.append(f"{subject} one server's {theirs.aggregate_tok_s.short()} at the same load (`{other.label}`)")
    busy = f"{_sm(named.sm)} at {counted(step.users, 'user')}"
    line = (f"{ADVICE['taking_turns']} — {replicas} replicas share {gpus} without MPS; {busy} while "
            f"{' and '.join(evidence)}{_also([hit.step.users for hit in found[:-1]])}")
    fell = "fell" if named.earlier is not None else "fell below one server's"
    glance = (f"Its {replicas} replicas take turns on {gpus} without MPS ({busy} while the aggregate {fell}): "
              "serve them under MPS")
    return Finding("taking_turns", line, glance)


def server_loop(section: RunSection) -> Finding | None:
    """One server whose GPU mostly idles while its decode call costs several card steps; None where not shown."""
    budget = section.budget
    if _replica_count(section) >= 2 or budget is None or not budget.steps:
        return None
    steps = {step.users: step for step in reversed(_closed_steps(section))}  # the first step of each count
    found = []
    for spent in sorted(budget.steps, key=lambda b: b.users):
        step = steps.get(spent.users)
        if step is None or spent.users < MIN_LOOP_USERS or spent.call_ms is None or spent.ceiling_ms <= 0:
            continue
        sm = step_sm(step)
        over = spent.call_ms / spent.ceiling_ms
        if sm is not None and max(sm) < IDLE_SM_PCT and over >= LOOP_OVER_CARD:
            found.append((spent, max(sm), over))
    if not found:
        return None
    spent, sm, over = found[-1]
    sequences = spent.sequences or spent.users  # the users, up to the slots: what one call can carry
    at = counted(spent.users, "user")
    line = (f"{ADVICE['server_loop']} — one server at {at}: SM {sm:.0f}%, a decode call "
            f"{spent.call_ms:,.1f} ms against the card's {spent.ceiling_ms:,.1f} ms for "
            f"{counted(sequences, 'sequence')} "
            f"({over:.1f}x){_also([hit[0].users for hit in found[:-1]])}")
    glance = (f"Its own loop limits the server (SM {sm:.0f}% at {at}, a decode call {over:.1f}x the "
              "card's batched step): add replicas")
    return Finding("server_loop", line, glance)


def card_limits(section: RunSection, sections: Sequence[RunSection] = ()) -> list[Finding]:
    """The run's findings; ``sections``: the report's runs, among which a one-server run of the same model and
    machine shows what replicas taking turns fell below."""
    return [finding for finding in (taking_turns(section, sections), server_loop(section)) if finding is not None]


def glance_sentence(findings: Sequence[Finding]) -> str:
    """The run's findings for its paragraph at a glance, a sentence each (the rules exclude each other: one needs
    replicas, the other one server); empty without findings."""
    return " ".join(f"{finding.glance} (see what limits the card)." for finding in findings)


def card_limits_section(section: RunSection, sections: Sequence[RunSection] = ()) -> list[str]:
    """Markdown: the rules and the run's findings; nothing when no rule fires."""
    findings = card_limits(section, sections)
    if not findings:
        return []
    return [
        TITLE, "",
        "From the telemetry the run sampled: replicas that share a GPU without CUDA's Multi-Process Service take "
        f"turns on it (the driver time-slices them), read when the GPU's mean SM utilisation is {BUSY_SM_PCT:g}% or "
        "more at a step whose aggregate tok/s fell beyond noise (its interval wholly below an earlier step's with "
        "fewer users, or a one-server run's of the same model and machine at as many users); one server is "
        f"limited by its own loop (sampling, bookkeeping, HTTP) when its GPU's mean SM utilisation is below "
        f"{IDLE_SM_PCT:g}% at a step of {MIN_LOOP_USERS} users or more while a decode call takes {LOOP_OVER_CARD:g}x "
        "or more the card's batched step with as many sequences (see where one decode call's time goes).",
        "",
        *(f"- {finding.line}" for finding in findings),
        "",
    ]
