"""The GPU study report, rebuilt from the committed H200 study (real data) and from damaged copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.study_report import decode_steps, least_squares_slope, load_arms, write_study_report
from core.errors import AnalysisError
from core.rundir import RunDir
from rigbench.cli import app

STUDY = Path(__file__).resolve().parents[2] / "runs" / "gpu-h200-study-2026-11-30"


@pytest.fixture
def study(tmp_path: Path) -> Path:
    copy = tmp_path / "study"
    shutil.copytree(STUDY, copy)
    return copy


def table_row(text: str, first_cell: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row starting {first_cell!r}")


def test_report_figures_come_from_the_study_files(study: Path) -> None:
    text = write_study_report(study).read_text()
    bench = json.loads((study / "bench-e2b.json").read_text())["summary"]
    models = json.loads((study / "models.json").read_text())

    row = table_row(text, "e2b")
    assert row[1] == f"{models['e2b-q4_0.gguf']:,}" and row[3] == f"{bench['tg128']:,.1f}"
    assert "+0.05%" in text  # the synthetic E2B against the published file size
    arms = load_arms(study)
    assert {(a.preset, a.kind) for a in arms} >= {("e2b", "base"), ("e2b", "drafter3"), ("e4b", "drafter2"),
                                                   ("e2b", "ctx120000")}
    # long context: server decode at 120000 against llama-bench at the same depth, recomputed here
    ctx = next(a for a in arms if a.depth == 120000)
    depth = json.loads((study / "bench-e2b-depth.json").read_text())["summary"]["tg128@d120000"]
    server = ctx.step(1).server_tok_s.value
    assert table_row(text, "120,000")[4] == f"{server / depth:,.2f}"
    assert "within the 2% required" in text
    # the drafter arms of that day sampled on the CPU, the run without the drafter on the GPU
    assert "**Not like for like:** 5 drafter runs" in text
    assert (study / "plots" / "sweep_aggregate.png").stat().st_size > 1000


def test_client_server_disagreement_is_reported(study: Path) -> None:
    run = next(a for a in load_arms(study) if a.kind == "base" and a.preset == "e2b").path
    summary = json.loads((run / "summary.json").read_text())
    step = summary["runs"][0]["steps"][0]
    step["client_tok_s"]["value"] = step["server_tok_s"]["value"] * 1.05
    (run / "summary.json").write_text(json.dumps(summary))
    text = write_study_report(study).read_text()
    assert "largest gap 5.00%" in text and "OUTSIDE the 2% required" in text


def test_a_folder_that_is_not_a_study_is_named(tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match="build_manifest.json: missing"):
        write_study_report(tmp_path)


def test_decode_call_time_per_user_count_comes_from_the_server_counter(study: Path) -> None:
    arm = next(a for a in load_arms(study) if a.kind == "base" and a.preset == "e2b")
    rates = decode_steps(arm.path)
    assert sorted(rates) == [1, 2, 4, 8, 16, 32, 64]
    # recompute one step by hand from telemetry.jsonl: decode calls between "measure" and "end"
    snaps = {(t.step, t.boundary): t for t in RunDir(arm.path).read_telemetry()}
    start, end = snaps[(6, "measure")], snaps[(6, "end")]
    by_hand = (end.metrics["llamacpp:n_decode_total"] - start.metrics["llamacpp:n_decode_total"]) / (
        end.taken_at - start.taken_at)
    assert rates[64] == pytest.approx(by_hand)
    assert least_squares_slope([(1, 1.0), (2, 3.0), (3, 5.0)]) == pytest.approx(2.0)
    assert least_squares_slope([(1, 1.0)]) is None
    assert "ms more per decode call for each added user" in write_study_report(study).read_text()


def test_report_survives_a_failed_reference_setting_and_missing_bench_files(study: Path) -> None:
    greedy = json.loads((study / "greedy.json").read_text())
    greedy["replies"]["plain/cpu-sampling"] = {"error": "server did not start"}
    (study / "greedy.json").write_text(json.dumps(greedy))
    for bench in study.glob("bench-*.json"):
        bench.unlink()
    text = write_study_report(study).read_text()
    assert "`plain/cpu-sampling` failed: server did not start" in text
    assert "(no llama-bench figures for e2b in this study)" in text


PROFILES = STUDY.parent / "gpu-h200-profiles-2026-11-30"


def section(text: str, heading: str) -> str:
    """The text of one ``## `` section of the report."""
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def test_batched_ceiling_beside_the_served_aggregate_and_sections_from_an_earlier_study(tmp_path: Path) -> None:
    new, old = tmp_path / "runs" / "new", tmp_path / "runs" / "old"
    shutil.copytree(PROFILES, new)
    shutil.copytree(STUDY, old)
    alone = write_study_report(new).read_text()
    assert "## 6. Long context" not in alone and "## 2. What limits" not in alone

    text = write_study_report(new, [old]).read_text()
    ceiling = section(text, "4b.")
    per_slot = json.loads((new / "batched-bench-e2b-per-slot-kv.json").read_text())["summary"]["tg@64"]
    unified = json.loads((new / "batched-bench-e2b-unified-kv.json").read_text())["summary"]["tg@64"]
    base = next(a for a in load_arms(new) if a.preset == "e2b" and a.kind == "base")
    served = base.step(64).aggregate_tok_s.value
    row = table_row(ceiling, "64")
    assert row[1:4] == [f"{per_slot:,.1f}", f"{unified:,.1f}", f"{served:,.1f}"]
    best = max(per_slot, unified)
    assert row[4] == f"{served / best:,.2f}" and row[5] == f"{64 / best * 1000:,.2f}"

    # long context and autotune come from the earlier folder, named, with that folder's llama-bench
    long_ctx = section(text, "6.")
    assert "From the earlier study `../old`" in long_ctx
    depth = json.loads((old / "bench-e2b-depth.json").read_text())["summary"]["tg128@d120000"]
    ctx = next(a for a in load_arms(old) if a.depth == 120000)
    assert table_row(long_ctx, "120,000")[4] == f"{ctx.step(1).server_tok_s.value / depth:,.2f}"
    assert "That study's automatic pick for its own sweeps" in section(text, "2.")
    seed = table_row(section(text, "7."), "drafter (3 tokens) at one user, vs none (ours: acceptance ~1 by design)")
    drafter3 = next(a for a in load_arms(new) if a.preset == "e2b" and a.draft_n == 3)
    assert seed[1] == f"{drafter3.step(1).server_tok_s.value / base.step(1).server_tok_s.value:.2f}"
    assert seed[2] == "2.39 code, 1.31 story"


def test_an_earlier_folder_that_is_not_a_study_is_refused_by_the_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["study", "report", str(PROFILES), "--earlier", str(tmp_path)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--earlier" in result.output and "not a study folder" in result.output


def trial_line(name: str, repeat: int, one_user: float | None, aggregate: float | None, status: str = "complete",
               overrides: tuple[str, ...] = ("-ub", "128")) -> str:
    from rigbench.autotune import TrialResult

    return TrialResult(name=name, overrides=list(overrides), status=status, started_at="2027-01-15T08:00:00Z",
                       one_user_server_tok_s=one_user, one_user_client_tok_s=None if one_user is None else one_user - 1,
                       max_users=64, aggregate_tok_s_at_max_users=aggregate,
                       one_user_vs_bench=None if one_user is None else one_user / 200, repeat=repeat, repeats=3,
                       series="s").model_dump_json()


def test_a_trials_repeats_are_one_row_with_their_mean_and_interval_between_runs(tmp_path: Path) -> None:
    """A tuning's repeats used to be one row per run, three rows of one trial looking like three trials; a trial is
    one row, its figures the mean over its complete runs, with the 95% interval between them."""
    from analysis.repeats import between_runs
    from analysis.study_report import autotune_section

    study = tmp_path / "study"
    (study / "autotune").mkdir(parents=True)
    lines = [trial_line("profile", 1, 150.0, 900.0, overrides=()),  # a trial run once: its row as before
             trial_line("ubatch", 1, 100.0, 1000.0), trial_line("failing", 1, 90.0, 800.0),
             trial_line("ubatch", 2, 110.0, 1100.0), trial_line("failing", 2, None, None, status="failed"),
             trial_line("ubatch", 3, 120.0, 1200.0), trial_line("failing", 3, 94.0, 840.0)]
    (study / "autotune" / "autotune.jsonl").write_text("\n".join(lines) + "\n")
    text = "\n".join(autotune_section(study, 200.0))
    assert [table_row(text, name)[0] for name in ("profile", "ubatch", "failing")] == ["profile", "ubatch", "failing"]
    assert sum(line.startswith("| ubatch ") for line in text.splitlines()) == 1
    # (tabulate writes a column of plain numbers as numbers: 149.0 as 149)
    assert table_row(text, "profile") == ["profile", "(profile as is)", "complete", "150.0", "149", "0.75",
                                          "900.0", "6"]
    one_user, aggregate = between_runs([100.0, 110.0, 120.0]), between_runs([1000.0, 1100.0, 1200.0])
    assert table_row(text, "ubatch") == [
        "ubatch", "-ub 128", "complete (3 runs)", f"110.0 [{one_user.low:,.1f}, {one_user.high:,.1f}]", "109",
        "0.55", f"1,100.0 [{aggregate.low:,.1f}, {aggregate.high:,.1f}]", "10"]
    failing = table_row(text, "failing")  # the failed run left out of the figures, counted in the status
    assert failing[2] == "2 of 3 runs complete" and failing[3].startswith("92.0 [") and failing[6].startswith("820.0 [")
    assert "A trial run more than once (`--repeats`) is one row" in text
