"""Where a decode call's time goes, on hand-made arms, and the reading it gives."""

from __future__ import annotations

import pytest

from analysis.arms import Arm
from analysis.time_budget import SAMPLING, SLOTS, ArmRun, ArmStep, find_pairs, reading, run_budgets

# at 32 users the card decodes 3,200 tok/s with 32 sequences: 10 ms a step
CEILING = 3200.0
GROUP = ("model-sha", "local", "machine")
LINE = ("-np 32",)


def run(label: str, served: float, call_ms: float | None, gpu: bool = True, packed: bool = True,
        group: tuple[str, ...] = GROUP, alike: tuple[str, ...] = LINE, ceiling: float | None = CEILING) -> ArmRun:
    return ArmRun(Arm(label, group, alike, gpu, packed), [ArmStep(32, served, call_ms, ceiling)])


GPU = run("gpu-sampling", 1600.0, 20.0)
CPU = run("cpu-sampling", 800.0, 40.0, gpu=False)
STOCK = run("stock-slots", 1000.0, 32.0, packed=False)


def budgets(*runs: ArmRun) -> dict[str, tuple]:
    _, per_run = run_budgets(list(runs))
    return {b.arm: (b.ceiling_ms, b.sampling_ms, b.slots_ms, b.rest_ms, b.reading) for steps in per_run for b in steps}


def test_sampling_on_the_cpu_is_attributed_to_sampling():
    assert budgets(GPU, CPU, STOCK)["cpu-sampling"] == (10.0, 20.0, 0.0, 10.0, "sampling-bound")


def test_scattered_slots_are_attributed_to_the_layout():
    assert budgets(GPU, CPU, STOCK)["stock-slots"] == (10.0, 0.0, 12.0, 10.0, "slot-layout-bound")


def test_what_no_pair_changes_is_the_server_loop():
    (pairs, [[shipped], *_]) = run_budgets([GPU, CPU, STOCK])
    assert [(p.part, p.costly.arm.label, p.cheap.arm.label) for p in pairs] == [
        (SAMPLING, "cpu-sampling", "gpu-sampling"), (SLOTS, "stock-slots", "gpu-sampling")]
    assert (shipped.sampling_ms, shipped.slots_ms, shipped.rest_ms) == (0.0, 0.0, 10.0)
    assert shipped.served_share == 0.5 and shipped.reading == "server-loop-bound"


def test_partners_differ_in_the_one_property_alone():
    unified_cpu = run("cpu-sampling-kvu", 800.0, 40.0, gpu=False, alike=(*LINE, "-kvu"))
    elsewhere = run("cpu-sampling-other-machine", 800.0, 40.0, gpu=False, group=("model-sha", "local", "other"))
    scattered_cpu = run("stock-cpu", 700.0, 45.0, gpu=False, packed=False)
    assert find_pairs([GPU, unified_cpu, elsewhere, scattered_cpu]) == []
    got = budgets(GPU, unified_cpu, elsewhere)
    assert got["cpu-sampling-kvu"][1] is None and got["cpu-sampling-other-machine"][1] is None
    assert got["gpu-sampling"][1] is None  # no pair measured sampling: not even a GPU run reads 0


def test_a_run_on_the_cheap_side_reads_zero_where_its_machine_has_a_pair():
    unified = run("unified-kv", 1500.0, 22.0, alike=(*LINE, "-kvu"), ceiling=2000.0)
    assert budgets(GPU, CPU, unified)["unified-kv"] == (16.0, 0.0, None, 6.0, "server-loop-bound")


def test_a_step_near_the_ceiling_reads_so_whatever_its_parts():
    assert budgets(run("fast", 2900.0, 11.0))["fast"][-1] == "near the card's ceiling"


def test_a_run_without_a_pair_keeps_the_rest_whole():
    assert budgets(CPU)["cpu-sampling"] == (10.0, None, None, pytest.approx(30.0), "server-loop-bound")
    assert budgets(run("x", 800.0, None))["x"][-1] == "below the ceiling (no decode-call counter to say why)"


def test_a_step_the_bench_did_not_measure_has_no_budget():
    assert budgets(run("unmeasured", 800.0, 40.0, ceiling=None)) == {}


def test_calls_as_fast_as_the_card_put_the_gap_between_calls():
    assert reading(0.5, None, None, -1.0) == "below the ceiling between decode calls"
    assert reading(0.5, 0.0, None, -1.0) == "below the ceiling between decode calls"
