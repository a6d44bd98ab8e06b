"""``rigbench study``: one typer group, its studies, and the options each refuses before anything is made."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from core.errors import UsageError
from rigbench.commands.study import app

PROFILES = Path(__file__).resolve().parents[3] / "runs" / "gpu-h200-profiles-2026-11-30"
WIDE = {"COLUMNS": "200"}


def test_the_group_holds_the_studies_each_with_its_help() -> None:
    listed = CliRunner().invoke(app, ["--help"], env=WIDE)
    assert listed.exit_code == 0
    for name in ("gpu", "real-gemma", "real-gemma-report", "peers", "fidelity", "slot-layout", "ladder", "report"):
        assert name in listed.output
        helped = CliRunner().invoke(app, [name, "--help"], env=WIDE)
        assert helped.exit_code == 0 and "Exit codes" in helped.output, helped.output


def test_an_earlier_folder_that_is_not_a_study_is_refused_by_the_report(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(PROFILES), "--earlier", str(tmp_path)], env=WIDE)
    assert result.exit_code == 2 and "--earlier" in result.output and "not a study folder" in result.output


def test_a_bad_load_is_refused_naming_the_option_before_the_peers_folder_is_made(tmp_path: Path) -> None:
    out = tmp_path / "peers"
    result = CliRunner().invoke(app, ["peers", "--out", str(out), "--loads", "64x100:q2"], env=WIDE)
    assert result.exit_code == 2 and "--loads" in result.output and "unknown option 'q2'" in result.output
    unknown = CliRunner().invoke(app, ["peers", "--out", str(out), "--tools", "rigbench,locust"], env=WIDE)
    assert isinstance(unknown.exception, UsageError) and "--tools" in str(unknown.exception)
    assert not out.exists()


def test_the_fidelity_report_and_the_ladder_refuse_their_options_first(tmp_path: Path) -> None:
    steps = CliRunner().invoke(app, ["fidelity", "--runs-dir", str(tmp_path / "raw"), "--capacity-steps", "64,x"])
    assert isinstance(steps.exception, UsageError) and "--capacity-steps" in str(steps.exception)
    assert not (tmp_path / "raw").exists()
    ladder = CliRunner().invoke(app, ["ladder", "smollm2", "--questions", "q.jsonl", "--out", str(tmp_path / "l"),
                                      "--backend", "gpu"], env=WIDE)
    assert ladder.exit_code == 2 and "--backend" in ladder.output and not (tmp_path / "l").exists()


def test_the_real_gemma_study_refuses_an_unknown_arm_or_phase_before_its_folder_is_made(tmp_path: Path) -> None:
    out = tmp_path / "study"
    arm = CliRunner().invoke(app, ["real-gemma", str(out), "--arms", "gpu-sampling,stock"], env=WIDE)
    assert isinstance(arm.exception, UsageError) and "--arms" in str(arm.exception)
    assert "'stock' is not one of" in str(arm.exception) and "stock-slots" in str(arm.exception)
    phase = CliRunner().invoke(app, ["real-gemma", str(out), "--phases", "model,sweeps"], env=WIDE)
    assert isinstance(phase.exception, UsageError) and "--phases" in str(phase.exception)
    assert not out.exists()


def test_the_real_gemma_report_reads_a_study_folder_and_refuses_another(tmp_path: Path) -> None:
    study = Path(__file__).resolve().parents[3] / "runs" / "real-gemma-h200-2026-12-03"
    out = tmp_path / "tables.md"
    made = CliRunner().invoke(app, ["real-gemma-report", str(study), "--out", str(out)], env=WIDE)
    assert made.exit_code == 0, made.output
    assert out.read_text() in made.output
    # autotune's trials higher than the shipped line only within its interval leave the line kept
    assert "best: profile: (profile as is) (threads-16, ubatch-128 measured higher" in made.output
    assert "| stock-slots " in made.output and "slot-layout-bound" in made.output
    refused = CliRunner().invoke(app, ["real-gemma-report", str(tmp_path)], env=WIDE)
    assert refused.exit_code == 2 and "not a real-Gemma study folder" in refused.output


def test_the_studies_that_set_arms_against_each_other_here_take_repeats() -> None:
    for name in ("gpu", "real-gemma", "mps", "sessions", "slot-layout"):
        helped = CliRunner().invoke(app, [name, "--help"], env=WIDE)
        assert helped.exit_code == 0 and "--repeats" in helped.output, name
    refused = CliRunner().invoke(app, ["mps", "out", "--repeats", "0"], env=WIDE)
    assert refused.exit_code == 2 and "--repeats" in refused.output
