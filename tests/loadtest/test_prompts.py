"""Bundled prompt categories, rotation and user prompt files."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from core.errors import LoadTestError
from loadtest.prompts import CATEGORIES, load_prompts, rotation


def test_mixed_has_all_six_categories_and_rotates_them_evenly() -> None:
    prompts = load_prompts("mixed")
    assert {p.category for p in prompts} == set(CATEGORIES)
    first = list(itertools.islice(rotation(prompts), 60))
    assert Counter(p.category for p in first) == {name: 10 for name in CATEGORIES}
    assert [p.category for p in first[:6]] == list(CATEGORIES)


def test_offset_starts_users_on_different_categories() -> None:
    prompts = load_prompts("mixed")
    assert next(rotation(prompts, 0)).category != next(rotation(prompts, 1)).category


def test_one_category_and_user_file(tmp_path: Path) -> None:
    assert {p.category for p in load_prompts("code")} == {"code"}
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "hello"}\n\n{"category": "qa", "messages": [{"role": "user", "content": "q"}]}\n')
    prompts = load_prompts(str(path))
    assert [(p.category, p.messages[0]["content"]) for p in prompts] == [("mine", "hello"), ("qa", "q")]


def test_context_goes_ahead_of_the_first_message() -> None:
    prompt = load_prompts("facts")[0]
    long = prompt.with_context("DOC")
    assert long.messages[0]["content"].startswith("DOC\n\n") and long.category == "facts"
    assert prompt.with_context("") is prompt


@pytest.mark.parametrize(
    "line, message",
    [("not json", "not JSON"), ('["a"]', "JSON object"), ('{"messages": []}', "non-empty list"), ("{}", "'prompt'")],
)
def test_bad_prompt_lines_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(LoadTestError, match=message) as error:
        load_prompts(str(path))
    assert f"{path}:1" in str(error.value)


def test_missing_prompt_file() -> None:
    with pytest.raises(LoadTestError, match="does not exist"):
        load_prompts("/nonexistent/prompts.jsonl")
