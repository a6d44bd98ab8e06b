"""``rigbench quality eval|ladder --settings FILE``: the file's keys, the flags given beside it over them, the
flags not given leaving the file's values alone; read before any server is asked (nothing is served here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from core.errors import UsageError
from core.quality_settings import AskSettings
from core.rundir.quality_files import write_question_file
from quality.generator import generate_questions
from rigbench.cli import app
from rigbench.commands import quality


def settings_as_run(monkeypatch: pytest.MonkeyPatch, where: str, argv: list[str]) -> AskSettings:
    """The settings the command runs from: what it hands ``where``, which stops it there."""
    seen: list[AskSettings] = []

    def stop(asked: AskSettings, *args: object, **kwargs: object) -> None:
        seen.append(asked)
        raise typer.Exit(0)

    monkeypatch.setattr(quality, where, stop)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0 and seen, result.output
    return seen[0]


def test_eval_reads_the_file_and_the_flags_given_override_it(tmp_path: Path, monkeypatch) -> None:
    questions = tmp_path / "q.jsonl"
    write_question_file(questions, generate_questions(2, seed=1), "test")
    (tmp_path / "eval.toml").write_text('max_tokens = 96\nrepeat = 2\nmode = "completion"\nshots = 3\n')
    asked = settings_as_run(monkeypatch, "request_settings", [
        "quality", "eval", "--url", "http://127.0.0.1:9", "--questions", str(questions), "--out",
        str(tmp_path / "eval"), "--settings", str(tmp_path / "eval.toml"), "--max-tokens", "24", "--shots", "1"])
    assert (asked.max_tokens, asked.repeat, asked.mode, asked.shots, asked.concurrency) == (24, 2, "completion", 1, 1)


def test_ladder_reads_the_file_and_the_flags_given_override_it(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "ladder.json").write_text('{"repeat_rungs": ["F16"], "bench": true, "within": 5, "seed": 3}')
    asked = settings_as_run(monkeypatch, "ladder_options", [
        "quality", "ladder", str(tmp_path / "m.gguf"), "--questions", str(tmp_path / "q.jsonl"), "--out",
        str(tmp_path / "ladder"), "--settings", str(tmp_path / "ladder.json"), "--no-bench",
        "--repeat-rungs", "Q8_0,Q4_0", "--server-arg=-t 1"])
    assert (asked.repeat_rungs, asked.bench, asked.within, asked.seed) == (["Q8_0", "Q4_0"], False, 5, 3)
    assert asked.server_args == ["-t", "1"]


def test_a_bad_key_in_the_file_is_one_line_naming_the_file_and_the_key(tmp_path: Path) -> None:
    (tmp_path / "ladder.toml").write_text("max_tokens = 96\nno_bench = true\n")
    result = CliRunner().invoke(app, ["quality", "ladder", "m.gguf", "--questions", "q.jsonl", "--out",
                                      str(tmp_path / "ladder"), "--settings", str(tmp_path / "ladder.toml")])
    assert isinstance(result.exception, UsageError) and not (tmp_path / "ladder").exists()
    assert str(result.exception).startswith(f"--settings {tmp_path / 'ladder.toml'}: no_bench: unknown key")


def test_a_ladder_priced_at_no_cost_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["quality", "report", str(tmp_path), "--price-per-hour", "0"])
    assert isinstance(result.exception, UsageError)
    assert str(result.exception) == "--price-per-hour: 0 is not an hourly price; give USD per hour, above 0"
