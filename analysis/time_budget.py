"""Where one decode call's time goes at a step, and the one-line reading of it.

Why: served ÷ ceiling says how much of the card a server leaves unused, not why. A study's arms
each change one thing at the same user count: where sampling runs (CPU or GPU), whether busy
slots stay packed (the slot patch, or users pinned to slots). The card's own time for one step
of N sequences is llama-batched-bench's (N tokens at its decode tok/s: no server, no sampling);
the server's is its ms per decode call (``llamacpp:n_decode_total`` over the window). The
difference is attributed to what the arms isolate: sampling (the CPU-sampling arm's call time
less the GPU-sampling arm's), the slot layout (an arm with scattered slots less one with packed
slots), and the rest to the server's own loop (HTTP, scheduling, per-token bookkeeping: what
no arm changes). Only what two measured arms show is attributed; a part with no arm to show it
stays in the rest, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

NEAR_CEILING = 0.8  # served ÷ ceiling at or above this reads "near the card's ceiling"


@dataclass(frozen=True)
class ArmStep:
    """One arm's figures at one user count."""

    arm: str
    users: int
    served_tok_s: float
    call_ms: float | None  # the server's ms per decode call over the window (None: no counter)
    gpu_sampling: bool
    packed_slots: bool  # the slot patch, or users pinned to slots


@dataclass(frozen=True)
class StepBudget:
    arm: str
    users: int
    served_share: float  # served ÷ ceiling
    ceiling_ms: float  # the card's time for one step of ``users`` sequences
    call_ms: float | None
    sampling_ms: float | None  # None: no pair of arms shows it
    slots_ms: float | None
    rest_ms: float | None
    reading: str


def _pair_ms(steps: list[ArmStep], users: int, key: str) -> tuple[float, float] | None:
    """(call ms with the property off, with it on) from two arms at ``users`` that differ in it alone."""
    at = [s for s in steps if s.users == users and s.call_ms is not None]
    for off in at:
        for on in at:
            if key == "sampling" and not off.gpu_sampling and on.gpu_sampling and off.packed_slots == on.packed_slots:
                return off.call_ms, on.call_ms  # type: ignore[return-value]
            if key == "slots" and not off.packed_slots and on.packed_slots and off.gpu_sampling == on.gpu_sampling:
                return off.call_ms, on.call_ms  # type: ignore[return-value]
    return None


def step_budget(step: ArmStep, ceiling_tok_s: float, steps: list[ArmStep]) -> StepBudget:
    """The budget of ``step`` against the card's ceiling at its user count, the other arms at that
    count (``steps``, this one among them) showing what sampling and the slot layout cost."""
    share = step.served_tok_s / ceiling_tok_s
    ceiling_ms = step.users / ceiling_tok_s * 1000
    sampling = slots = rest = None
    if step.call_ms is not None:
        pair = _pair_ms(steps, step.users, "sampling")
        if pair is not None:
            sampling = 0.0 if step.gpu_sampling else max(0.0, pair[0] - pair[1])
        pair = _pair_ms(steps, step.users, "slots")
        if pair is not None:
            slots = 0.0 if step.packed_slots else max(0.0, pair[0] - pair[1])
        rest = step.call_ms - ceiling_ms - (sampling or 0.0) - (slots or 0.0)
    return StepBudget(step.arm, step.users, share, ceiling_ms, step.call_ms, sampling, slots, rest,
                      reading(share, sampling, slots, rest))


def reading(share: float, sampling_ms: float | None, slots_ms: float | None, rest_ms: float | None) -> str:
    """One line: near the ceiling, or the largest part of the gap names what bounds the step."""
    if share >= NEAR_CEILING:
        return "near the card's ceiling"
    parts = {"sampling-bound": sampling_ms or 0.0, "slot-layout-bound": slots_ms or 0.0,
             "server-loop-bound": rest_ms or 0.0}
    if not any(parts.values()):
        return "below the ceiling (no decode-call counter to say why)"
    return max(parts, key=lambda name: parts[name])
