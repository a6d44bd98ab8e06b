"""Few-shot prompts: the exemplars never hold a graded question, the same seed gives the same
prompt, a pool too small for --shots is refused, and the settings record all of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import UsageError
from core.rundir.quality import EvalManifest, EvalSettings, Question
from core.rundir.quality_files import write_question_file
from quality.fewshot import (
    POOL_SIZE,
    STOP,
    ExemplarPool,
    completion_text,
    draw_exemplars,
    few_shot_prompt,
    file_pool,
    generator_pool,
    normalized,
    worked_answer,
)
from quality.generator import generate_questions


def question(index: int, text: str, answer: str = "#### 1") -> Question:
    return Question(id=f"q{index}", question=text, answer=answer)


def test_no_exemplar_is_a_graded_question_even_written_otherwise() -> None:
    pool = generator_pool()
    # the graded set is most of the pool itself, recased and respaced: only 5 questions are left to draw
    graded = [
        q.model_copy(update={"question": "  " + q.question.upper().replace(" ", "   ")})
        for q in pool.questions[: POOL_SIZE - 5]
    ]
    drawn = draw_exemplars(pool, graded, shots=5, seed=3)
    graded_texts = {normalized(q.question) for q in graded}
    assert len(drawn) == 5 and not any(normalized(e.question) in graded_texts for e in drawn)
    with pytest.raises(UsageError, match=r"^--shots 6: .* offers 5 questions once 195 equal to graded ones"):
        draw_exemplars(pool, graded, shots=6, seed=3)


def test_the_generator_pool_is_not_the_default_graded_set() -> None:
    graded = generate_questions(100, seed=0)
    pool = generator_pool()
    assert {normalized(q.question) for q in pool.questions}.isdisjoint({normalized(q.question) for q in graded})
    assert all(e.id.startswith("gen") and not e.id.startswith("gen0-") for e in pool.questions)


def test_the_same_seed_gives_the_same_prompt_and_another_seed_another() -> None:
    graded = generate_questions(4, seed=0)
    first = completion_text(few_shot_prompt(generator_pool(), graded, 5, seed=11), graded[0])
    again = completion_text(few_shot_prompt(generator_pool(), graded, 5, seed=11), graded[0])
    other = completion_text(few_shot_prompt(generator_pool(), graded, 5, seed=12), graded[0])
    assert first == again and first != other


def test_the_prompt_is_worked_examples_then_the_question_left_open() -> None:
    pool = ExemplarPool([question(1, "One plus one?", "1 + 1 = 2\n#### 2"), question(2, "Two plus two?", "4")], "hand")
    prompt = few_shot_prompt(pool, [question(9, "Three plus three?")], shots=2, seed=0)
    by_id = {e.id: e for e in prompt.exemplars}
    assert sorted(by_id) == ["q1", "q2"]
    text = completion_text(prompt, question(9, "Three plus three?"))
    blocks = text.split("\n\n")
    assert blocks[-1] == "Question: Three plus three?\nAnswer:"
    assert sorted(blocks[:2]) == ["Question: One plus one?\nAnswer: 1 + 1 = 2\n#### 2",
                                  "Question: Two plus two?\nAnswer: #### 4"]
    assert STOP == ["\n\nQuestion:"] and not text.endswith(" ")


def test_a_bare_number_answer_gets_the_marker_the_grader_reads() -> None:
    assert worked_answer(question(1, "q", "72")) == "#### 72"
    assert worked_answer(question(1, "q", "48 / 2 = 24\n#### 24\n")) == "48 / 2 = 24\n#### 24"


def test_a_pool_too_small_is_refused_naming_shots_and_its_size(tmp_path: Path) -> None:
    path = tmp_path / "shots.jsonl"
    write_question_file(path, [question(1, "A?"), question(2, "B?"), question(3, "C?")], "test")
    pool = file_pool(path)
    with pytest.raises(UsageError) as refused:
        draw_exemplars(pool, [question(7, "b?")], shots=3, seed=0)
    message = str(refused.value)
    assert message.startswith("--shots 3: the exemplar pool (shots.jsonl (sha256 ")
    assert message.endswith("offers 2 questions once 1 equal to graded ones are dropped; give --shots 2 or fewer, "
                            "or a larger --shots-from file")
    assert "\n" not in message


def test_completion_settings_hold_their_prompt_and_old_eval_files_read_as_chat() -> None:
    graded = generate_questions(3, seed=0)
    prompt = few_shot_prompt(generator_pool(), graded, 2, seed=0)
    settings = EvalSettings(mode="completion", shots=2, stop=STOP, prompt=prompt)
    assert settings.mode_label() == "completion, 2 shots" and EvalSettings().mode_label() == "chat"
    assert EvalSettings.model_validate_json(settings.model_dump_json()) == settings
    with pytest.raises(ValidationError, match="completion mode needs its prompt"):
        EvalSettings(mode="completion")
    with pytest.raises(ValidationError, match="completion mode only"):
        EvalSettings(shots=2)
    with pytest.raises(ValidationError, match="shots is 3 but the prompt holds 2"):
        EvalSettings(mode="completion", shots=3, prompt=prompt)
    old = {
        "run_id": "r", "created_at": "2026-12-01T00:00:00+00:00",
        "settings": {"temperature": 0.0, "seed": 0, "max_tokens": 64, "cache_prompt": False, "thinking": False,
                     "concurrency": 1, "repeat": 1, "system_prompt": None},
        "questions": {"name": "q.jsonl", "count": 1, "sha256": "ab" * 32},
    }
    manifest = EvalManifest.model_validate_json(json.dumps(old))
    assert manifest.settings.mode == "chat" and manifest.settings.shots == 0 and manifest.settings.prompt is None


def test_settings_name_how_they_differ_without_the_whole_prompt() -> None:
    graded = generate_questions(3, seed=0)
    two = EvalSettings(mode="completion", shots=2, stop=STOP, prompt=few_shot_prompt(generator_pool(), graded, 2, 0))
    other = two.model_copy(update={"shot_seed": 1, "prompt": few_shot_prompt(generator_pool(), graded, 2, 1)})
    assert EvalSettings().differences(two) == [
        "prompt mode chat vs completion, 2 shots",
        "stop [] vs ['\\n\\nQuestion:']",
    ]
    (seed, exemplars) = two.differences(other)
    assert seed == "shot_seed 0 vs 1" and exemplars.startswith("exemplars gen7919-")
