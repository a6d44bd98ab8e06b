"""Completion mode end to end: the real Gemma 3 270M base model on the pinned CPU llama-server (the
session's ``gemma3_server``), three one-step questions, two one-step exemplars from a --shots-from
file, replies cut at 48 tokens. The grades are whatever the model answers; the test checks the
prompt, the stop and the record. Exemplars like the graded questions matter to a 270M model: shown
four-step worked answers for a one-step question, it goes on writing steps until the token limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.rundir.quality_files import EvalDir, write_question_file
from quality.fewshot import normalized
from quality.generator import generate_questions
from rigbench.cli import app

pytestmark = pytest.mark.integration


def test_a_base_model_answers_a_few_shot_prompt_cut_at_the_next_question(gemma3_server, tmp_path: Path) -> None:
    graded = generate_questions(3, seed=0, max_steps=1)
    questions, exemplars = tmp_path / "three.jsonl", tmp_path / "exemplars.jsonl"
    write_question_file(questions, graded, "test: 3 one-step questions")
    write_question_file(exemplars, generate_questions(20, seed=5, max_steps=1), "test: 20 one-step exemplars")
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["quality", "eval", "--url", gemma3_server.base_url, "--questions",
                                      str(questions), "--out", str(out), "--mode", "completion", "--shots", "2",
                                      "--shots-from", str(exemplars), "--max-tokens", "48"])
    assert result.exit_code == 0, result.output
    assert "prompt mode: completion, 2 shots" in result.output
    manifest = EvalDir(out).read_manifest()
    settings = manifest.settings
    assert manifest.status == "complete" and settings.mode == "completion" and settings.shots == 2
    assert settings.stop == ["\n\nQuestion:"] and settings.prompt is not None
    assert settings.prompt.question_template == "Question: {question}\nAnswer:"
    assert len(settings.prompt.exemplar_ids) == 2 and settings.prompt.pool.startswith("exemplars.jsonl (sha256 ")
    graded_texts = {normalized(q.question) for q in graded}
    assert not any(normalized(e.question) in graded_texts for e in settings.prompt.exemplars)
    answers = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == 3 and all(a["http_status"] == 200 and a["completion_tokens"] <= 48 for a in answers)
    for answer in answers:
        assert "\n\nQuestion:" not in answer["text"]  # the stop string ends the reply and is not part of it
        assert ("cut_off" in answer["failures"]) == (answer["finish_reason"] == "length")
    # the worked examples taught the base model where its answer goes, and the stop where it ends
    assert any(a["finish_reason"] == "stop" and "####" in a["text"] and a["extracted"] for a in answers), answers
