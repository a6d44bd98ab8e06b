"""CUDA's Multi-Process Service for replicas: whether it runs, where its folders are, and how it is asked.

Why: several CUDA processes on one GPU without MPS take turns on it (the driver time-slices their
contexts), so replicas sharing a card wait for each other's kernels and serve less than one server; with
the MPS control daemon started first their kernels run side by side. A profile's ``[server] mps`` says
``"auto"`` (on when two or more replicas share a GPU and the control program is found), ``true`` (on,
refused in one line where the control program is missing) or ``false``.

The daemon is named by two folders, which every process that should share it carries in its
environment: ``CUDA_MPS_PIPE_DIRECTORY`` (its control socket) and ``CUDA_MPS_LOG_DIRECTORY`` (its logs).
rigbench always names them, never relying on the system's defaults (``/tmp/nvidia-mps`` and
``/var/log/nvidia-mps``, the second not writable by an ordinary user). The control program ships with the
NVIDIA driver, so its version is the driver's.

This module is the decision and the vocabulary, shared by the local rig (``llamacpp.mps``) and the
rig's serve step (``provision.serve``); it starts nothing.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.errors import ProfileError, UsageError

CONTROL_PROGRAM = "nvidia-cuda-mps-control"
# where the driver's utilities are when not on the PATH: the lent H200's driver mount, then a DLAMI's
CONTROL_FOLDERS = ("/usr/local/nvidia/bin", "/usr/bin")
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"
MpsSetting = Literal["auto"] | bool
# the words --mps takes on the command line, and what each means in a profile
MPS_CHOICES = {"auto": "auto", "on": True, "off": False}


def parse_mps(text: str, option: str = "--mps") -> MpsSetting:
    """``auto``, ``on`` or ``off`` as a profile's setting; anything else is one line naming the option."""
    try:
        return MPS_CHOICES[text.strip().lower()]
    except KeyError:
        raise UsageError(f"{option} {text!r}: give auto, on or off") from None


def find_control_program(path: str | None = None) -> str | None:
    """The control program: on the PATH (``path``: another search path, as a rig's), else where drivers put it."""
    found = shutil.which(CONTROL_PROGRAM, path=path)
    if found:
        return found
    for folder in CONTROL_FOLDERS:
        candidate = Path(folder) / CONTROL_PROGRAM
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def shared_gpus(gpus: Sequence[int | None]) -> list[int]:
    """The GPUs two or more of the replicas (by their GPU, None for none) run on."""
    counts = Counter(gpu for gpu in gpus if gpu is not None)
    return sorted(gpu for gpu, count in counts.items() if count > 1)


@dataclass(frozen=True)
class MpsDecision:
    """Whether MPS runs for a set of replicas, and the one line that says why."""

    run: bool
    reason: str
    control: str | None = None  # the control program's path, when found


def decide_mps(setting: MpsSetting, gpus: Sequence[int | None], control: str | None,
               source: str = "[server] mps") -> MpsDecision:
    """Whether replicas on ``gpus`` (each replica's GPU) run under MPS, from the setting and the control program
    found (``control``); ``true`` without a control program is refused here, before anything starts."""
    shared = shared_gpus(gpus)
    flag = source.startswith("--")  # a flag's words (on, off, auto), or TOML's values
    if setting is False:
        return MpsDecision(False, f"{source} off" if flag else f"{source} = false", control)
    if setting is True:
        asked = f"{source} on" if flag else f"{source} = true"
        if control is None:
            raise ProfileError(
                f"{asked}, but {CONTROL_PROGRAM} was found neither on the PATH nor in "
                f"{' or '.join(CONTROL_FOLDERS)}; install the NVIDIA driver's utilities (it ships with the driver), "
                "or set mps = \"auto\" or false")
        return MpsDecision(True, asked, control)
    auto = f"{source} auto" if flag else f"{source} = \"auto\""
    if not shared:
        many = sum(gpu is not None for gpu in gpus) > 1
        why = "the replicas run one per GPU" if many else "no two replicas share a GPU"
        return MpsDecision(False, f"{auto}: {why}", control)
    where = ", ".join(str(gpu) for gpu in shared)
    if control is None:
        return MpsDecision(False, f"{auto}: replicas share GPU {where}, but {CONTROL_PROGRAM} was not found, so they "
                                  "take turns on it", None)
    return MpsDecision(True, f"{auto}: replicas share GPU {where}", control)


def client_environment(pipe_dir: str) -> dict[str, str]:
    """What a CUDA process needs in its environment to be a client of the daemon at ``pipe_dir``."""
    return {PIPE_VARIABLE: pipe_dir}


def daemon_environment(pipe_dir: str, log_dir: str) -> dict[str, str]:
    """The control daemon's own folders. Replicas name their GPU by the driver's index in PCI order, and under MPS a
    client's ``CUDA_VISIBLE_DEVICES`` counts among the GPUs its server sees: the daemon is given every GPU in that
    order (an inherited ``CUDA_VISIBLE_DEVICES`` is dropped for it, the replicas keep to theirs)."""
    return {PIPE_VARIABLE: pipe_dir, LOG_VARIABLE: log_dir, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
