"""What one ``rigbench cloud run`` was asked to do, kept in its record so ``--resume`` does the same."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.lists import parse_counts


class CloudSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stacks: list[str]
    profile: str
    studies: list[str]
    steps: str = "1,2,4,8,16,32,64"
    warmup: float = 10.0
    measure: str = "30"
    sweep_args: str = ""
    fallback_types: list[str] = Field(default_factory=list)
    fallback_market: Literal["on-demand"] | None = None
    keep: bool = False
    rig_rigbench: str | None = Field(None, description="rigbench already on the rigs: no project phase")
    project_dir: str = "."
    setup_timeout_s: int = 900
    plan_users: int | None = None
    plan_min_tok_s: float = 10.0
    plan_ttft_p90_s: float = 2.0

    @property
    def step_counts(self) -> list[int]:
        return parse_counts(self.steps, "--steps")

    @property
    def users_to_plan(self) -> int:
        return self.plan_users or max(self.step_counts)
