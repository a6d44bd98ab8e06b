"""The report's decode-call budget, on the committed H200 real-Gemma runs reported together, alone,
without a ceiling and with a drafter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from analysis.budget_section import TITLE, attach_budgets, budget_section
from analysis.prices import PriceBook
from analysis.report import render
from analysis.report_model import Report, RunSection, build_section
from analysis.study_report import decode_steps

RUNS = Path(__file__).resolve().parents[2] / "runs" / "real-gemma-h200-2026-12-02" / "runs"
ARMS = {
    "gpu-sampling": "20261202T195814Z-gemma3-270m-many-patched-gpu-sampling-gpu-sampling-a3e4",
    "cpu-sampling": "20261202T195924Z-gemma3-270m-many-patched-cpu-sampling-cpu-sampling-3bef",
    "unified-kv": "20261202T200036Z-gemma3-270m-many-patched-gpu-sampling-unified-kv-c47e",
    "draft2": "20261202T200323Z-gemma3-270m-patched-draft2-26f4",
}


@pytest.fixture(scope="module")
def built() -> dict[str, RunSection]:
    book = PriceBook.default()
    return {arm: build_section(RUNS / name, book) for arm, name in ARMS.items()}


def together(built: dict[str, RunSection], *arms: str) -> list[RunSection]:
    """Fresh copies of the sections, budgets set across them as one report sets them."""
    sections = [replace(built[arm], budget=None) for arm in arms]
    attach_budgets(sections)
    return sections


def at(section: RunSection, users: int) -> tuple:
    (step,) = [s for s in section.budget.steps if s.users == users]
    return tuple(None if v is None else round(v, 1) for v in (step.ceiling_ms, step.call_ms, step.sampling_ms,
                                                             step.slots_ms, step.rest_ms)) + (step.reading,)


def test_the_three_sweep_arms_together_split_the_call_as_the_study_did(built) -> None:
    gpu, cpu, unified = together(built, "gpu-sampling", "cpu-sampling", "unified-kv")
    assert at(gpu, 64) == (5.4, 25.7, 0.0, None, 20.3, "server-loop-bound")
    assert at(cpu, 64) == (5.4, 81.8, 56.1, None, 20.3, "sampling-bound")
    assert at(unified, 64) == (8.4, 28.0, 0.0, None, 19.6, "server-loop-bound")
    assert at(cpu, 8) == (1.8, 6.5, 2.4, None, 2.3, "sampling-bound")
    (pair,) = cpu.budget.pairs
    assert (pair.part.name, pair.costly.arm.label, pair.cheap.arm.label) == ("sampling", cpu.label, gpu.label)
    text = "\n".join(budget_section(cpu.budget))
    assert f"for sampling, `{cpu.label}` on the CPU against `{gpu.label}` on the GPU" in text
    assert "for the slot layout, none (what it costs is not split from the server loop)" in text
    assert "| 64      | 0.07               | 5.4              | 81.8               | 56.1" in text


def test_the_decode_rate_is_the_figures_own_and_the_study_reads_the_same(built) -> None:
    figures = built["gpu-sampling"].figures
    by_users = {step.users: figures.decode_calls_per_s[step.index] for step in figures.steps}
    assert by_users == decode_steps(RUNS / ARMS["gpu-sampling"])


def test_a_run_alone_keeps_the_rest_whole_and_still_reads(built) -> None:
    (cpu,) = together(built, "cpu-sampling")
    assert at(cpu, 64) == (5.4, 81.8, None, None, 76.4, "server-loop-bound")
    assert cpu.budget.pairs == []
    assert "so the rest of the call beyond the card's step is not split further" in "\n".join(
        budget_section(cpu.budget))


def test_no_ceiling_or_a_drafter_gives_no_table(built) -> None:
    blind, drafter = together({"blind": replace(built["gpu-sampling"], ceiling=None), **built}, "blind", "draft2")
    assert blind.budget is None and budget_section(None) == []
    assert drafter.budget.steps == [] and "With a drafter" in "\n".join(budget_section(drafter.budget))
    report = render(Report([blind], [], [], Path(".")))
    assert TITLE not in report and "### Served against the card's batched ceiling" not in report
