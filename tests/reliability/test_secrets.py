"""Secret hygiene: a full local-rig run never writes the user's tokens anywhere, and keeps its files private.

Fake secrets are planted in the environment the way a user's shell holds them (the load and
server processes inherit it). After a whole run (build, llama-server, Locust sweep, report),
every byte the run left behind (manifest, shards, telemetry, Locust and llama-server logs,
report, plots, gzipped files opened) and everything printed to the console is searched for
them. Any AWS or Hugging Face call would go to a dead loopback port, never outward.
"""

from __future__ import annotations

import gzip
import io
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rigbench.cli import app
from rigbench.local_rig import LocalRigOptions, run_local_rig

SECRET_VARIABLES = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "PULUMI_ACCESS_TOKEN",
    "RIGBENCH_API_KEY",
    "OPENAI_API_KEY",
)
DEAD_LOOPBACK = "http://127.0.0.1:9"


def planted_secrets() -> dict[str, str]:
    """Values no real file could hold by chance, distinct per variable."""
    prefixes = {"HF_TOKEN": "hf_", "HUGGING_FACE_HUB_TOKEN": "hf_", "AWS_ACCESS_KEY_ID": "AKIA"}
    return {name: prefixes.get(name, "") + "PLANTED" + secrets.token_hex(12).upper() for name in SECRET_VARIABLES}


def file_texts(path: Path) -> list[bytes]:
    """The raw bytes, plus the decompressed bytes when the file is gzipped."""
    data = path.read_bytes()
    texts = [data]
    if path.name.endswith(".gz"):
        texts.append(gzip.decompress(data))
    return texts


def leaks(planted: dict[str, str], where: str, texts: list[bytes]) -> list[str]:
    """Each planted value found whole, or by a 16-character middle piece (a truncated or wrapped copy)."""
    found = []
    for name, value in planted.items():
        probes = {value.encode(), value[4:20].encode()}
        if any(probe in text for text in texts for probe in probes):
            found.append(f"{name} in {where}")
    return found


def test_leak_scan_finds_a_planted_value(tmp_path):
    planted = planted_secrets()
    log = tmp_path / "server.log.gz"
    log.write_bytes(gzip.compress(f"auth header: Bearer {planted['RIGBENCH_API_KEY'][:20]}...".encode()))
    assert leaks(planted, "server.log.gz", file_texts(log)) == ["RIGBENCH_API_KEY in server.log.gz"]
    assert leaks(planted, "clean", [b"nothing here"]) == []


@dataclass
class FinishedRun:
    planted: dict[str, str]
    runs: Path
    run_dir: Path
    report: Path
    console: str


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """One whole local-rig run (1 and 2 users) with secrets in its environment; shared by the checks below."""
    planted = planted_secrets()
    runs = tmp_path_factory.mktemp("secrets") / "runs"
    console_text = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in planted.items():
            patch.setenv(name, value)
        patch.setenv("AWS_ENDPOINT_URL", DEAD_LOOPBACK)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("HF_ENDPOINT", DEAD_LOOPBACK)
        report = run_local_rig(
            LocalRigOptions(runs_root=runs, load={"user_steps": [1, 2], "warmup_seconds": 0.5, "measure_seconds": 1}),
            console=Console(file=console_text, width=200),
        )
    (run_dir,) = runs.iterdir()
    return FinishedRun(planted, runs, run_dir, report, console_text.getvalue())


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_full_local_rig_run_leaks_no_secret(finished_run: FinishedRun):
    run_dir, planted = finished_run.run_dir, finished_run.planted
    assert finished_run.report.is_relative_to(run_dir)
    files = sorted(p for p in run_dir.rglob("*") if p.is_file())
    names = {p.relative_to(run_dir).as_posix() for p in files}
    expected = {"manifest.json", "telemetry.jsonl", "llama-server.log", "locust.log", "report.md", "summary.json"}
    assert expected <= names
    assert any(name.startswith("records/") for name in names)
    assert any(name.startswith("plots/") for name in names)

    found = []
    for path in files:
        found += leaks(planted, path.relative_to(run_dir).as_posix(), file_texts(path))
    found += leaks(planted, "console output", [finished_run.console.encode()])
    assert found == [], f"planted secrets written out: {found}"


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_full_local_rig_run_is_private(finished_run: FinishedRun):
    loose = []
    for path in [finished_run.run_dir, *finished_run.run_dir.rglob("*")]:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        wanted = 0o700 if path.is_dir() else 0o600
        if mode & 0o077:
            loose.append(f"{path.relative_to(finished_run.runs)} {oct(mode)} (expected {oct(wanted)})")
    assert loose == [], f"run files readable by others: {loose}"


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_report_in_every_format_written_into_the_run_later_is_private_and_clean(finished_run: FinishedRun,
                                                                                 tmp_path: Path):
    copy = tmp_path / finished_run.run_dir.name
    shutil.copytree(finished_run.run_dir, copy)  # modes kept; the shared run stays as the checks above read it
    result = CliRunner().invoke(app, ["report", str(copy), "--format", "all"])
    assert result.exit_code == 0, result.output
    written = {"report.html", "steps.csv", "requests.csv"}
    assert written <= {path.name for path in copy.iterdir()}
    loose = [f"{path.name} {oct(stat.S_IMODE(path.stat().st_mode))}" for path in [copy, *copy.rglob("*")]
             if stat.S_IMODE(path.stat().st_mode) & 0o077]
    assert loose == [], f"report files readable by others: {loose}"
    assert [found for name in written for found in leaks(finished_run.planted, name, file_texts(copy / name))] == []
