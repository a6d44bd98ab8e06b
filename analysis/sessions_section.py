"""The report's sessions section: a conversations run's reuse of the prompt cache and its TTFT turn by turn.

Why a section of its own: a sessions step's aggregate and latency figures mix first turns (short
prompts) with late ones (the whole history), and the server's cache decides what a late turn costs.
Per step it gives the conversations and turns measured, the share of their prompt tokens the
server reused (``analysis.sessions``), and TTFT p50 / p90 for each turn number: a server that keeps
each conversation's history keeps the late turns' TTFT near the first's. A run without
conversations gets no section.
"""

from __future__ import annotations

from tabulate import tabulate

from analysis.intervals import Estimate
from analysis.report_model import RunSection
from analysis.sessions import StepSessions
from core.wording import counted

TITLE = "### Conversations"


def _share(estimate: Estimate) -> str:
    if estimate.value is None:
        return "-"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.value:.1%}"
    return f"{estimate.value:.1%} [{estimate.low:.1%}, {estimate.high:.1%}]"


def _seconds(estimate: Estimate | None) -> str:
    return "-" if estimate is None or estimate.value is None else f"{estimate.value:.3f}"


def sessions_rows(section: RunSection) -> list[dict[str, object]]:
    steps = [step for step in section.figures.steps if step.sessions is not None]
    turns = sorted({turn.turn for step in steps for turn in step.sessions.ttft_by_turn})  # type: ignore[union-attr]
    rows = []
    for step in steps:
        sessions: StepSessions = step.sessions  # type: ignore[assignment]
        row: dict[str, object] = {
            "users" if step.rate is None else "req/s": step.load_label.split()[0],
            "conversations": sessions.conversations,
            "turns": sessions.turns,
            "prompt tokens reused ↑": _share(sessions.reuse_share),
        }
        by_turn = {turn.turn: turn for turn in sessions.ttft_by_turn}
        for number in turns:
            turn = by_turn.get(number)
            row[f"turn {number}: TTFT p50 / p90 s ↓"] = "-" if turn is None else (
                f"{_seconds(turn.ttft_s.get('p50'))} / {_seconds(turn.ttft_s.get('p90'))} (n={turn.requests})")
        rows.append(row)
    return rows


def sessions_section(section: RunSection) -> list[str]:
    rows = sessions_rows(section)
    if not rows:
        return []
    load = section.figures.run.manifest.load
    settings = load.sessions if load is not None else None
    said = ""
    if settings is not None:
        think = f"{settings.think_seconds:g} s" + (" on average, exponential" if settings.think == "exponential"
                                                   else ", constant")
        said = (f"Conversations of {settings.turns_min}-{settings.turns_max} turns, thinking {think} between turns, "
                f"behind a system prompt of {counted(settings.system_prompt_tokens, 'token')} they all share; "
                "workload seed "
                f"{load.workload_seed}; prompt cache {'on' if load.cache_prompt else 'off'}. ")  # type: ignore[union-attr]
    return ["", TITLE, "", said + "Reused: the prompt tokens the server took from its cache (timings.cache_n) over "
            "the prompt tokens of the successful measured turns that report it; TTFT per turn number over the "
            "successful measured turns, with their count.", "",
            tabulate(rows, headers="keys", tablefmt="github"), ""]
