"""The fidelity tolerances, said once: what a followed step keeps, and the sentence the reports print."""

from __future__ import annotations

from dataclasses import replace

from rigbench.fidelity import FOLLOWED_RULE, TOLERANCES, StepFidelity, capacity


def step(**errors: float) -> StepFidelity:
    figures = {"tok_s_error_pct": 0.0, "ttft_p50_error_ms": 0.0, "itl_p50_error_ms": 0.0, "tpot_p50_error_ms": 0.0}
    return StepFidelity(step=0, users=1, rate=None, requests=10, truth_tok_s=100.0, client_tok_s=100.0,
                        truth_ttft_p50_ms=50.0, truth_itl_p50_ms=10.0, truth_tpot_p50_ms=10.0, **(figures | errors))


def test_a_step_is_followed_up_to_each_tolerance_and_not_past_it() -> None:
    for tolerance in TOLERANCES:
        assert step(**{tolerance.figure: tolerance.limit}).tracked
        assert step(**{tolerance.figure: -tolerance.limit}).tracked
        assert not step(**{tolerance.figure: tolerance.limit * 1.01}).tracked
    assert capacity([replace(step(), truth_tok_s=900.0), replace(step(tok_s_error_pct=0.6), truth_tok_s=2000.0)]) == 900


def test_the_sentence_the_reports_print_is_made_from_the_tolerances() -> None:
    assert FOLLOWED_RULE == "tok/s within 0.5 %, TTFT p50 within 2 ms, ITL p50 within 0.5 ms, TPOT p50 within 0.2 ms"
