"""The strict list parser: what a user types for steps, windows and depths, and what is refused."""

from __future__ import annotations

import re

import pytest

from core.errors import UsageError
from core.lists import format_seconds, parse_choices, parse_counts, parse_seconds, seconds_per_step


@pytest.mark.parametrize(
    "text, expected",
    [("1,2,4", [1, 2, 4]), ("8, 16", [8, 16]), (" 64 ", [64]), ("1,2,4,8,16,32,64", [1, 2, 4, 8, 16, 32, 64])],
)
def test_counts_are_read(text: str, expected: list[int]) -> None:
    assert parse_counts(text, "--steps") == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 2 4", "--steps: cannot read '1 2 4': '1 2 4' is not a whole number; expected whole numbers separated by "
                  "commas, e.g. 1,2,4,8"),
        ("1,two", "--steps: cannot read '1,two': 'two' is not a whole number; expected whole numbers separated by "
                  "commas, e.g. 1,2,4,8"),
        ("1,,2", "--steps: cannot read '1,,2': expected values separated by commas, e.g. 1,2,4,8"),
        ("", "--steps: cannot read '': expected values separated by commas, e.g. 1,2,4,8"),
        ("1,2,", "--steps: cannot read '1,2,': expected values separated by commas, e.g. 1,2,4,8"),
        ("0,1", "--steps: 0 is below 1 in '0,1'; expected e.g. 1,2,4,8"),
        ("-1", "--steps: cannot read '-1': '-1' is not a whole number; expected whole numbers separated by commas, "
               "e.g. 1,2,4,8"),
        ("2.5", "--steps: cannot read '2.5': '2.5' is not a whole number; expected whole numbers separated by "
                "commas, e.g. 1,2,4,8"),
        ("1,4,1", "--steps: 1 is given twice in '1,4,1'; give each value once"),
    ],
)
def test_bad_counts_name_the_option(text: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_counts(text, "--steps")
    assert str(refused.value) == message


def test_context_depths_may_be_zero() -> None:
    assert parse_counts("0,8192", "--context-tokens", minimum=0) == [0, 8192]
    with pytest.raises(UsageError, match="--context-tokens: 8192 is given twice"):
        parse_counts("8192,8192", "--context-tokens", minimum=0)


def test_seconds_one_for_every_step_or_one_per_step() -> None:
    assert parse_seconds("30", "--measure") == 30.0
    assert parse_seconds("8, 8,20", "--measure") == [8.0, 8.0, 20.0]
    assert parse_seconds("0.5", "--measure") == 0.5 and parse_seconds(".5", "--measure") == 0.5
    assert format_seconds(parse_seconds("8,8,20", "--measure")) == "8,8,20" and format_seconds(30.0) == "30"
    assert seconds_per_step(30.0, 3) == [30.0, 30.0, 30.0] and seconds_per_step([5.0, 6.0], 2) == [5.0, 6.0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "--measure: every value must be above 0 seconds, found '0'; expected e.g. 30 or 8,8,10,20"),
        ("5,-1", "--measure: cannot read '5,-1': '-1' is not a number of seconds; expected e.g. 30 or 8,8,10,20"),
        ("ten", "--measure: cannot read 'ten': 'ten' is not a number of seconds; expected e.g. 30 or 8,8,10,20"),
        ("8 8", "--measure: cannot read '8 8': '8 8' is not a number of seconds; expected e.g. 30 or 8,8,10,20"),
        ("inf", "--measure: cannot read 'inf': 'inf' is not a number of seconds; expected e.g. 30 or 8,8,10,20"),
        ("", "--measure: cannot read '': expected values separated by commas, e.g. 30 or 8,8,10,20"),
    ],
)
def test_bad_seconds_name_the_option(text: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_seconds(text, "--measure")
    assert str(refused.value) == message


def test_a_window_list_must_match_the_steps() -> None:
    with pytest.raises(UsageError, match="--measure: 2 measured windows for 3 user steps"):
        seconds_per_step([5.0, 10.0], 3)


def test_choices_are_names_from_the_list_each_once() -> None:
    assert parse_choices("md, html", "--format", ("md", "html", "csv"), example="md,html") == ["md", "html"]
    for text, message in [("md,pdf", "'pdf' is not one of md, html, csv"), ("md,md", "md is given twice"),
                          ("", "expected values separated by commas"), ("MD", "'MD' is not one of")]:
        with pytest.raises(UsageError, match=re.escape("--format: ") + ".*" + re.escape(message)):
            parse_choices(text, "--format", ("md", "html", "csv"), example="md,html")


@pytest.mark.parametrize("value", [1e-05, 0.5, 2.0, 30.0, 123.456, 1e6, 1e-99, 9.5e99])
def test_a_number_rigbench_writes_back_is_read_again(value: float) -> None:
    """Values read here are forwarded as text to rigbench's own Locust processes: repr and :g must parse back."""
    from core.workload import format_slo, parse_slo

    for text in (repr(value), f"{value:g}"):
        assert parse_seconds(text, "--measure") == pytest.approx(value, rel=1e-5)
    assert parse_slo(format_slo({"ttft_p90": value})) == {"ttft_p90": value}
