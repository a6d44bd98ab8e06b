"""What one ``rigbench cloud run`` was asked to do, kept in its record so ``--resume`` does the same."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.lists import DEFAULT_USER_STEPS, SWEEP_MEASURE, SWEEP_WARMUP_SECONDS, parse_counts


class CloudSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stacks: list[str]
    profile: str
    studies: list[str]
    # the sweep's load, named and typed as core.rundir.LoadSettings names them (a test holds the two together)
    user_steps: list[int] = Field(default_factory=lambda: parse_counts(DEFAULT_USER_STEPS, "--steps"))
    warmup_seconds: float = SWEEP_WARMUP_SECONDS
    measure_seconds: float | list[float] = float(SWEEP_MEASURE)
    sweep_args: str = ""
    fallback_types: list[str] = Field(default_factory=list)
    fallback_market: Literal["on-demand"] | None = None
    keep: bool = False
    rig_rigbench: str | None = Field(None, description="rigbench already on the rigs: no project phase")
    project_dir: str = "."
    setup_timeout_s: int = 900
    # the ladder and eval studies: one question file, the same rungs and options on every rig
    questions: str | None = Field(None, description="the question file, absolute")
    questions_sha256: str | None = Field(None, description="its digest: a resumed loop refuses a changed file")
    rungs: list[str] = Field(default_factory=list)
    ladder_args: list[str] = Field(default_factory=list, description="more `rigbench quality ladder` options")
    eval_args: list[str] = Field(default_factory=list, description="more `rigbench quality eval` options")
    with_local: str | None = Field(None, description="a ladder of this machine for the grids, absolute")
    plan_users: int | None = None
    plan_min_tok_s: float = 10.0
    plan_ttft_p90_s: float = 2.0

    @property
    def users_to_plan(self) -> int:
        return self.plan_users or max(self.user_steps)
