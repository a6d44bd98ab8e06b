"""A command that writes a file onto a full disk says ENOSPC in one line naming the file, and leaves no cut
file (nor a temporary) behind: ``rigbench plan --out`` and ``rigbench gate --junit`` as the real console script,
and the CLI's own line for a refused file that reaches it from anywhere else."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import RigbenchError
from rigbench import cli

ROOT = Path(__file__).resolve().parents[2]
RIGBENCH = str(Path(sys.executable).parent / "rigbench")
STUDY = ROOT / "runs/gpu-h200-study-2026-11-30"
SEED_MANY = STUDY / "autotune/20261130T061546Z-gemma4-e2b-seed-many-5a7e"
BACKEND_SAMPLING = STUDY / "autotune/20261130T061627Z-gemma4-e2b-bs-0ab8"
ENOSPC_TEXT = "No space left on device (ENOSPC)"


def rigbench(*args: str | Path, home: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "RIGBENCH_PRICE_CACHE": str(home / "no-price-cache.json")}
    return subprocess.run([RIGBENCH, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=env)


def fill(folder: Path) -> None:
    """Every free byte of ``folder``'s filesystem taken by one file."""
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as filler:
        while True:
            filler.write(b"\0" * (64 * 1024))


def said_in_one_line(done: subprocess.CompletedProcess, path: Path) -> None:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"rigbench: error: cannot write {path}: {ENOSPC_TEXT}; "), lines[0]


def nothing_left_but_the_filler(folder: Path) -> None:
    left = sorted(path.name for path in folder.rglob("*") if path.is_file())
    assert left == ["filler"], f"a cut file or a temporary is left: {left}"


def test_plan_out_on_a_full_disk_says_so_in_one_line_and_leaves_no_file(tmp_path: Path, small_disk: Path) -> None:
    out = small_disk / "plan.json"
    fill(small_disk)
    planned = rigbench("plan", "--users", "10", "--min-tok-s", "15", "--ttft-p90", "1", "--usd-per-hour", "1",
                       BACKEND_SAMPLING, "--out", out, home=tmp_path)
    said_in_one_line(planned, out)
    nothing_left_but_the_filler(small_disk)


def test_gate_junit_on_a_full_disk_says_so_in_one_line_and_leaves_no_file(tmp_path: Path, small_disk: Path) -> None:
    """Said before the gate's own verdict (a regression here): CI must not read a missing JUnit file as a pass."""
    junit = small_disk / "reports" / "gate.xml"
    fill(small_disk)
    gated = rigbench("gate", SEED_MANY, "--baseline", BACKEND_SAMPLING, "--junit", junit, home=tmp_path)
    said_in_one_line(gated, junit)
    nothing_left_but_the_filler(small_disk)


def raising(error: OSError):
    def app() -> None:
        raise error
    return app


def test_a_refused_file_reaching_the_cli_is_one_line_naming_it_and_a_bug_keeps_its_traceback(
    monkeypatch, capsys
) -> None:
    """A full disk, a quota, no permission, a read-only filesystem: one line and exit 2. A missing file inside
    rigbench is a bug, so it is not said away as one line."""
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
        monkeypatch.setattr(cli, "app", raising(OSError(code, "refused", "/data/out/report.md")))
        with pytest.raises(SystemExit) as exited:
            cli.main()
        assert exited.value.code == RigbenchError.exit_code
        said = capsys.readouterr().err
        assert said.count("\n") == 1 and "Traceback" not in said, said
        assert said.startswith(f"rigbench: error: /data/out/report.md: refused ({errno.errorcode[code]}); "), said
    monkeypatch.setattr(cli, "app", raising(FileNotFoundError(errno.ENOENT, "No such file", "/rigbench/data.json")))
    with pytest.raises(FileNotFoundError):
        cli.main()
