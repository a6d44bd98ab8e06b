"""A sessions step's figures: how much of each prompt the server reused, and what that did to TTFT by turn.

Why: a conversation resends its history every turn, so its prompts grow turn by turn; a server that
keeps the history it already computed (llama-server's prompt cache, on the slot that held the last
turn or restored from its RAM cache) processes only the new part, and the later turns' TTFT stays
near the first's. One that does not pays for the whole history each turn. The figures, over the
step's measured records (as the step's other figures):

- conversations: distinct conversations with a measured turn in the step; turns: those turns.
- reuse share = sum(cached_tokens) / sum(prompt_tokens) over the successful measured turns that
  report both (llama-server's ``timings.cache_n`` or ``usage.prompt_tokens_details.cached_tokens``,
  beside ``usage.prompt_tokens``), with its interval (``analysis.intervals.ratio_of_sums``).
- TTFT by turn: p50 and p90 of the successful measured turns of each turn number, with their count.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from analysis import intervals
from analysis.intervals import Estimate
from core.strict import Strict

TURN_PERCENTILES = (0.5, 0.9)


class TurnLatency(Strict):
    """The successful measured turns of one turn number: how many, and their TTFT."""

    turn: int = Field(ge=1)
    requests: int
    ttft_s: dict[str, Estimate] = Field(description="p50 and p90, seconds")


class StepSessions(Strict):
    """One sessions step: its conversations, the prompt tokens the server reused, and TTFT by turn."""

    conversations: int = Field(description="conversations with a measured turn in the step")
    turns: int = Field(description="measured turns (requests) of conversations")
    prompt_tokens: int = Field(description="prompt tokens of the successful turns that report reuse")
    cached_tokens: int = Field(description="of them, reused from the server's cache")
    reuse_share: Estimate = Field(description="cached_tokens / prompt_tokens (ratio of sums)")
    ttft_by_turn: list[TurnLatency] = Field(description="per turn number, from 1")


def step_sessions(conversation: np.ndarray, turn: np.ndarray, ok: np.ndarray, prompt_tokens: np.ndarray,
                  cached_tokens: np.ndarray, ttft_s: np.ndarray) -> StepSessions:
    """The figures from the step's measured records' columns (one row per record): ``conversation``
    (None or NaN for a one-shot request), ``turn``, ``ok`` (successful), token counts and TTFT (NaN where
    unknown)."""
    conversation = np.asarray(conversation, dtype=object)
    in_session = np.array([isinstance(name, str) for name in conversation], dtype=bool)
    turn = np.asarray(turn, dtype=float)
    prompt, cached = np.asarray(prompt_tokens, dtype=float), np.asarray(cached_tokens, dtype=float)
    reported = in_session & ok & ~np.isnan(prompt) & ~np.isnan(cached)
    by_turn = []
    done = in_session & ok & ~np.isnan(turn)
    for number in np.unique(turn[done]).astype(int):
        values = ttft_s[done & (turn == number)]
        estimates = intervals.quantiles(values, TURN_PERCENTILES)
        by_turn.append(TurnLatency(turn=int(number), requests=len(values), ttft_s={
            f"p{round(q * 100)}": estimate for q, estimate in zip(TURN_PERCENTILES, estimates, strict=True)}))
    return StepSessions(
        conversations=len(set(conversation[in_session])),
        turns=int(in_session.sum()),
        prompt_tokens=int(prompt[reported].sum()),
        cached_tokens=int(cached[reported].sum()),
        reuse_share=intervals.ratio_of_sums(cached[reported], prompt[reported]),
        ttft_by_turn=by_turn,
    )
