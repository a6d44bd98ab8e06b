"""``--repeats``: arms run interleaved against real ground-truth servers, judged by the spread between runs in the
report and the gate; runs made alone are not called different."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.gate import ONE_RUN_NOTE, GatedRun, Thresholds, gate
from analysis.headline import headline_text
from analysis.prices import PriceBook
from analysis.repeats import AGGREGATE, arms_of, compare_arms
from analysis.repeats_section import aa_lines
from analysis.report import build_sections, write_report
from analysis.report_model import build_section
from analysis.summary import read_summary
from core.rundir import RunDir
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from rigbench.cli import app

pytestmark = pytest.mark.integration

ROUNDS = 4


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> list[Path]:
    """Arm a streams 100 tok/s per user, arm b 125 (a quarter more: 1.5 s windows of two users on a busy 2-core
    machine spread a run's aggregate by several percent, and four rounds give a wide t), each run four times,
    interleaved: the runs in the order they ran."""
    folder = tmp_path_factory.mktemp("repeats")
    slower = GroundTruthConfig(ttft_ms=20, itl_ms=10.0, model="default")
    faster = slower.model_copy(update={"itl_ms": 10.0 / 1.25})
    with GroundTruthServer(slower, folder / "a.jsonl") as a, GroundTruthServer(faster, folder / "b.jsonl") as b:
        result = CliRunner().invoke(app, [
            "sweep", "--url", f"a={a.base_url}", "--url", f"b={b.base_url}", "--steps", "2", "--warmup", "0.5",
            "--measure", "1.5", "--max-tokens", "32", "--repeats", str(ROUNDS), "--runs-dir", str(folder / "runs"),
            "--no-progress"])
    assert result.exit_code == 0, result.output
    runs = sorted((folder / "runs").iterdir(), key=lambda path: RunDir(path).read_manifest().repeat.order)
    assert len(runs) == 2 * ROUNDS
    return runs


def test_arms_run_a_b_a_b_and_every_record_names_its_repeat(series: list[Path]) -> None:
    manifests = [RunDir(path).read_manifest() for path in series]
    assert [(m.repeat.arm, m.repeat.index) for m in manifests] == [("a", 1), ("b", 1), ("a", 2), ("b", 2),
                                                                     ("a", 3), ("b", 3), ("a", 4), ("b", 4)]
    assert [m.created_at for m in manifests] == sorted(m.created_at for m in manifests)  # made in that order
    assert len({m.repeat.series for m in manifests}) == 1 and {m.repeat.of for m in manifests} == {ROUNDS}
    for path, manifest in zip(series, manifests, strict=True):
        assert manifest.status == "complete" and manifest.load.repeats == ROUNDS
        assert {record.repeat for record in RunDir(path).read_records()} == {manifest.repeat.index}


def test_a_faster_arm_is_found_beyond_the_spread_between_runs(series: list[Path], tmp_path: Path) -> None:
    sections = build_sections(series)
    a, b = arms_of(sections)
    assert (a.label, a.repeats, b.label, b.repeats) == ("a", ROUNDS, "b", ROUNDS)
    aggregate = next(row for row in compare_arms(a, b) if row.figure is AGGREGATE)
    assert aggregate.paired and aggregate.verdict == "beyond noise" and aggregate.better
    # each request: 20 ms to the first token, then 32 tokens at 10 or 8 ms: 340 against 276 ms, a ratio of 1.23
    assert 1.12 < aggregate.ratio.value < 1.35 and aggregate.ratio.low > 1, aggregate.ratio
    assert aggregate.ratio.method == f"paired t over {ROUNDS} rounds"
    glance = headline_text(sections)
    assert glance.startswith(f"Across 2 arms x {ROUNDS} runs of ") and ", b has the highest aggregate output" in glance
    assert "95% intervals between runs" in glance, glance
    report = write_report(series, tmp_path / "report").read_text()
    between = report.split("## Between runs", 1)[1].split("\n## ", 1)[0]
    assert "### b against a" in between and "beyond noise: better" in between
    assert f"| a     | 2 users | {ROUNDS}" in between
    summary = read_summary(tmp_path / "report" / "summary.json").between_runs  # for programs, the same figures
    assert [(arm.label, len(arm.runs)) for arm in summary.arms] == [("a", ROUNDS), ("b", ROUNDS)]
    written = next(row for row in summary.comparisons if row.figure == "aggregate tok/s")
    assert (written.verdict, written.paired, written.ratio.value) == ("beyond noise", True, aggregate.ratio.value)
    assert summary.arms[0].steps[0].figures["aggregate tok/s"].method == f"t over {ROUNDS} runs"


def gated(paths: list[Path]) -> GatedRun:
    book = PriceBook.default()
    return GatedRun.from_sections([build_section(path, book) for path in paths], "RUN")


def test_the_gate_fails_a_slower_arm_beyond_the_spread_and_passes_the_faster(series: list[Path]) -> None:
    slower, faster = gated(series[0::2]), gated(series[1::2])
    failed = gate(slower, faster, Thresholds(max_drop=0.05))
    reasons = {check.figure.name: check.failures for check in failed.failures}
    assert "aggregate tok/s" in reasons and f"beyond the spread between runs (paired t over {ROUNDS} rounds)" in (
        reasons["aggregate tok/s"][0]), reasons
    assert ONE_RUN_NOTE not in failed.notes
    passed = gate(faster, slower, Thresholds(max_drop=0.05))
    assert passed.passed, [check.failures for check in passed.failures]
    # the same drop (about a fifth) inside a tolerance of 35 % is no regression
    assert gate(slower, faster, Thresholds(max_drop=0.35)).passed


def test_one_run_a_side_is_judged_on_its_own_intervals_and_the_gate_says_the_spread_is_unknown(
        series: list[Path]) -> None:
    result = gate(gated(series[:1]), gated(series[1:2]), Thresholds(max_drop=0.05))
    assert ONE_RUN_NOTE in result.notes
    aggregate = next(check for check in result.checks if check.figure.name == "aggregate tok/s")
    assert "between runs" not in " ".join(aggregate.failures) + aggregate.note


def test_runs_of_different_arms_are_not_gated_as_one_arms_repeats(series: list[Path]) -> None:
    from core.errors import AnalysisError

    with pytest.raises(AnalysisError, match="are different arms"):
        gated(series[:2])


def alone(run: Path, folder: Path) -> Path:
    """A copy of the run as if made alone, by a command without --repeats (no series, no arm)."""
    copy = folder / run.name
    shutil.copytree(run, copy)
    manifest = RunDir(copy).read_manifest()
    RunDir(copy).update_manifest(repeat=None, load=manifest.load.model_copy(update={"arm": None, "repeats": 1}))
    return copy


def test_two_identical_runs_made_alone_are_not_called_different(series: list[Path], tmp_path: Path) -> None:
    first, second = alone(series[0], tmp_path), alone(series[2], tmp_path)
    glance = headline_text(build_sections([first, second]))
    assert "with one run of an arm the spread between runs is unknown, so no difference is called" in glance, glance
    assert "--repeats 3 measures it" in glance
    assert "beyond" not in glance.split("\n\n")[0], glance


def test_one_arm_run_four_times_says_how_far_its_runs_landed_apart(series: list[Path]) -> None:
    glance = headline_text(build_sections(series[0::2]))
    opening = glance.split("\n\n")[0]
    assert opening.startswith(f"Across {ROUNDS} runs of a") and "the runs landed " in opening, opening
    assert "apart (coefficient of variation)" in opening


def test_an_aa_check_sets_one_arms_odd_runs_against_its_even_runs(series: list[Path]) -> None:
    (arm,) = arms_of(build_sections(series[0::2]))
    text = "\n".join(aa_lines(arm))
    assert "| 2 users | aggregate tok/s |" in text
    assert "A/A: a (even runs) against a (odd runs), paired by round" in text
    assert f"paired t over {ROUNDS // 2} rounds" in text
    (few,) = arms_of(build_sections(series[0:4:2]))
    assert "A/A verdict: needs 4 runs or more" in "\n".join(aa_lines(few))


def test_selftest_aa_sweeps_the_ground_truth_as_one_arms_repeats(tmp_path: Path) -> None:
    out = tmp_path / "aa.md"
    result = CliRunner().invoke(app, ["selftest", "--aa", "2", "--steps", "1", "--warmup", "0.3", "--measure", "1",
                                      "--runs-dir", str(tmp_path / "runs"), "--no-progress", "--no-save",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    manifests = [RunDir(path).read_manifest() for path in sorted((tmp_path / "runs").iterdir())]
    assert [(m.repeat.arm, m.repeat.index, m.repeat.of) for m in manifests] == [("selftest", 1, 2),
                                                                                ("selftest", 2, 2)]
    assert "A/A: 2 runs of the same ground truth" in result.output and "| 1 user | aggregate tok/s |" in result.output
    assert "A/A verdict: needs 4 runs or more" in out.read_text()


def test_two_series_of_one_unnamed_arm_are_two_arms_named_apart(series: list[Path], tmp_path: Path) -> None:
    """Two rigs' runs of one profile, each repeated: the same arm name in two series."""
    copies = []
    for number, (first, second) in enumerate([(series[0], series[2]), (series[1], series[3])]):
        for index, run in enumerate((first, second), start=1):
            copy = tmp_path / f"s{number}" / run.name
            shutil.copytree(run, copy)
            repeat = RunDir(copy).read_manifest().repeat.model_copy(
                update={"series": f"series-{number}", "arm": "default", "index": index, "of": 2})
            RunDir(copy).update_manifest(repeat=repeat)
            copies.append(copy)
    arms = arms_of(build_sections(copies))
    assert [arm.repeats for arm in arms] == [2, 2] and arms[0].label != arms[1].label, [a.label for a in arms]
