"""The generator's answers, checked by reading each problem's text again, independently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.rundir.quality import Question
from quality.generator import generate_questions
from quality.grading import expected_answer

START = re.compile(r"^(\w+) has (\d+) (\w+)\.$")
START_PLUS = re.compile(r"^(\w+) has (\d+) (\w+) and buys (\d+) more\.$")
START_MINUS = re.compile(r"^(\w+) has (\d+) (\w+) and gives (\d+) away\.$")
MORE = re.compile(r"^Then \w+ (?:buys|finds|is given|wins) (\d+) more \w+\.$")
LESS = re.compile(r"^Then \w+ (?:gives away|loses|sells|uses) (\d+) \w+\.$")
TWICE = re.compile(r"^Then \w+ ends up with twice as many \w+\.$")
HALF = re.compile(r"^Then \w+ gives away half of the \w+\.$")


def solve(text: str) -> tuple[int, int]:
    """The count the story ends with, and its number of changes, read from the words alone."""
    sentences = re.split(r"(?<=[.?])\s+", text)
    assert sentences[-1].startswith("How many"), text
    first, *changes = sentences[:-1]
    for pattern, sign in ((START_PLUS, 1), (START_MINUS, -1)):
        found = pattern.match(first)
        if found:
            assert not changes, text
            return int(found.group(2)) + sign * int(found.group(4)), 1
    found = START.match(first)
    assert found, first
    value = int(found.group(2))
    for sentence in changes:
        if (step := MORE.match(sentence)) is not None:
            value += int(step.group(1))
        elif (step := LESS.match(sentence)) is not None:
            assert int(step.group(1)) < value, text  # never more than there is
            value -= int(step.group(1))
        elif TWICE.match(sentence):
            value *= 2
        elif HALF.match(sentence):
            assert value % 2 == 0, text  # halves are whole
            value //= 2
        else:
            raise AssertionError(f"unknown sentence {sentence!r}")
    return value, len(changes)


def test_every_answer_is_what_the_words_say() -> None:
    questions = generate_questions(400, seed=3)
    sizes = []
    for question in questions:
        value, steps = solve(question.question)
        assert expected_answer(question.answer) == str(value), question
        assert value >= 0
        sizes.append(steps)
    assert {sizes.count(size) for size in (1, 2, 3, 4)} == {100}  # one to four steps, equally common


def test_same_seed_same_problems_other_seed_others() -> None:
    assert generate_questions(20, seed=1) == generate_questions(20, seed=1)
    assert generate_questions(20, seed=1) != generate_questions(20, seed=2)
    ids = [q.id for q in generate_questions(50, seed=1)]
    assert len(set(ids)) == 50


COMMITTED = Path(__file__).resolve().parents[2] / "runs" / "quality-cpu-smollm2-2026-12-01" / "questions.jsonl"


def test_the_default_dials_give_the_problems_committed_runs_asked() -> None:
    committed = [Question.model_validate_json(line) for line in COMMITTED.read_text().splitlines()]
    assert generate_questions(100, seed=0, max_steps=4) == committed


@pytest.mark.parametrize("max_number", [4, 10, 200, 5000])
def test_the_number_dial_bounds_every_amount_and_the_words_still_give_the_answer(max_number: int) -> None:
    for question in generate_questions(200, seed=7, max_steps=3, max_number=max_number):
        value, _ = solve(question.question)
        assert expected_answer(question.answer) == str(value), question
        numbers = [int(n) for n in re.findall(r"\d+", question.question)]
        assert numbers[0] <= max_number, question  # the starting count
        assert all(n <= max_number // 2 for n in numbers[1:]), question  # each amount added or taken


def test_the_dials_are_refused_out_of_their_range() -> None:
    with pytest.raises(ValueError, match="max_number must be from 4 to 10000"):
        generate_questions(5, max_number=3)
    with pytest.raises(ValueError, match="max_steps must be from 1 to 12"):
        generate_questions(5, max_steps=0)
