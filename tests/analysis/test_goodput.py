"""Goodput on hand-made records: which requests meet which target, the interval verdicts, conversations,
goodput per second, and targets given to the report after the run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.figures import run_figures
from analysis.goodput import fewest_for, step_goodput, verdict
from analysis.intervals import Estimate
from analysis.load import load_run
from core.errors import UsageError
from core.rundir import LoadSettings
from rigbench.cli import app

T0 = 1_800_000_000.0
START, END = T0 + 100, T0 + 110  # the kit's default window: 10 s


def ttft_run(kit, ttfts: list[float], **changes):
    """One closed-loop step of 2 users whose measured requests have these TTFTs (21 tokens over 2 s each)."""
    records = [kit.record(f"r{i}", users=2, t_start=START + 0.5 * i, ttft=ttft) for i, ttft in enumerate(ttfts)]
    records.append(kit.record("w0", users=2, phase="warmup", t_start=START - 3, ttft=9.0))  # not judged
    return kit.make_run("gp", [kit.window(users=2)], {"p0": records}, **changes)


def test_verdict_by_the_interval_and_the_point_estimate() -> None:
    assert verdict(Estimate(0.40, 0.35, 0.45, 50, "bootstrap"), 0.5) == "meets"
    assert verdict(Estimate(0.40, 0.35, 0.50, 50, "bootstrap"), 0.5) == "meets"  # the upper end at the target
    assert verdict(Estimate(0.40, 0.35, 0.60, 50, "bootstrap"), 0.5) == "unclear"  # the interval reaches over
    assert verdict(Estimate(0.40, None, None, 2, "too few for an interval"), 0.5) == "unclear"
    assert verdict(Estimate(0.55, 0.45, 0.60, 50, "bootstrap"), 0.5) == "misses"  # point over, interval not all
    assert verdict(Estimate(None, None, None, 0, "none"), 0.5) == "unclear"


def test_a_request_meets_a_target_by_its_own_figure_and_goodput_counts_those_meeting_every_target(kit) -> None:
    ttfts = [0.1 * (i + 1) for i in range(10)]  # 0.1 .. 1.0 s; TPOT 0.1 s each (2 s over 20 decode tokens)
    run = ttft_run(kit, ttfts, load=LoadSettings(user_steps=[2], warmup_seconds=1, measure_seconds=10,
                                                 max_tokens=21, slo={"ttft_p90": 0.5, "tpot_p50": 0.2}))
    (step,) = run_figures(load_run(run)).steps
    goodput = step.goodput
    assert goodput is not None and goodput.judged == 10 and goodput.met == 5  # TTFT 0.1 .. 0.5 s
    assert goodput.met_share.value == 0.5 and goodput.met_share.method == "Clopper-Pearson"
    assert goodput.met_share.low < 0.5 < goodput.met_share.high
    assert goodput.goodput_req_s == pytest.approx(5 / 10.0)
    assert goodput.goodput_tok_s == pytest.approx(5 * 21 / 10.0)
    ttft, tpot = goodput.targets["ttft_p90"], goodput.targets["tpot_p50"]
    assert ttft.met_share == 0.5 and tpot.met_share == 1.0
    # the percentile is the step's own, the same as its figures' TTFT p90
    assert ttft.estimate == step.ttft_s["p90"] and ttft.verdict == "misses"
    assert tpot.estimate.value == pytest.approx(0.1) and tpot.verdict == "meets"  # every TPOT is 0.1: a 0-wide interval
    assert goodput.verdict == "misses" and goodput.conversations == 0 and goodput.conversations_met_share is None


def test_a_percentile_the_step_figures_do_not_carry_is_read_from_the_same_requests(kit) -> None:
    run = ttft_run(kit, [0.1] * 19 + [2.0])
    (step,) = run_figures(load_run(run), slo={"ttft_p95": 0.5, "e2e_p99": 10.0}).steps
    judged = step.goodput.targets
    assert judged["ttft_p95"].estimate.value == pytest.approx(np.quantile([0.1] * 19 + [2.0], 0.95))
    # every e2e is within 10 s, but 20 requests cannot show a p99's interval below the slowest one: unclear
    assert judged["e2e_p99"].verdict == "unclear" and judged["e2e_p99"].estimate.n == 20


def test_unclear_when_the_interval_reaches_over_the_target(kit) -> None:
    ttfts = [0.30, 0.32, 0.34, 0.36, 0.38, 0.40, 0.42, 0.44, 0.46, 0.60]
    (step,) = run_figures(load_run(ttft_run(kit, ttfts)), slo={"ttft_p50": 0.41}).steps
    judgement = step.goodput.targets["ttft_p50"]
    assert judgement.estimate.value <= 0.41 < judgement.estimate.high
    assert judgement.verdict == "unclear" and step.goodput.verdict == "unclear"


def test_failed_and_cut_requests_are_not_judged_as_requests(kit) -> None:
    records = [kit.record(f"r{i}", users=2, t_start=START + i, ttft=0.2) for i in range(4)]
    records.append(kit.record("e0", users=2, t_start=START + 5, error_kind="http_500"))
    cut = kit.record("c0", users=2, t_start=START + 6, ttft=5.0).model_copy(update={"interrupted": True})
    run = kit.make_run("gp", [kit.window(users=2)], {"p0": [*records, cut]})
    (step,) = run_figures(load_run(run), slo={"ttft_p90": 0.5}).steps
    # the cut request is not judged; the failed one is, as never answered: 1 of 5 is over p90's 10%
    assert step.goodput.judged == 5 and step.goodput.met == 4 and step.error_count == 1
    assert step.goodput.targets["ttft_p90"].verdict == "misses"
    assert step.goodput.targets["ttft_p90"].met_share == pytest.approx(4 / 5)


def test_too_few_requests_or_a_cut_one_cannot_make_a_step_meet() -> None:
    ttft = np.array([0.30, 0.35, 0.40, 0.42, 0.45])
    figures = {"ttft": ttft, "tpot": np.full(5, np.nan), "itl": np.full(5, np.nan), "e2e": np.ones(5)}
    ok, none = np.ones(5, dtype=bool), np.zeros(5, dtype=bool)
    few = step_goodput(figures, ok, none, np.ones(5), {"ttft_p90": 0.5, "ttft_p50": 0.5}, 10.0)
    # the p90's bootstrap interval ends at the slowest request: 5 requests say nothing beyond it
    assert fewest_for(0.9) == 36 and fewest_for(0.99) == 368 and fewest_for(0.5) == 6
    assert few.targets["ttft_p90"].verdict == "unclear" and few.targets["ttft_p50"].verdict == "unclear"
    many = {"ttft": np.tile(ttft, 8), "tpot": np.full(40, np.nan), "itl": np.full(40, np.nan), "e2e": np.ones(40)}
    enough = step_goodput(many, np.ones(40, dtype=bool), np.zeros(40, dtype=bool), np.ones(40), {"ttft_p90": 0.5},
                          10.0)
    assert enough.targets["ttft_p90"].verdict == "meets"
    cut = np.zeros(40, dtype=bool)
    cut[-1] = True  # the sweep's stop cut one: its latency is unknown
    assert step_goodput(many, np.ones(40, dtype=bool), cut, np.ones(40), {"ttft_p90": 0.5},
                        10.0).targets["ttft_p90"].verdict == "unclear"


def test_a_figure_a_request_cannot_have_does_not_count_against_it() -> None:
    figures = {"ttft": np.array([0.1, 0.1, 0.1]), "tpot": np.array([0.01, np.nan, 0.5]),
               "itl": np.array([np.nan] * 3), "e2e": np.array([1.0, 1.0, 1.0])}
    ok = np.array([True, True, True])
    goodput = step_goodput(figures, ok, ~ok, np.array([10.0, 1.0, 10.0]), {"tpot_p90": 0.1, "itl_p50": 0.05}, 2.0)
    assert goodput.met == 2 and goodput.goodput_tok_s == pytest.approx(11.0 / 2.0)
    assert goodput.targets["itl_p50"].estimate.value is None and goodput.targets["itl_p50"].verdict == "unclear"


def test_a_conversation_meets_when_every_judged_turn_did() -> None:
    names = np.array(["c1", "c1", "c2", "c2", "c3", "c3", "c4", "c4", None], dtype=object)
    ttft = np.array([0.1, 0.1, 0.1, 0.9, 0.1, np.nan, 0.1, np.nan, 0.1])
    ok = np.array([True, True, True, True, True, False, True, False, True])
    interrupted = np.array([False, False, False, False, False, False, False, True, False])  # c4's last turn cut
    figures = {"ttft": ttft, "tpot": np.full(9, np.nan), "itl": np.full(9, np.nan), "e2e": np.ones(9)}
    goodput = step_goodput(figures, ok, interrupted, np.ones(9), {"ttft_p50": 0.5}, 1.0, names)
    # c1 met; c2 had a late turn; c3 a failed turn; c4's cut turn is not judged; the one-shot request is no conversation
    assert (goodput.conversations, goodput.conversations_met) == (4, 2)
    assert goodput.conversations_met_share.value == 0.5


def test_conversations_from_the_records(kit) -> None:
    records = [kit.record(f"r{i}", users=2, t_start=START + i, ttft=0.9 if i == 3 else 0.1).model_copy(
        update={"conversation": f"u{i % 2}-c0", "turn": i // 2 + 1}) for i in range(6)]
    run = kit.make_run("gp", [kit.window(users=2)], {"p0": records})
    (step,) = run_figures(load_run(run), slo={"ttft_p90": 0.5}).steps
    assert (step.goodput.conversations, step.goodput.conversations_met) == (2, 1)


def test_a_run_without_targets_has_no_goodput(kit) -> None:
    (step,) = run_figures(load_run(ttft_run(kit, [0.1] * 5))).steps
    assert step.goodput is None


def test_the_report_judges_a_finished_run_against_targets_given_after_it(kit, tmp_path) -> None:
    run = ttft_run(kit, [0.1 * (i + 1) for i in range(10)])
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--format", "md,csv",
                                      "--slo", "ttft_p90=0.5,tpot_p90=150ms"])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    section = text.split("### Goodput against the service-level targets", 1)[1].split("\n### ", 1)[0]
    assert "Targets (given to the report (--slo)): TTFT p90 ≤ 0.5 s, TPOT p90 ≤ 150 ms." in section
    assert "| 50% [19%, 81%]" in section and "misses" in section and "No step met every target." in section
    assert "Judged requests: the step's measured requests that ended, ok or failed" in text  # the definitions
    steps = pd.read_csv(out / "steps.csv")
    verdicts = steps[steps["figure"].str.startswith("goodput_verdict_")].set_index("figure")
    assert verdicts.loc["goodput_verdict_ttft_p90", "method"] == "misses"
    assert verdicts.loc["goodput_verdict_tpot_p90", "value"] == pytest.approx(0.15)
    assert steps.set_index("figure").loc["goodput_goodput_req_s", "value"] == pytest.approx(0.5)
    plain = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "plain")])
    assert plain.exit_code == 0 and "Goodput against" not in (tmp_path / "plain" / "report.md").read_text()


def test_the_report_refuses_a_target_it_cannot_read_before_reading_the_run(kit, tmp_path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nowhere"), "--slo", "ttft_p85=1"])
    assert isinstance(result.exception, UsageError) and "--slo: unknown figure 'ttft_p85'" in str(result.exception)
