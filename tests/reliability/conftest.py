"""Fixtures shared by the reliability tests: a small filesystem to fill."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


@pytest.fixture()
def small_disk(tmp_path: Path):
    """A 2 MiB tmpfs as the runs folder (root only), unmounted afterwards."""
    folder = tmp_path / "small"
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here, so no small filesystem for the full-disk test")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 2 MiB tmpfs (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
