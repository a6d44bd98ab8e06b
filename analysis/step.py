"""One step's figures: the one model that analysis computes, summary.json stores, and the report,
CSV, HTML, plans, the gate, autotune and the study report read.

``analysis.figures.step_figures`` builds it from a run's records (the definitions are there);
``analysis.summary`` writes and reads it as a step of summary.json. The figures derived from
others (the step's load, its label, what a user sees per user) are defined here once.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from analysis.energy import StepEnergy
from analysis.goodput import StepGoodput
from analysis.intervals import Estimate
from analysis.sessions import StepSessions
from core.strict import Strict
from core.wording import counted


class StepFigures(Strict):
    """One step of a run; ``users`` is 0 and ``rate`` the offered requests/s on an open-loop step."""

    model_config = ConfigDict(validate_assignment=True)

    index: int
    users: int
    context_tokens: int
    window_start: float
    window_end: float
    requests: int
    ok: int
    errors: dict[str, int]
    interrupted: int = Field(0, description="measured requests the harness stopped (the sweep's end, Ctrl-C) while "
                             "they streamed; neither ok nor an error")
    running_at_start: dict[str, int] = Field(
        default_factory=dict, description="requests started before the window (its warm-up, an earlier step) still "
        "running as it opened, by how they ended: ok, an error kind, interrupted")
    output_tokens: float
    aggregate_tok_s: Estimate
    request_rate: float
    server_tok_s: Estimate
    server_tok_s_mean: Estimate
    client_tok_s: Estimate
    geomean_tok_s: Estimate
    ttft_s: dict[str, Estimate]
    itl_s: dict[str, Estimate]
    e2e_s: dict[str, Estimate]
    draft_acceptance: Estimate
    tokens_per_decode_step: float | None
    server_counter_tok_s: float | None
    completed_in_window: int
    tpot_s: dict[str, Estimate]
    rate: float | None
    sent_rate: float | None
    start_lag_s: dict[str, float | None]
    server_counter_granularity_tok_s: float | None
    server_timings_tok_s: float | None
    token_methods: dict[str, int]
    cut_counted_by_chunks: int
    mean_in_flight: float = Field(description="requests in flight over the window, on average (Little's law)")
    load_reached: float | None = Field(description="mean in flight / users, or sent rate / rate (core.load_reached)")
    window_seconds: float = Field(description="window_end - window_start")
    users_started: int | None = Field(None, description="users running when the window opened (closed loop; "
                                      "None where the run did not record it)")
    energy: StepEnergy | None = Field(None, description="the GPUs' (and CPU's) energy over the window and per "
                                      "output token, where the run sampled them (hardware/)")
    sessions: StepSessions | None = Field(None, description="conversations, the prompt tokens the server reused "
                                          "and TTFT by turn, where the run ran conversations (analysis.sessions)")
    goodput: StepGoodput | None = Field(None, description="the step's requests against the run's service-level "
                                        "targets (analysis.goodput), where it has targets")
    edge_attribution: dict[str, int] = Field(
        default_factory=dict, description="requests streaming across an edge of the window, by how their tokens "
        "inside it were counted: timeline (each chunk's time), running_counts (the server's per-chunk counts), "
        "chunks (its tokens spread over its chunks), span (spread over its span: no per-chunk count was kept)")

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

    @property
    def load(self) -> float:
        """The step's offered load: requests/s on an open-loop step, users on a closed-loop one."""
        return self.rate if self.rate is not None else self.users

    @property
    def load_label(self) -> str:
        return f"{self.rate:g} req/s" if self.rate is not None else counted(self.users, "user")

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def per_user_tok_s(self) -> Estimate:
        """What a user sees: the client's median per-user tok/s, the server's when the client has none."""
        return self.client_tok_s if self.client_tok_s.value is not None else self.server_tok_s
