"""A sessions step's figures (conversations, reuse share, TTFT by turn) from hand-built records, and their section."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.figures import run_figures
from analysis.load import load_run
from analysis.report_model import RunSection
from analysis.sessions import step_sessions
from analysis.sessions_section import sessions_section
from core.rundir import LoadSettings
from core.rundir.models import SessionSettings

NAN = float("nan")


def test_reuse_is_a_ratio_of_sums_over_the_successful_turns_that_report_it_and_ttft_goes_by_turn() -> None:
    figures = step_sessions(
        conversation=np.array(["a", "a", "b", "b", "b", None], dtype=object),
        turn=np.array([1, 2, 1, 2, 3, NAN]),
        ok=np.array([True, True, True, True, False, True]),
        prompt_tokens=np.array([100, 300, 120, 400, 500, 50]),
        cached_tokens=np.array([80, 250, NAN, 380, 490, 0]),  # b's turn 1 did not say; b's turn 3 failed
        ttft_s=np.array([0.2, 0.1, 0.4, 0.3, NAN, 9.0]),
    )
    assert (figures.conversations, figures.turns) == (2, 5)
    assert (figures.cached_tokens, figures.prompt_tokens) == (80 + 250 + 380, 100 + 300 + 400)
    assert figures.reuse_share.value == pytest.approx(710 / 800) and figures.reuse_share.n == 3
    first, second = figures.ttft_by_turn
    assert (first.turn, first.requests, second.turn, second.requests) == (1, 2, 2, 2)
    assert first.ttft_s["p50"].value == pytest.approx(0.3) and first.ttft_s["p90"].value == pytest.approx(0.38)
    assert second.ttft_s["p50"].value == pytest.approx(0.2)


def test_a_sessions_run_gets_its_figures_and_section_and_a_one_shot_run_neither(kit) -> None:
    t0 = kit.T0
    turns = [("u0/c0", 1, 0.0, 0), ("u0/c0", 2, 3.0, 25), ("u1/c0", 1, 1.0, 0), ("u1/c0", 2, 5.0, 28)]
    records = [kit.record(f"r{n}", t_start=t0 + 100.5 + start, ttft=0.1 * turn).model_copy(
        update={"conversation": name, "turn": turn, "cached_tokens": cached, "prompt_tokens": 40 * turn})
        for n, (name, turn, start, cached) in enumerate(turns)]
    load = LoadSettings(user_steps=[2], warmup_seconds=1, measure_seconds=10, max_tokens=21, cache_prompt=True,
                        sessions=SessionSettings(turns_min=2, turns_max=2, think="constant", think_seconds=0.5))
    path = kit.make_run("s1", [kit.window(users=2)], {"p0": records}, load=load)
    figures = run_figures(load_run(path))
    (step,) = figures.steps
    assert step.sessions is not None and step.sessions.conversations == 2 and step.sessions.turns == 4
    assert step.sessions.reuse_share.value == pytest.approx(53 / 240)
    # each user is busy from its turn 1's start to the end of the load (it thinks after its last turn, or would
    # begin its next conversation): [100.5, 110) and [101.5, 110) of the window [100, 110); its requests alone
    # are in flight 2 x 2.11 s + 2 x 2.21 s
    assert step.load_reached == pytest.approx((9.5 + 8.5) / 10 / 2)
    assert step.mean_in_flight == pytest.approx((2 * 2.11 + 2 * 2.21) / 10)
    lines = "\n".join(sessions_section(RunSection(figures, prices=[], cost_rows=[], run_costs=[])))
    assert "### Conversations" in lines and "thinking 0.5 s, constant" in lines and "22.1%" in lines
    assert "turn 2: TTFT p50 / p90 s ↓" in lines and "0.200 / 0.200 (n=2)" in lines
    plain = kit.make_run("s2", [kit.window()], {"p0": [kit.record("x", t_start=t0 + 101)]})
    one_shot = run_figures(load_run(plain))
    assert one_shot.steps[0].sessions is None
    assert sessions_section(RunSection(one_shot, prices=[], cost_rows=[], run_costs=[])) == []
