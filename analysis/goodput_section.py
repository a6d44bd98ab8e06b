"""The report's goodput section: each step of a run against its service-level targets.

Why a section of its own: the step tables say how fast the server was; this one says how much of
what it did was in time for the promises made (``analysis.goodput``), and at which load the
promises stop being kept. A run without targets gets no section.
"""

from __future__ import annotations

from tabulate import tabulate

from analysis.goodput import StepGoodput, TargetJudgement
from analysis.intervals import Estimate, decimals, number
from analysis.report_model import RunSection
from core.rundir.capacity_search import slo_quantile

TITLE = "### Goodput against the service-level targets"
# TTFT and end-to-end in seconds, the per-token gaps in milliseconds, as everywhere in the report
SCALE = {"ttft": (1.0, "s", 3), "e2e": (1.0, "s", 3), "tpot": (1000.0, "ms", 1), "itl": (1000.0, "ms", 1)}
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "end-to-end"}


def target_text(key: str, seconds: float) -> str:
    """``ttft_p90`` 0.5 -> 'TTFT p90 ≤ 0.5 s'; ``tpot_p90`` 0.05 -> 'TPOT p90 ≤ 50 ms'."""
    figure, _ = slo_quantile(key)
    scale, unit, _ = SCALE[figure]
    return f"{NAMES[figure]} {key.partition('_')[2]} ≤ {seconds * scale:g} {unit}"


def targets_text(targets: dict[str, float]) -> str:
    return ", ".join(target_text(key, seconds) for key, seconds in targets.items())


def target_header(key: str, seconds: float) -> str:
    figure, _ = slo_quantile(key)
    scale, unit, _ = SCALE[figure]
    return f"{NAMES[figure]} {key.partition('_')[2]} {unit} (target {seconds * scale:g})"


def reading_cell(key: str, value: float | None, low: float | None, high: float | None, verdict: str) -> str:
    """'0.052 [0.051, 0.055] meets' in the figure's unit."""
    figure, _ = slo_quantile(key)
    scale, _, digits = SCALE[figure]
    if value is None:
        return f"- {verdict}"
    scaled = Estimate(value * scale, *(None if v is None else v * scale for v in (low, high)), 0, "")
    return f"{scaled.short(digits)} {verdict}"


def judgement_cell(key: str, judgement: TargetJudgement) -> str:
    estimate = judgement.estimate
    return reading_cell(key, estimate.value, estimate.low, estimate.high, judgement.verdict)


def share_cell(estimate: Estimate | None) -> str:
    if estimate is None or estimate.value is None:
        return "-"
    value, low, high = (None if v is None else v * 100 for v in (estimate.value, estimate.low, estimate.high))
    places = decimals(value, low, high, digits=0)  # whole percent, more where a share would round away
    if low is None or high is None:
        return f"{value:.{places}f}%"
    return f"{value:.{places}f}% [{low:.{places}f}%, {high:.{places}f}%]"


def goodput_rows(section: RunSection) -> list[dict[str, object]]:
    rows = []
    for step in section.figures.steps:
        goodput: StepGoodput | None = step.goodput
        if goodput is None:
            continue
        row: dict[str, object] = {
            "users" if step.rate is None else "req/s": step.load_label.split()[0],
            "judged requests": goodput.judged,
            "met every target ↑": share_cell(goodput.met_share),
            "goodput req/s ↑": "-" if goodput.goodput_req_s is None else number(goodput.goodput_req_s, 2),
            "goodput tok/s ↑": "-" if goodput.goodput_tok_s is None else number(goodput.goodput_tok_s, 1, grouped=True),
        }
        if goodput.conversations:
            row["conversations met ↑"] = f"{share_cell(goodput.conversations_met_share)} of {goodput.conversations}"
        for key, judgement in goodput.targets.items():
            row[target_header(key, judgement.target_s)] = judgement_cell(key, judgement)
        row["every target"] = goodput.verdict
        rows.append(row)
    return rows


def goodput_section(section: RunSection) -> list[str]:
    steps = [step for step in section.figures.steps if step.goodput is not None]
    if not steps:
        return []
    targets = {key: judgement.target_s for key, judgement in steps[0].goodput.targets.items()}  # type: ignore[union-attr]
    load = section.figures.run.manifest.load
    whose = "the run's own" if load is not None and load.slo == targets else "given to the report (--slo)"
    lines = ["", TITLE, "", f"Targets ({whose}): {targets_text(targets)}.", "",
             tabulate(goodput_rows(section), headers="keys", tablefmt="github", disable_numparse=True), ""]
    meeting = [step for step in steps if step.goodput is not None and step.goodput.verdict == "meets"]
    ordered = sorted(steps, key=lambda step: step.load)
    first_short = next((step for step in ordered if step.goodput and step.goodput.verdict != "meets"), None)
    if not meeting:
        lines.append("No step met every target.")
    elif first_short is None:
        lines.append(f"Every step met every target, up to {ordered[-1].load_label}.")
    else:
        below = [step for step in meeting if step.load < first_short.load]
        kept = f"up to {below[-1].load_label}" if below else "at no step below it"
        lines.append(f"Every target met {kept}; first not met at {first_short.load_label} "
                     f"({first_short.goodput.verdict if first_short.goodput else '-'}).")
    lines.append("A step meets a target when the upper end of the percentile's 95% interval is within it; unclear "
                 "(the point estimate within, the interval reaching over, or too few requests) is not met. "
                 "Goodput counts the requests that met every target.")
    return [*lines, ""]
