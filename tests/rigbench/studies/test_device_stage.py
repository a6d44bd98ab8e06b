"""The GPU machine's set-up script joins the carried parts of the llama.cpp sdist and checks them before any
build: real tar, split and sha256sum, the stage named as a user types it (relative to the repository root)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "rigbench" / "studies" / "real_gemma_device.sh"


@pytest.fixture
def stage(tmp_path: Path) -> Path:
    """``build.tar`` (an sdist in a tar) cut in three parts under ``checkout/.device/stage``, its sha256 beside."""
    sdist = tmp_path / "sdist"
    sdist.mkdir()
    (sdist / "llama.cpp-1.tar.gz").write_bytes(os.urandom(30_000))
    whole = tmp_path / "build.tar"
    with tarfile.open(whole, "w") as tar:
        tar.add(sdist, arcname="sdist")
    folder = tmp_path / "checkout" / ".device" / "stage"
    folder.mkdir(parents=True)
    data = whole.read_bytes()
    cut = len(data) // 3 + 1
    for index in range(3):
        (folder / f"build.tar.part-{index:02d}").write_bytes(data[index * cut:(index + 1) * cut])
    (folder / "build.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  build.tar\n")
    return folder


def unpack(stage: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RIGBENCH_DEVICE_WORK": str(tmp_path / "work")}
    return subprocess.run(["bash", str(SCRIPT), "sdist", ".device/stage", str(tmp_path / "out")],
                          cwd=stage.parents[1], env=env, capture_output=True, text=True, timeout=60)


def test_parts_named_by_a_relative_stage_join_check_and_reach_the_cache(stage: Path, tmp_path: Path) -> None:
    done = unpack(stage, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "build-check.txt").read_text().strip() == "build.tar: OK"
    assert (tmp_path / "work" / "cache" / "sources" / "llama.cpp-1.tar.gz").stat().st_size == 30_000
    assert not (tmp_path / "work" / "build.tar").exists(), "the joined tar is removed once unpacked"


def test_one_changed_byte_stops_the_script_before_anything_is_unpacked(stage: Path, tmp_path: Path) -> None:
    part = stage / "build.tar.part-01"
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    done = unpack(stage, tmp_path)
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr
    assert not (tmp_path / "work" / "cache" / "sources" / "llama.cpp-1.tar.gz").exists()
