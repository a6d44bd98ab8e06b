"""Goodput: how much of a step's work met the run's service-level targets.

Why beside throughput: past some load a server's aggregate tok/s still rises while its users stop
getting answers in time; goodput counts only the requests that did, and the verdicts say whether the
step as a whole kept each promise, judged by the interval, not by a lucky point estimate.

Definitions (the report repeats them):

- A target (``LoadSettings.slo``, or ``rigbench report --slo`` after the fact) names a figure and a
  percentile in seconds, e.g. ``ttft_p90=0.5``: 90% of requests get their first token within 0.5 s.
- Judged requests: the step's measured requests that ended, ok or failed (a request the sweep's own stop
  cut is not judged). An ok request meets a target when its own figure (TTFT, TPOT, ITL, end-to-end as
  ``analysis.figures`` defines them) is at most the target; a figure it cannot have (the TPOT of a
  one-token reply) does not count against it; a failed request meets none. Met share = judged requests
  meeting every target / judged requests, with its Clopper-Pearson interval; per target, the share
  meeting that one.
- Goodput = judged requests meeting every target / the window's seconds (req/s), and their output
  tokens / the window's seconds (tok/s); absent (not 0) when no request was judged.
- Conversations (records with a ``conversation``): one with a measured request in the step meets when
  every such request ended ok and met every target (a turn cut by the sweep's own stop is not judged).
- The step against a target: the target's percentile over the measured requests, a failed one counted
  as never answered (slower than any): with a share f failed, the p-th percentile is the judged requests'
  p / (1 - f)-th, and past 1 the target misses. With its 95% interval (``analysis.intervals``). *meets*:
  the interval's upper end is within the target, there are enough judged requests for an interval that
  does not rest on the slowest one alone (n >= ln 0.025 / ln p: 36 for p90, 368 for p99), and no measured
  request was cut by the sweep's stop (its latency is unknown); *unclear*: the point estimate is within
  the target but one of those fails; *misses*: the point estimate is over it. Unclear is not a pass:
  measure longer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from pydantic import Field

from analysis import intervals
from analysis.intervals import Estimate
from core.rundir.capacity_search import SloVerdict, slo_quantile
from core.strict import Strict


class TargetJudgement(Strict):
    """One target against one step."""

    target_s: float
    estimate: Estimate = Field(description="the step's percentile of the figure (seconds), with its 95% interval")
    met_share: float | None = Field(description="share of judged requests whose own figure is within the target")
    verdict: SloVerdict


class StepGoodput(Strict):
    """A step's requests against the run's targets (the module's definitions)."""

    targets: dict[str, TargetJudgement]
    judged: int = Field(description="measured requests that ended, ok or failed (those the sweep's stop cut are "
                        "not judged)")
    met: int = Field(description="judged requests meeting every target")
    met_share: Estimate
    conversations: int = Field(0, description="conversations with a judged turn in the step")
    conversations_met: int = 0
    conversations_met_share: Estimate | None = None
    goodput_req_s: float | None = Field(description="requests meeting every target per second of the window; None "
                                        "when no request was judged (nothing stands behind a rate)")
    goodput_tok_s: float | None = Field(description="their output tokens per second of the window; None likewise")

    @property
    def verdict(self) -> SloVerdict:
        """misses when a target misses, else unclear when one is unclear, else meets."""
        verdicts = {judgement.verdict for judgement in self.targets.values()}
        return "misses" if "misses" in verdicts else "unclear" if "unclear" in verdicts else "meets"


def fewest_for(q: float) -> int:
    """The judged requests a q-quantile needs before its interval's upper end can lie below the slowest
    one: with fewer, a bootstrap's upper end is the largest value seen, and "meets" would mean only that
    the slowest request was in time."""
    return math.ceil(math.log(0.025) / math.log(q)) if 0 < q < 1 else 1


def verdict(estimate: Estimate, target: float, q: float = 0.5, *, cut: int = 0) -> SloVerdict:
    """meets / unclear / misses, by the interval's upper end and the point estimate (module docstring);
    ``cut``: measured requests the sweep's stop cut, whose latency is unknown."""
    if estimate.value is None:
        return "unclear"
    if estimate.value > target:
        return "misses"
    sure = estimate.high is not None and estimate.high <= target and estimate.n >= fewest_for(q) and not cut
    return "meets" if sure else "unclear"


def step_goodput(
    figures: Mapping[str, np.ndarray],
    ok: np.ndarray,
    interrupted: np.ndarray,
    output_tokens: np.ndarray,
    targets: Mapping[str, float],
    window_seconds: float,
    conversations: np.ndarray | None = None,
) -> StepGoodput:
    """The goodput of one step from its measured requests: ``figures`` holds each request's ``ttft``,
    ``tpot``, ``itl`` and ``e2e`` in seconds (NaN where it has none), ``ok`` whether it ended ok,
    ``interrupted`` whether the sweep's stop cut it, ``conversations`` its conversation (None where none);
    every array is over the same requests, in the same order."""
    cut = np.asarray(interrupted, dtype=bool)
    ok = np.asarray(ok, dtype=bool) & ~cut  # a request the sweep's stop cut has no known latency
    failed = int((~np.asarray(ok | cut, dtype=bool)).sum())
    meets_all = ok.copy()
    judgements = {}
    for key, target in targets.items():
        figure, q = slo_quantile(key)
        values = np.asarray(figures[figure], dtype=float)
        with np.errstate(invalid="ignore"):
            within = ~(values > target)  # NaN: a figure the request cannot have is not against it
        meets_all &= within
        judged = values[ok]
        had = int(np.isfinite(judged).sum())
        # failed requests count as never answered: the q-quantile of all is the answered ones' q_all-th
        q_all = q * (had + failed) / had if had else math.inf
        if q_all > 1:
            estimate = Estimate(None, None, None, had, "over 1 - p of the requests failed")
            judgement: SloVerdict = "misses" if had else "unclear"
        else:
            estimate = intervals.quantile(judged, q_all)
            judgement = verdict(estimate, target, q_all, cut=int(cut.sum()))
        share = float(within[ok].sum()) / (int(ok.sum()) + failed) if ok.any() or failed else None
        judgements[key] = TargetJudgement(target_s=target, estimate=estimate, met_share=share, verdict=judgement)
    judged_count, met = int(ok.sum()) + failed, int(meets_all.sum())
    seconds = window_seconds if window_seconds > 0 else float("nan")
    total, met_conversations, conversation_share = _conversations(conversations, interrupted, meets_all)
    return StepGoodput(
        targets=judgements,
        judged=judged_count,
        met=met,
        met_share=intervals.proportion(met, judged_count),
        conversations=total,
        conversations_met=met_conversations,
        conversations_met_share=conversation_share,
        goodput_req_s=met / seconds if judged_count else None,
        goodput_tok_s=float(np.asarray(output_tokens, dtype=float)[meets_all].sum()) / seconds
        if judged_count else None,
    )


def _conversations(conversations: np.ndarray | None, interrupted: np.ndarray,
                   meets_all: np.ndarray) -> tuple[int, int, Estimate | None]:
    """(conversations judged, those whose every judged turn met every target, the share with its interval)."""
    if conversations is None:
        return 0, 0, None
    names = np.asarray(conversations, dtype=object)
    judged = np.array([name is not None and name == name for name in names], dtype=bool)  # NaN != NaN
    judged &= ~np.asarray(interrupted, dtype=bool)  # a turn the sweep's stop cut is not judged
    if not judged.any():
        return 0, 0, None
    failed = {name for name, good in zip(names[judged], meets_all[judged], strict=True) if not good}
    everyone = set(names[judged])
    total, met = len(everyone), len(everyone - failed)
    return total, met, intervals.proportion(met, total)
