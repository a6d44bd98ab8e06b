"""``rigbench gate`` on committed runs: what a CI log shows, its exit codes and its JUnit file."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.gate import ONE_RUN_NOTE
from core.errors import AnalysisError, UsageError
from rigbench.cli import app

STUDY = Path(__file__).resolve().parents[2] / "runs" / "gpu-h200-study-2026-11-30"
SEED_MANY = STUDY / "autotune/20261130T061546Z-gemma4-e2b-seed-many-5a7e"
BACKEND_SAMPLING = STUDY / "autotune/20261130T061627Z-gemma4-e2b-bs-0ab8"
E4B = STUDY / "runs/20261130T063044Z-gemma4-e2b-e4b-best-cab0"


@pytest.fixture(autouse=True)
def bundled_prices(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))


def gate(*args: str | Path):
    return CliRunner().invoke(app, ["gate", *map(str, args)])


# the committed runs were made on one H200 of a lent machine: its share of a p5en.48xlarge (8x H200)
PRICE_AS = ("--price-as", "p5en.48xlarge")
ON_DEMAND = "$/Mtok per-GPU share (1/8) of p5en.48xlarge on-demand (--price-as), measured on NVIDIA H200"


def test_a_run_against_itself_passes_with_a_markdown_table() -> None:
    """A run on a machine that is no known type has no $/Mtok to gate unless --price-as prices it: said once."""
    result = gate(BACKEND_SAMPLING, "--baseline", BACKEND_SAMPLING)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"run      = local bs {BACKEND_SAMPLING.name} (1 run)"
    assert lines[2] == ("a regression: worse than the baseline by more than 5% and beyond the spread between runs "
                        "(with one run a side: the two runs' 95% intervals apart)")
    assert lines[4] == f"note: {ONE_RUN_NOTE}"
    assert lines[5] == (
        f"note: $/Mtok not gated: local bs {BACKEND_SAMPLING.name}: not priced: ran on vm (NVIDIA H200), not a known "
        "instance type; --price-as TYPE prices it as one, --usd-per-hour USD at a given hourly price"
    )
    assert lines[6].startswith("| step ") and lines[7].startswith("|----")
    assert len([line for line in lines if line.startswith("| 1 user ") or line.startswith("| 64 users ")]) == 8
    assert "$/Mtok" not in "".join(lines[6:])
    assert lines[-1] == "gate: pass (8 checks)"
    priced = gate(BACKEND_SAMPLING, "--baseline", BACKEND_SAMPLING, *PRICE_AS)
    assert priced.exit_code == 0 and priced.output.splitlines()[-1] == "gate: pass (10 checks)"
    assert "not gated" not in priced.output and f"| 64 users | {ON_DEMAND} " in priced.output


def test_an_unknown_price_as_type_is_refused_before_any_run_is_read(tmp_path: Path) -> None:
    refused = gate(tmp_path / "no-such-run", "--baseline", BACKEND_SAMPLING, "--price-as", "h100")
    assert isinstance(refused.exception, UsageError) and refused.exception.exit_code == 2
    assert str(refused.exception).startswith("--price-as: 'h100' is not an instance type rigbench knows; known: ")


def test_a_slower_run_exits_1_and_writes_junit(tmp_path: Path) -> None:
    junit = tmp_path / "reports" / "gate.xml"
    result = gate(SEED_MANY, "--baseline", BACKEND_SAMPLING, "--junit", junit, *PRICE_AS)
    assert result.exit_code == 1, result.output
    assert (
        f"| 64 users | {'aggregate tok/s':<{len(ON_DEMAND)}} | 1,589.8 [1,581.8, 1,600.4] | 722.5 [719.1, 724.2] "
        "| -54.6%   | apart, worse    | FAIL: worse by 54.6%, 95% intervals apart"
    ) in result.output
    assert result.output.splitlines()[-2].startswith("gate: FAIL, 3 of 10 checks: 1 user per-user tok/s, 64 users")
    assert result.output.splitlines()[-1] == f"junit: {junit}"
    failures = ET.parse(junit).getroot().findall("./testsuite/testcase/failure")
    assert len(failures) == 3


def test_a_looser_drop_lets_the_throughput_pass_but_not_the_cost() -> None:
    result = gate(SEED_MANY, "--baseline", BACKEND_SAMPLING, "--max-drop", "60", *PRICE_AS)
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == f"gate: FAIL, 1 of 10 checks: 64 users {ON_DEMAND}"


def test_runs_of_different_models_are_refused_unless_allowed(tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    refused = gate(E4B, "--baseline", SEED_MANY, "--junit", junit)
    assert isinstance(refused.exception, AnalysisError) and refused.exception.exit_code == 2
    assert "model e4b-q4_0.gguf (38223c336ee0) in the run, e2b-q4_0.gguf (ae61b2fd312a) in the baseline" in str(
        refused.exception)
    assert not junit.exists()  # nothing is written for input that is refused
    allowed = gate(E4B, "--baseline", SEED_MANY, "--allow-different")
    assert allowed.exit_code == 1  # compared: the larger model is slower
    assert "note: compared although they differ (--allow-different): model e4b-q4_0.gguf" in allowed.output


def test_help_lists_the_exit_codes() -> None:
    result = CliRunner().invoke(app, ["gate", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Exit codes: 0 no regression and every limit met; 1 a regression or a missed limit" in text
    assert "2 unusable input" in text
    assert "analysed afresh from their records" in text


@pytest.mark.integration
def test_the_console_script_exits_with_the_gate_codes(tmp_path: Path) -> None:
    """What CI sees: exit 1 and the table on stdout for a regression; exit 2 and one line on stderr for a refusal."""
    rigbench = Path(sys.executable).with_name("rigbench")
    env = {"PATH": "/usr/bin:/bin", "RIGBENCH_PRICE_CACHE": str(tmp_path / "none.json")}
    slower = subprocess.run(
        [rigbench, "gate", SEED_MANY, "--baseline", BACKEND_SAMPLING], capture_output=True, text=True, env=env,
        timeout=120,
    )
    assert slower.returncode == 1 and slower.stderr == ""
    assert "gate: FAIL, 2 of 8 checks" in slower.stdout  # not priced: no $/Mtok checks
    refused = subprocess.run(
        [rigbench, "gate", E4B, "--baseline", SEED_MANY], capture_output=True, text=True, env=env, timeout=120
    )
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith(f"rigbench: error: run {E4B.name} and baseline {SEED_MANY.name} measure "
                                     "different workloads: model e4b-q4_0.gguf")
    assert refused.stderr.count("\n") == 1
