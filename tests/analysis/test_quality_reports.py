"""Paired comparison, the ladder report and the grade grid, on ladders written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import binomtest

from analysis.quality_compare import load_eval, mode_warning, paired
from analysis.quality_grid import BOTH_RIGHT, BOTH_WRONG, DIFFERENT, compare_ladders, write_grid
from analysis.quality_report import best_trade, fastest_within, load_ladder, write_ladder_report
from core.errors import AnalysisError
from core.rundir import MachineInfo, ModelInfo, RigInfo
from core.rundir.quality import (
    AnswerRecord,
    EvalManifest,
    EvalSettings,
    FewShotPrompt,
    LadderManifest,
    Question,
    QuestionSetInfo,
    RungInfo,
)
from core.rundir.quality_files import EvalDir, LadderDir, append_jsonl

QUESTIONS = QuestionSetInfo(name="q.jsonl", count=10, sha256="ab" * 32)


def write_eval(folder: Path, rights: list[bool], speed: float, questions: QuestionSetInfo = QUESTIONS,
               texts: list[str] | None = None, machine: str = "cpu", settings: EvalSettings | None = None) -> None:
    directory = EvalDir(folder)
    directory.write_manifest(EvalManifest(
        run_id=folder.name, arm=folder.name, status="complete", created_at="2026-12-01T00:00:00+00:00",
        settings=settings or EvalSettings(), questions=questions, rig=RigInfo(machine=MachineInfo(cpu_model=machine)),
    ))
    for index, right in enumerate(rights):
        text = texts[index] if texts else f"#### {index if right else -1}"
        append_jsonl(directory.path / "answers.jsonl", AnswerRecord(
            question_id=f"q{index:02d}", text=text, extracted=str(index if right else -1), expected=str(index),
            right=right, seconds=0.1, decode_tokens_per_second=speed, failures=[] if right else ["cut_off"],
        ))


def write_ladder(folder: Path, rungs: dict[str, tuple[list[bool], float, int, str]], machine: str = "cpu",
                 texts: dict[str, list[str]] | None = None, settings: EvalSettings | None = None) -> Path:
    infos = []
    for name, (rights, speed, size, sha) in rungs.items():
        write_eval(folder / "rungs" / name, rights, speed, texts=(texts or {}).get(name), machine=machine,
                   settings=settings)
        infos.append(RungInfo(name=name, file=f"/x/{name}.gguf", size_bytes=size, sha256=sha, origin="quantized",
                              eval_run=f"rungs/{name}"))
    LadderDir(folder).write_manifest(LadderManifest(
        ladder_id=folder.name, status="complete", created_at="2026-12-01T00:00:00+00:00",
        source=ModelInfo(name="m.gguf", sha256="cd" * 32, size_bytes=100), reference=next(iter(rungs)),
        rungs=infos, questions=QUESTIONS, settings=settings or EvalSettings(), wall_seconds=3600.0,
        rig=RigInfo(machine=MachineInfo(cpu_model=machine)),
    ))
    return folder


ALL = [True] * 10


def completion(*exemplar_ids: str) -> EvalSettings:
    """Completion-mode settings whose prompt holds the named exemplars (a hand-made prompt)."""
    exemplars = [Question(id=name, question=f"{name}?", answer="#### 1") for name in exemplar_ids]
    prompt = FewShotPrompt(exemplar_template="Question: {question}\nAnswer: {answer}",
                           question_template="Question: {question}\nAnswer:", separator="\n\n",
                           exemplars=exemplars, pool="hand")
    return EvalSettings(mode="completion", shots=len(exemplars), stop=["\n\nQuestion:"], prompt=prompt)


def ladder_rungs() -> dict[str, tuple[list[bool], float, int, str]]:
    return {
        "F16": (ALL, 20.0, 1000, "1" * 64),
        "Q8_0": ([True] * 9 + [False], 40.0, 500, "2" * 64),  # lost 1: not significant
        "Q4_0": ([False] * 8 + [True] * 2, 80.0, 300, "3" * 64),  # lost 8: significant
    }


def test_lost_gained_and_the_exact_mcnemar_p(tmp_path: Path) -> None:
    write_eval(tmp_path / "a", [True] * 9 + [False], 10.0)
    write_eval(tmp_path / "b", [False] * 8 + [True, True], 10.0)
    pair = paired(load_eval(tmp_path / "a"), load_eval(tmp_path / "b"))
    assert (pair.lost, pair.gained, pair.questions) == (8, 1, 10)
    assert pair.p_value == pytest.approx(binomtest(8, 9, 0.5).pvalue) == pytest.approx(0.0390625)
    assert pair.significant_loss
    assert pair.difference == pytest.approx(-0.7)
    assert pair.low < -0.7 < pair.high < 0


def test_best_trade_is_the_fastest_rung_without_a_significant_loss(tmp_path: Path) -> None:
    folder = write_ladder(tmp_path / "ladder", ladder_rungs())
    _, rungs = load_ladder(folder)
    assert best_trade(rungs).name == "Q8_0"
    assert fastest_within(rungs, 1).name == "Q8_0"
    assert fastest_within(rungs, 8).name == "Q4_0"


def test_the_ladder_report_has_every_rung_and_its_price(tmp_path: Path) -> None:
    folder = write_ladder(tmp_path / "ladder", ladder_rungs())
    report = write_ladder_report(folder, price_per_hour=0.8, price_source="g6.xlarge on-demand").read_text()
    assert "| Q4_0 " in report and "| Q8_0 " in report
    assert "**Q8_0**" in report.split("## Best trade")[1]
    assert "3600 s (1.00 h) × $0.8000/h (g6.xlarge on-demand) = **$0.8000**" in report
    summary = json.loads((folder / "quality.json").read_text())
    rows = [(r["rung"], r["right"], r["lost"]) for r in summary["rungs"]]
    assert rows == [("F16", 10, 0), ("Q8_0", 9, 1), ("Q4_0", 2, 8)]
    assert summary["rungs"][2]["failures"]["cut_off"] == 8
    assert (folder / "plots" / "speed_vs_right.png").stat().st_size > 1000


def test_ladders_of_different_question_sets_are_not_compared(tmp_path: Path) -> None:
    folder = write_ladder(tmp_path / "ladder", ladder_rungs())
    other = QuestionSetInfo(name="other.jsonl", count=10, sha256="ef" * 32)
    write_eval(folder / "rungs" / "Q8_0", ALL, 40.0, questions=other)  # a second manifest over the first
    with pytest.raises(AnalysisError, match="different question files"):
        load_ladder(folder)


def test_the_grid_counts_disagreements_and_first_losses(tmp_path: Path) -> None:
    a = write_ladder(tmp_path / "a", ladder_rungs(), machine="CPU")
    rungs_b = ladder_rungs()
    rungs_b["Q8_0"] = ([False] + [True] * 9, 90.0, 500, "2" * 64)  # B loses q00 instead of q09
    b = write_ladder(tmp_path / "b", rungs_b, machine="GPU")
    grid = compare_ladders(a, b)
    q8 = next(row for row in grid["rungs"] if row.name == "Q8_0")
    assert (q8.graded_differently, q8.lost_a, q8.lost_b, q8.lost_both) == (2, 1, 1, 0)
    assert grid["cells"][1][0] == DIFFERENT and grid["cells"][1][5] == BOTH_RIGHT
    assert grid["cells"][2][0] == BOTH_WRONG
    assert grid["first_lost"]["q00"] == {"a": "Q4_0", "b": "Q8_0"}
    assert grid["first_lost"]["q09"] == {"a": "Q8_0", "b": None}
    markdown = write_grid(a, b, tmp_path / "grid").read_text()
    assert "A = CPU vs B = GPU" in markdown
    assert (tmp_path / "grid" / "grid.png").stat().st_size > 1000


def test_a_grid_of_different_files_is_refused_or_marked(tmp_path: Path) -> None:
    a = write_ladder(tmp_path / "a", ladder_rungs())
    rungs_b = ladder_rungs()
    rungs_b["Q4_0"] = (*rungs_b["Q4_0"][:3], "9" * 64)
    b = write_ladder(tmp_path / "b", rungs_b)
    with pytest.raises(AnalysisError, match=r"different files for Q4_0 \(Q4_0: 333333333333 vs 999999999999\)"):
        compare_ladders(a, b)
    assert not (tmp_path / "grid").exists()
    grid = compare_ladders(a, b, allow_different_files=True)
    assert [row.same_file for row in grid["rungs"]] == [True, True, False]
    grid = compare_ladders(a, b, leave_out_different_files=True)
    assert [row.name for row in grid["rungs"]] == ["F16", "Q8_0"] and list(grid["left_out"]) == ["Q4_0"]
    markdown = write_grid(a, b, tmp_path / "grid", leave_out_different_files=True).read_text()
    assert "**Q4_0 left out**: the two machines ran different files (sha256 333333333333 on A, 999999999999" in (
        markdown)


def test_the_grid_sets_what_the_machine_moves_beside_what_the_quantization_moves(tmp_path: Path) -> None:
    a = write_ladder(tmp_path / "a", ladder_rungs(), machine="CPU")
    rungs_b = ladder_rungs()
    rungs_b["F16"] = ([False, False] + [True] * 8, *rungs_b["F16"][1:])  # the machine alone loses q00, q01
    b = write_ladder(tmp_path / "b", rungs_b, machine="GPU")
    grid = compare_ladders(a, b)
    top, q4 = grid["rungs"][0], grid["rungs"][2]
    assert (top.machine.lost, top.machine.gained, round(top.machine.p_value, 3)) == (2, 0, 0.5)
    assert (q4.quantization_a.lost, q4.quantization_a.gained) == (8, 0)
    assert q4.quantization_a.p_value == pytest.approx(2 * 0.5 ** 8)
    assert (q4.quantization_b.lost, q4.quantization_b.gained) == (6, 0), "lost against B's own F16"
    markdown = write_grid(a, b, tmp_path / "grid").read_text()
    assert "At the top rung, F16, the machine alone moves 2 of 10 grades (2 / 0, p = 0.500); on A the " \
           "quantization moves 1 (Q8_0, p = 1) to 8 (Q4_0, p = 0.008)" in markdown
    assert json.loads((tmp_path / "grid" / "grid.json").read_text())["rungs"][0]["machine"]["lost"] == 2


def test_a_grid_of_ladders_asked_differently_is_refused(tmp_path: Path) -> None:
    a = write_ladder(tmp_path / "a", ladder_rungs())
    b = write_ladder(tmp_path / "b", ladder_rungs())
    manifest = LadderDir(b).read_manifest()
    LadderDir(b).write_manifest(manifest.model_copy(update={"settings": EvalSettings(max_tokens=256)}))
    with pytest.raises(AnalysisError, match="asked their questions differently .max_tokens 1024 vs 256"):
        compare_ladders(a, b)


def test_the_ladder_report_says_which_prompt_mode_graded_the_answers(tmp_path: Path) -> None:
    chat = write_ladder_report(write_ladder(tmp_path / "chat", ladder_rungs())).read_text()
    assert "Prompt mode: chat (each question a user message through the server's chat template)." in chat
    folder = write_ladder(tmp_path / "completion", ladder_rungs(), settings=completion("e1", "e2"))
    report = write_ladder_report(folder).read_text()
    assert "Prompt mode: completion, 2 shots (a few-shot prompt sent to /v1/completions; exemplars e1, e2" in report
    assert "warning" not in report
    assert json.loads((folder / "quality.json").read_text())["prompt_mode"] == "completion, 2 shots"


def test_a_comparison_of_runs_asked_differently_says_so(tmp_path: Path) -> None:
    write_eval(tmp_path / "chat", ALL, 10.0)
    write_eval(tmp_path / "five", ALL, 10.0, settings=completion("e1", "e2", "e3", "e4", "e5"))
    write_eval(tmp_path / "other", ALL, 10.0, settings=completion("e1", "e2", "e3", "e4", "e9"))
    chat, five, other = (load_eval(tmp_path / name) for name in ("chat", "five", "other"))
    assert mode_warning([five, five]) is None
    assert mode_warning([chat, five]) == (
        "warning: these runs were graded in different prompt modes (chat (chat), five (completion, 5 shots)); "
        "a difference may be the prompt's"
    )
    assert mode_warning([five, other]).startswith(
        "warning: these runs were graded with different exemplars (five (completion, 5 shots: exemplars e1, e2, e3"
    )


def test_a_grid_of_ladders_graded_in_different_modes_is_refused_naming_the_modes(tmp_path: Path) -> None:
    a = write_ladder(tmp_path / "a", ladder_rungs())
    b = write_ladder(tmp_path / "b", ladder_rungs(), settings=completion("e1", "e2"))
    with pytest.raises(AnalysisError, match=r"asked their questions differently \(prompt mode chat vs completion, 2 "
                                            r"shots; stop \[\] vs \['\\n\\nQuestion:'\]\)"):
        compare_ladders(a, b)
    c = write_ladder(tmp_path / "c", ladder_rungs(), settings=completion("e1", "e2"))
    grid = write_grid(b, c, tmp_path / "grid").read_text()
    assert "Prompt mode: completion, 2 shots" in grid
