"""Grading and extraction on hand-made replies, including every failure kind."""

from __future__ import annotations

import pytest

from quality.grading import expected_answer, extract_answer, failure_kinds, is_looping, normalise_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So she has 3 + 5 = 8 apples.\n#### 8", "8"),
        ("#### 24\nThe answer is: 24", "24"),
        ("#### 5\nJon has 6 + 1 = 7 stamps now.\n#### 6", "5"),  # the first #### is the answer
        ("She pays $1,200.00 in total.\n####  $1,200.00", "1200"),
        ("The answer is 72.", "72"),
        ("It is 3.50 dollars, then 4.0", "4"),
        ("####\nno number after the marker, but 17 before", "17"),
        ("The temperature falls to -4 degrees.", "-4"),
        ("#### Step 1: add\n15 + 1 = 16\n#### Answer\n16", "16"),  # Markdown headings are not answers
        ("Children aged 3-5 get 2 each.", "2"),
        ("ages 3-5", "5"),  # a range is not a negative number
        ("I do not know.", None),
        ("", None),
    ],
)
def test_answer_is_after_the_marker_else_the_last_number(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [("1,000", "1000"), ("$5", "5"), ("7.0", "7"), ("7.50", "7.5"), ("007", "7"), ("-0.0", "0"), ("12.", "12"),
     ("abc", None), ("1.2.3", None)],
)
def test_numbers_are_normalised_the_same_way_on_both_sides(raw: str, normalised: str | None) -> None:
    assert normalise_number(raw) == normalised


def test_gold_answers_read_gsm8k_and_bare_numbers() -> None:
    assert expected_answer("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") == "72"
    assert expected_answer("1,080") == "1080"
    assert expected_answer("twelve") == "twelve"


def test_a_clean_reply_has_no_failure() -> None:
    assert failure_kinds("3 + 5 = 8\n#### 8", "stop", 200) == []


def test_cut_off_at_the_token_limit() -> None:
    assert failure_kinds("3 + 5 = 8 and then", "length", 200) == ["cut_off"]


def test_looping_is_a_line_repeated_five_times() -> None:
    four = "Ben has 6 pencils.\n" * 4 + "#### 6"
    five = "Ben has 6 pencils.\n" * 5 + "#### 6"
    assert not is_looping(four)
    assert is_looping(five)
    assert failure_kinds(five, "length", 200) == ["cut_off", "looping"]


def test_a_thinking_block_opened_with_thinking_off() -> None:
    assert failure_kinds("<think>let me see</think> 8", "stop", 200) == ["thinking_opened"]
    assert failure_kinds("8", "stop", 200, reasoning="hidden steps") == ["thinking_opened"]
    assert failure_kinds("<think>asked for</think> 8", "stop", 200, thinking=True) == []


def test_empty_content() -> None:
    assert failure_kinds("  \n", "stop", 200) == ["empty"]


def test_an_http_error_is_only_that() -> None:
    assert failure_kinds("", None, 500) == ["http_error"]
    assert failure_kinds("", None, None) == ["http_error"]
