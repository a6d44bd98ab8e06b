"""What a run is as an arm of a comparison, from its manifest: where it sampled, whether its busy
slots stayed packed, and what else it ran.

Why from the manifest: two runs isolate what sampling or the slot layout costs only when they
differ in that alone, and the manifest is where a run says what it ran (the server line, the
build's patches, the load's slot pinning), whatever study or command made it. Runs of different
model files or machines are never set against each other: their call times differ for reasons
no flag names.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.profile import RESERVED_SERVER_FLAGS, parallel_slots, split_flags
from core.rundir import RunManifest

SAMPLING_FLAGS = ("--backend-sampling", "-bs")  # llama-server samples on the GPU
SLOT_PATCH = "server-lowest-free-slot"  # the build patch that hands out the lowest free slot: busy slots stay packed


@dataclass(frozen=True)
class Arm:
    """Why two keys: runs are set side by side only within one model file and machine (``group``),
    and paired only where everything else they ran is the same (``alike``) but the one property."""

    label: str
    group: tuple[str, ...]  # the model file and the machine: arms whose call times may be set side by side
    alike: tuple[str, ...]  # the rest of what it ran (server line, build, drafter): partners of a pair match here
    gpu_sampling: bool
    packed_slots: bool  # the slot patch, users pinned to slots, or a single slot


def _patch_name(name: str) -> str:
    return name.removesuffix(".patch")


def arm_of(manifest: RunManifest, label: str) -> Arm | None:
    """The run as an arm; None when its manifest does not say which model or server line it ran."""
    if manifest.model is None or manifest.server is None:
        return None
    args = manifest.server.args
    line = sorted(" ".join(group) for group in split_flags(args)
                  if group[0] not in RESERVED_SERVER_FLAGS and group[0] not in SAMPLING_FLAGS)
    build = manifest.build
    patches = build.patches if build is not None else []
    slot_patched = any(_patch_name(patch.name) == SLOT_PATCH for patch in patches)
    others = [f"{patch.name}:{patch.sha256}" for patch in patches if _patch_name(patch.name) != SLOT_PATCH]
    built = [build.source, build.backend, build.cuda_arch or "", *build.cmake_options, *others] if build else []
    drafter = [manifest.drafter.sha256] if manifest.drafter is not None else []
    machine = manifest.rig.machine.model_dump_json()
    pinned = manifest.load is not None and manifest.load.pin_slots
    return Arm(
        label=label,
        group=(manifest.model.sha256, manifest.rig.instance_type or manifest.rig.kind, machine),
        alike=(*line, "|build", *built, "|drafter", *drafter),
        gpu_sampling=any(flag in args for flag in SAMPLING_FLAGS),
        packed_slots=slot_patched or pinned or parallel_slots(args) == 1,
    )
