"""Where a decode call's time goes, on hand-made step figures, and the reading it gives."""

from __future__ import annotations

import pytest

from analysis.time_budget import ArmStep, step_budget

# at 32 users the card decodes 3,200 tok/s with 32 sequences: 10 ms a step
CEILING = 3200.0
ARMS = [
    ArmStep("gpu-sampling", 32, served_tok_s=1600.0, call_ms=20.0, gpu_sampling=True, packed_slots=True),
    ArmStep("cpu-sampling", 32, served_tok_s=800.0, call_ms=40.0, gpu_sampling=False, packed_slots=True),
    ArmStep("stock-slots", 32, served_tok_s=1000.0, call_ms=32.0, gpu_sampling=True, packed_slots=False),
]


def budget(arm: str, steps=ARMS, ceiling=CEILING):
    (step,) = [s for s in steps if s.arm == arm]
    return step_budget(step, ceiling, steps)


def test_sampling_on_the_cpu_is_attributed_to_sampling():
    cpu = budget("cpu-sampling")
    assert (cpu.ceiling_ms, cpu.sampling_ms, cpu.slots_ms, cpu.rest_ms) == (10.0, 20.0, 0.0, 10.0)
    assert cpu.served_share == 0.25 and cpu.reading == "sampling-bound"


def test_scattered_slots_are_attributed_to_the_layout():
    stock = budget("stock-slots")
    assert (stock.sampling_ms, stock.slots_ms, stock.rest_ms) == (0.0, 12.0, 10.0)
    assert stock.reading == "slot-layout-bound"


def test_what_no_arm_changes_is_the_server_loop():
    shipped = budget("gpu-sampling")
    assert (shipped.sampling_ms, shipped.slots_ms, shipped.rest_ms) == (0.0, 0.0, 10.0)
    assert shipped.served_share == 0.5 and shipped.reading == "server-loop-bound"


def test_a_step_near_the_ceiling_reads_so_whatever_its_parts():
    fast = [ArmStep("gpu-sampling", 32, served_tok_s=2900.0, call_ms=11.0, gpu_sampling=True, packed_slots=True)]
    assert budget("gpu-sampling", fast).reading == "near the card's ceiling"


def test_a_part_no_pair_of_arms_shows_is_left_unknown():
    alone = [ArmStep("cpu-sampling", 32, served_tok_s=800.0, call_ms=40.0, gpu_sampling=False, packed_slots=True)]
    only = budget("cpu-sampling", alone)
    assert only.sampling_ms is None and only.slots_ms is None and only.rest_ms == pytest.approx(30.0)
    assert only.reading == "server-loop-bound"
    uncounted = [ArmStep("x", 32, served_tok_s=800.0, call_ms=None, gpu_sampling=True, packed_slots=True)]
    assert budget("x", uncounted).reading == "below the ceiling (no decode-call counter to say why)"
