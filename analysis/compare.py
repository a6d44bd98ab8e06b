"""B against A, step by step: the drafter's gain, one instance type against another, two days.

Steps are paired by (users, context tokens), or (offered rate, context tokens) between two
open-loop runs. A closed-loop run and an open-loop one are not compared (an AnalysisError: the
report then shows each run's own tables and says why no comparison table is given): N users
sending back to back and R requests/s arriving on a schedule are different loads, and no step
of one stands for a step of the other. The per-user ratio is paired by prompt
category: the geometric mean over the categories both runs measured of
(mean tok/s of B in the category / mean tok/s of A in it), with a stratified bootstrap
interval (each run and category resampled on its own); each category's own ratio of means is
given too (code gains most from a drafter, stories least). Aggregate tok/s and TTFT p90
ratios combine the two runs' intervals in log space. A ratio above 1 means B is higher.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from analysis import intervals
from analysis.figures import RunFigures, add_request_metrics, category_groups
from analysis.intervals import Estimate
from analysis.step import StepFigures
from core.errors import AnalysisError
from core.strict import Strict


class StepComparison(Strict):
    """B against A at one step: ratios B/A with their 95% intervals."""

    model_config = ConfigDict(frozen=True)

    users: int
    context_tokens: int
    categories: list[str]
    per_user_ratio: Estimate
    aggregate_ratio: Estimate
    ttft_p90_ratio: Estimate
    rate_measure: str
    per_category: dict[str, Estimate]
    rate: float | None = Field(None, exclude_if=lambda rate: rate is None)  # open-loop pairs only


def _measured_ok(figures: RunFigures, step: StepFigures):
    frame = figures.run.records
    if "ok" not in frame.columns:
        frame = add_request_metrics(frame.copy())
        figures.run.records = frame
    chosen = frame[(frame["step"] == step.index) & (frame["phase"] == "measure")]
    return chosen[chosen["ok"]]


def _kind(figures: RunFigures) -> str:
    return "open loop (requests/s)" if figures.open_loop else "closed loop (users)"


def compare_runs(a: RunFigures, b: RunFigures) -> list[StepComparison]:
    if a.open_loop != b.open_loop:
        raise AnalysisError(
            f"run {a.run.manifest.run_id} is {_kind(a)} and run {b.run.manifest.run_id} is {_kind(b)}: their steps "
            "are different loads, so they are not paired; each run's own tables stand, compare runs of one kind"
        )
    steps_b = {(s.load, s.context_tokens): s for s in b.steps}
    rows = []
    for step_a in a.steps:
        step_b = steps_b.get((step_a.load, step_a.context_tokens))
        if step_b is None:
            continue
        ok_a, ok_b = _measured_ok(a, step_a), _measured_ok(b, step_b)
        both_server = ok_a["server_tok_s"].notna().all() and ok_b["server_tok_s"].notna().all()
        column = "server_tok_s" if both_server and len(ok_a) and len(ok_b) else "client_tok_s"
        groups_a, groups_b = category_groups(ok_a, column), category_groups(ok_b, column)
        shared = sorted(set(groups_a) & set(groups_b))
        rows.append(
            StepComparison(
                users=step_a.users,
                context_tokens=step_a.context_tokens,
                categories=shared,
                per_user_ratio=intervals.ratio_of_geomeans(
                    [groups_a[c] for c in shared], [groups_b[c] for c in shared]
                ),
                aggregate_ratio=intervals.ratio_of_estimates(step_a.aggregate_tok_s, step_b.aggregate_tok_s),
                ttft_p90_ratio=intervals.ratio_of_estimates(step_a.ttft_s["p90"], step_b.ttft_s["p90"]),
                rate_measure="server timings" if column == "server_tok_s" else "client",
                per_category={c: intervals.ratio_of_geomeans([groups_a[c]], [groups_b[c]]) for c in shared},
                rate=step_a.rate,
            )
        )
    if not rows:
        unit = "rates" if a.open_loop else "users"
        raise AnalysisError(
            f"runs {a.run.manifest.run_id} and {b.run.manifest.run_id} share no step "
            f"({unit} A: {[s.load for s in a.steps]}, B: {[s.load for s in b.steps]}); "
            f"compare runs swept over the same {'offered rates' if a.open_loop else 'user counts'}"
        )
    return rows
