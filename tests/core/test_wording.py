"""Counts and lists as a reader reads them: the noun agrees with the count."""

from __future__ import annotations

import pytest

from core.wording import counted, listed


@pytest.mark.parametrize(("count", "noun", "plural", "said"), [
    (1, "user", None, "1 user"),
    (0, "user", None, "0 users"),
    (64, "user", None, "64 users"),
    (1.0, "user", None, "1 user"),
    (2.0, "user", None, "2 users"),
    (0.5, "user", None, "0.5 users"),
    (1, "load process", "load processes", "1 load process"),
    (3, "load process", "load processes", "3 load processes"),
    (1, "reply", "replies", "1 reply"),
    (2, "GPU", None, "2 GPUs"),
])
def test_counted_says_the_noun_in_the_count_s_number(count: float, noun: str, plural: str | None, said: str) -> None:
    assert counted(count, noun, plural) == said


@pytest.mark.parametrize(("items", "said"), [
    ([], ""),
    (["a"], "a"),
    (["a", "b"], "a and b"),
    (["a", "b", "c"], "a, b and c"),
])
def test_listed_joins_the_last_with_and(items: list[str], said: str) -> None:
    assert listed(items) == said
