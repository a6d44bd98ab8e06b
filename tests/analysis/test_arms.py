"""A run as an arm, read from a committed H200 manifest and hand-made changes of it."""

from __future__ import annotations

from pathlib import Path

from analysis.arms import arm_of
from core.rundir import RunDir, RunManifest
from core.rundir.models import PatchInfo

RUNS = Path(__file__).resolve().parents[2] / "runs" / "real-gemma-h200-2026-12-02" / "runs"
GPU = RunDir(RUNS / "20261202T195814Z-gemma3-270m-many-patched-gpu-sampling-gpu-sampling-a3e4").read_manifest()
CPU = RunDir(RUNS / "20261202T195924Z-gemma3-270m-many-patched-cpu-sampling-cpu-sampling-3bef").read_manifest()


def with_args(manifest: RunManifest, args: list[str]) -> RunManifest:
    return manifest.model_copy(update={"server": manifest.server.model_copy(update={"args": args})})


def test_the_sampling_flag_sets_the_side_and_nothing_else_of_the_arm() -> None:
    gpu, cpu = arm_of(GPU, "gpu"), arm_of(CPU, "cpu")
    assert gpu.gpu_sampling and not cpu.gpu_sampling and gpu.packed_slots and cpu.packed_slots
    assert gpu.alike == cpu.alike and gpu.group == cpu.group, "their ports and the flag differ, nothing else"
    short = with_args(CPU, [*CPU.server.args, "-bs"])
    assert arm_of(short, "short").gpu_sampling


def test_slots_stay_packed_by_the_patch_pinned_users_or_a_single_slot() -> None:
    stock = GPU.model_copy(update={"build": GPU.build.model_copy(update={"patches": []})})
    assert not arm_of(stock, "stock").packed_slots
    assert arm_of(stock, "stock").alike == arm_of(GPU, "patched").alike, "the slot patch is the one difference"
    pinned = stock.model_copy(update={"load": stock.load.model_copy(update={"pin_slots": True})})
    assert arm_of(pinned, "pinned").packed_slots
    assert arm_of(with_args(stock, [*stock.server.args, "-np", "1"]), "one slot").packed_slots


def test_another_patch_a_flag_or_a_machine_makes_another_arm() -> None:
    gpu = arm_of(GPU, "gpu")
    other_patch = [*GPU.build.patches, PatchInfo(name="other.patch", sha256="0" * 64)]
    assert arm_of(GPU.model_copy(update={"build": GPU.build.model_copy(update={"patches": other_patch})}),
                  "x").alike != gpu.alike
    assert arm_of(with_args(GPU, [*GPU.server.args, "-kvu"]), "kvu").alike != gpu.alike
    machine = GPU.rig.machine.model_copy(update={"hostname": "another"})
    assert arm_of(GPU.model_copy(update={"rig": GPU.rig.model_copy(update={"machine": machine})}),
                  "x").group != gpu.group
    assert arm_of(GPU.model_copy(update={"model": None}), "x") is None
