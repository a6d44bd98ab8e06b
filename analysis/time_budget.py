"""Where one decode call's time goes at a step, and the one-line reading of it.

Why: served ÷ ceiling says how much of the card a server leaves unused, not why. Runs that each
change one thing at the same user count show it: where sampling runs (CPU or GPU), whether busy
slots stay packed (the slot patch, or users pinned to slots). The card's own time for one step
of N sequences is llama-batched-bench's (N tokens at its decode tok/s: no server, no sampling);
the server's is its ms per decode call (``llamacpp:n_decode_total`` over the window). The
difference is attributed to what a pair of runs isolates: sampling (a CPU-sampling run's call
time less that of its GPU-sampling partner), the slot layout (a run with scattered slots less its
packed partner), and the rest to the server's own loop (HTTP, scheduling, per-token bookkeeping:
what no pair changes). Partners differ in that one property alone (``analysis.arms``); a part no
pair shows stays in the rest, and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from analysis.arms import Arm
from analysis.ceiling import BatchedCeiling, sequences_at
from analysis.step import StepFigures

NEAR_CEILING = 0.8  # served ÷ ceiling at or above this reads "near the card's ceiling"


@dataclass(frozen=True)
class ArmStep:
    """One arm's figures at one user count."""

    users: int
    served_tok_s: float
    call_ms: float | None  # the server's ms per decode call over the window (None: no counter)
    ceiling_tok_s: float | None  # llama-batched-bench's decode tok/s with as many sequences (None: not measured)
    sequences: int = 0  # the sequences one call can carry: the users, up to the slots (0: the users)


@dataclass(frozen=True)
class ArmRun:
    """A run's steps as one arm: a pair is made of whole runs, its parts read step by step."""

    arm: Arm
    steps: list[ArmStep]

    def call_ms(self, users: int) -> float | None:
        return next((step.call_ms for step in self.steps if step.users == users), None)


@dataclass(frozen=True)
class Part:
    """A property a pair of runs isolates: which side costs, and what else partners must share."""

    name: str  # as a sentence names it
    sides: tuple[str, str]  # the costly side, then the cheap one, as a sentence names them
    costly: Callable[[Arm], bool]
    same_otherwise: Callable[[Arm, Arm], bool]


SAMPLING = Part("sampling", ("on the CPU", "on the GPU"), lambda arm: not arm.gpu_sampling,
                lambda a, b: a.packed_slots == b.packed_slots)
SLOTS = Part("the slot layout", ("with scattered slots", "with packed slots"), lambda arm: not arm.packed_slots,
             lambda a, b: a.gpu_sampling == b.gpu_sampling)
PARTS = (SAMPLING, SLOTS)


@dataclass(frozen=True)
class Pair:
    part: Part
    costly: ArmRun  # CPU sampling, or scattered slots
    cheap: ArmRun  # its partner: the same in everything else


@dataclass(frozen=True)
class StepBudget:
    arm: str
    users: int
    served_share: float  # served ÷ ceiling
    ceiling_ms: float  # the card's time for one step of ``sequences`` sequences
    call_ms: float | None
    sampling_ms: float | None  # None: no pair of runs shows it
    slots_ms: float | None
    rest_ms: float | None
    reading: str
    sequences: int = 0  # what one call can carry at ``users``: the users, up to the slots (0: the users)


@dataclass(frozen=True)
class RunBudget:
    """One run's budget in a report: its steps, and the pairs that split them."""

    steps: list[StepBudget]
    pairs: list[Pair]  # among the report's runs of the same model file and machine
    left_out: str = ""  # why a run with a ceiling and decode counts has no steps here


def arm_run(arm: Arm, steps: Iterable[StepFigures], calls_per_s: Mapping[int, float],
            ceiling: BatchedCeiling | None, slots: int | None = None) -> ArmRun:
    """``calls_per_s``: users -> the server's decode calls per second at that step; ``slots``: the server's, which
    cap the sequences one call carries (``analysis.ceiling.sequences_at``)."""
    return ArmRun(arm, [
        ArmStep(step.users, step.aggregate_tok_s.value or 0.0,
                1000 / calls_per_s[step.users] if calls_per_s.get(step.users) else None,
                ceiling.at(step.users, slots) if ceiling is not None else None, sequences_at(step.users, slots))
        for step in steps
    ])


def find_pairs(runs: list[ArmRun]) -> list[Pair]:
    """Each run on the costly side of a part with the first run (in the order given, so the
    baseline a reader names first wins) of the same model and machine that differs from it in
    that part alone."""
    pairs = []
    for part in PARTS:
        for costly in runs:
            if not part.costly(costly.arm):
                continue
            partner = next((cheap for cheap in runs if not part.costly(cheap.arm)
                            and cheap.arm.group == costly.arm.group and cheap.arm.alike == costly.arm.alike
                            and part.same_otherwise(cheap.arm, costly.arm)), None)
            if partner is not None:
                pairs.append(Pair(part, costly, partner))
    return pairs


def part_ms(run: ArmRun, users: int, part: Part, pairs: list[Pair]) -> float | None:
    """What ``part`` adds to ``run``'s call at ``users``: the difference from its partner on the
    costly side; 0 on the cheap side, the baseline a pair measures from, where a pair of its model
    and machine measured the part at that count; None where no pair shows it (the rest keeps it)."""
    measured = [p for p in pairs if p.part is part and p.costly.arm.group == run.arm.group
                and p.costly.call_ms(users) is not None and p.cheap.call_ms(users) is not None]
    if not part.costly(run.arm):
        return 0.0 if measured else None
    own = next((p for p in measured if p.costly is run), None)
    if own is None:
        return None
    # a costly side faster than its partner is the windows' noise, not a negative cost
    return max(0.0, own.costly.call_ms(users) - own.cheap.call_ms(users))  # type: ignore[operator]


def step_budget(run: ArmRun, step: ArmStep, pairs: list[Pair]) -> StepBudget | None:
    """The budget of one step against the card's ceiling at its user count; None where the bench
    did not measure that count."""
    if not step.ceiling_tok_s:
        return None
    share = step.served_tok_s / step.ceiling_tok_s
    ceiling_ms = (step.sequences or step.users) / step.ceiling_tok_s * 1000
    sampling = slots = rest = None
    if step.call_ms is not None:
        sampling = part_ms(run, step.users, SAMPLING, pairs)
        slots = part_ms(run, step.users, SLOTS, pairs)
        rest = step.call_ms - ceiling_ms - (sampling or 0.0) - (slots or 0.0)
    return StepBudget(run.arm.label, step.users, share, ceiling_ms, step.call_ms, sampling, slots, rest,
                      reading(share, sampling, slots, rest), step.sequences or step.users)


def run_budgets(runs: list[ArmRun]) -> tuple[list[Pair], list[list[StepBudget]]]:
    """The pairs the runs make, and per run (in order) its steps' budgets."""
    pairs = find_pairs(runs)
    budgets = [[budget for step in run.steps if (budget := step_budget(run, step, pairs)) is not None]
               for run in runs]
    return pairs, budgets


def reading(share: float, sampling_ms: float | None, slots_ms: float | None, rest_ms: float | None) -> str:
    """One line: near the ceiling, or the largest part of the gap names what bounds the step."""
    if share >= NEAR_CEILING:
        return "near the card's ceiling"
    if rest_ms is None:
        return "below the ceiling (no decode-call counter to say why)"
    parts = {"sampling-bound": sampling_ms or 0.0, "slot-layout-bound": slots_ms or 0.0, "server-loop-bound": rest_ms}
    largest = max(parts, key=lambda name: parts[name])
    if parts[largest] <= 0:  # calls as fast as the card's step, so the time went between them
        return "below the ceiling between decode calls"
    return largest
