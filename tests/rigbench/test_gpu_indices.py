"""Which GPUs replicas may use: the driver's list, narrowed to an inherited CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigbench.local_rig import gpu_indices

FOUR_GPUS = "0, GPU-aaaa1111\n1, GPU-bbbb2222\n2, GPU-cccc3333\n3, GPU-dddd4444\n"


@pytest.fixture()
def four_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{FOUR_GPUS}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize(("visible", "expected"), [
    (None, [0, 1, 2, 3]),
    ("2,3", [2, 3]),
    ("3,1", [3, 1]),  # in the order given: replica 0 goes to the first
    ("GPU-cccc,GPU-aaaa1111", [2, 0]),  # UUIDs and unambiguous prefixes, as CUDA takes them
    ("1,7,2", [1]),  # CUDA ignores everything from the first entry it cannot match
    ("GPU-", []),  # an ambiguous prefix matches nothing
    ("", []),
    ("-1", []),
])
def test_replicas_use_the_gpus_the_rig_was_given(four_gpus, monkeypatch, visible, expected) -> None:
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_indices() == expected


def test_no_driver_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu_indices() == []
