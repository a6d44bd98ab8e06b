"""A run's name for readers: its model, the machine it ran on and its arm, e.g.
``e2b-q4_0 (synthetic) · NVIDIA H200 · e2b-best``.

Why not the run id: a legend or a headline that says "local 703c" sends the reader to the
manifest to learn what was measured, while the three things that set a run's figures (which
model, on which card or instance type, in which configuration) fit in one short line. Runs whose
names come out the same (a repeat of one arm) keep the last part of their run id to tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.rundir import RunManifest
from core.wording import counted

SEPARATOR = " · "
UNNAMED_MODELS = {"", "default"}  # llama-server takes any model name: these say nothing


def _stem(file_name: str) -> str:
    return file_name[: -len(".gguf")] if file_name.lower().endswith(".gguf") else file_name


def model_name(manifest: RunManifest) -> str:
    """The model file without ``.gguf`` (synthetic ones say so), else the name requests carried, else the profile."""
    if manifest.model is not None:
        return _stem(manifest.model.name) + (" (synthetic)" if manifest.model.synthetic else "")
    sent = manifest.server.model_name if manifest.server is not None else None
    if sent and sent not in UNNAMED_MODELS:
        return sent
    return manifest.profile if manifest.profile != "none" else "model unknown"


def machine_name(manifest: RunManifest) -> str:
    """The instance type, else the GPU, else the CPU (with its cores when recorded)."""
    rig = manifest.rig
    if rig.instance_type:
        return rig.instance_type
    if rig.machine.gpu_name:
        return rig.machine.gpu_name
    return f"CPU ({counted(rig.machine.cpu_cores, 'core')})" if rig.machine.cpu_cores else "CPU"


def arm_name(manifest: RunManifest) -> str | None:
    """The arm the run was labelled with, else its drafter, else None (the profile's plain serving)."""
    if manifest.load is not None and manifest.load.arm:
        return manifest.load.arm
    if manifest.drafter is not None:
        return f"drafter {_stem(manifest.drafter.name)}"
    return None


def name_parts(manifest: RunManifest) -> tuple[str, str, str | None]:
    return model_name(manifest), machine_name(manifest), arm_name(manifest)


def run_name(manifest: RunManifest) -> str:
    return SEPARATOR.join(part for part in name_parts(manifest) if part)


def run_names(manifests: Sequence[RunManifest]) -> list[str]:
    """Each run's name; names shared by several runs end with each one's run id suffix."""
    names = [run_name(manifest) for manifest in manifests]
    return [
        f"{name}{SEPARATOR}{manifest.run_id.rsplit('-', 1)[-1]}" if names.count(name) > 1 else name
        for name, manifest in zip(names, manifests, strict=True)
    ]


def short_names(manifests: Sequence[RunManifest]) -> tuple[str, list[str]]:
    """For a sentence about several runs: what they all share (``"e2b-q4_0 on NVIDIA H200"``, empty when
    nothing), and each run's name without it (its run id suffix when nothing else tells it apart)."""
    parts = [name_parts(manifest) for manifest in manifests]
    shared = [len({part[i] for part in parts}) == 1 and parts[0][i] is not None for i in range(3)]
    common = [parts[0][i] for i in range(2) if shared[i]]
    names = [SEPARATOR.join(p for i, p in enumerate(part) if p and not shared[i]) for part in parts]
    suffixes = [manifest.run_id.rsplit("-", 1)[-1] for manifest in manifests]
    names = [f"{name}{SEPARATOR}{suffix}" if name and names.count(name) > 1 else name or f"run {suffix}"
             for name, suffix in zip(names, suffixes, strict=True)]
    return " on ".join(str(part) for part in common), names
