"""The prompt-mode options: each bad combination refused in one line, a good one turned into the
settings an eval records, and a comparison of runs asked in different modes saying so."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.errors import UsageError
from core.rundir.quality import AnswerRecord, EvalManifest, EvalSettings, QuestionSetInfo
from core.rundir.quality_files import EvalDir, append_jsonl
from quality.generator import generate_questions
from rigbench.cli import app
from rigbench.prompt_mode import prompt_settings

GRADED = generate_questions(3, seed=0)


@pytest.mark.parametrize(
    ("mode", "shots", "shot_seed", "shots_from", "system", "refusal"),
    [
        ("chat", 0, 4, None, None, "--shot-seed: worked examples are asked in completion mode only"),
        ("chat", 0, 0, Path("x.jsonl"), None, "--shots-from: worked examples are asked in completion mode only"),
        ("completion", 2, 0, None, "Be brief.", "--system: a completion prompt has no system message"),
        ("completion", 0, 0, Path("x.jsonl"), None, "--shots-from: no exemplar is drawn with --shots 0"),
        ("completion", 1, 0, Path("/nowhere/x.jsonl"), None, "--shots-from: /nowhere/x.jsonl: no such question file"),
        ("completion", 500, 0, None, None, "--shots 500: the exemplar pool (the project's generator, seed 7919, 200"),
    ],
)
def test_a_bad_combination_is_refused_in_one_line(
    mode: str, shots: int, shot_seed: int, shots_from: Path | None, system: str | None, refusal: str
) -> None:
    with pytest.raises(UsageError) as refused:
        prompt_settings(mode, shots, shot_seed, shots_from, GRADED, system=system)
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


def test_chat_adds_nothing_and_completion_records_its_prompt_and_stop() -> None:
    assert prompt_settings("chat", 0, 0, None, GRADED, system="Be brief.") == {}
    settings = EvalSettings(**prompt_settings("completion", 3, 2, None, GRADED))
    assert settings.mode_label() == "completion, 3 shots" and settings.shot_seed == 2
    assert settings.stop == ["\n\nQuestion:"] and settings.prompt is not None
    assert settings.prompt.pool == "the project's generator, seed 7919, 200 problems"
    assert EvalSettings(**prompt_settings("completion", 3, 2, None, GRADED)) == settings


def write_eval(folder: Path, settings: EvalSettings) -> Path:
    directory = EvalDir(folder)
    directory.write_manifest(EvalManifest(
        run_id=folder.name, status="complete", created_at="2026-12-01T00:00:00+00:00", settings=settings,
        questions=QuestionSetInfo(name="q.jsonl", count=1, sha256="ab" * 32),
    ))
    append_jsonl(folder / "answers.jsonl", AnswerRecord(question_id="q1", text="#### 5", extracted="5", expected="5",
                                                        right=True, seconds=0.1))
    return folder


def test_compare_of_runs_graded_in_different_modes_prints_a_warning(tmp_path: Path) -> None:
    chat = write_eval(tmp_path / "chat", EvalSettings())
    five = write_eval(tmp_path / "five", EvalSettings(**prompt_settings("completion", 5, 0, None, GRADED)))
    result = CliRunner().invoke(app, ["quality", "compare", str(chat), str(five)])
    assert result.exit_code == 0, result.output
    assert ("warning: these runs were graded in different prompt modes (chat (chat), five (completion, 5 shots)); "
            "a difference may be the prompt's") in result.stderr
    same = CliRunner().invoke(app, ["quality", "compare", str(five), str(five)])
    assert "prompt mode: completion, 5 shots" in same.stdout and "warning" not in same.output
