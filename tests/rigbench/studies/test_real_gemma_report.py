"""The real-Gemma study's tables, made again from its committed H200 folder: the decode-call budget
(the report's own code path) gives the numbers the study published."""

from __future__ import annotations

from pathlib import Path

from rigbench.studies.real_gemma_report import study_tables

STUDY = Path(__file__).resolve().parents[3] / "runs" / "real-gemma-h200-2026-12-02"
BUDGET = "### Where the time of one decode call goes (ms), and the reading"


def table_after(text: str, heading: str) -> str:
    """The Markdown table under ``heading``."""
    lines = text.split(heading, 1)[1].strip().splitlines()
    return "\n".join(line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))])


def test_the_budget_table_is_the_one_the_study_published() -> None:
    published = table_after((STUDY / "README.md").read_text(), BUDGET)
    made = table_after(study_tables(STUDY), BUDGET)
    assert made == published
    assert "|      64 | cpu-sampling |               0.07 |           5.4 |            81.8 |       56.1 |" in made
