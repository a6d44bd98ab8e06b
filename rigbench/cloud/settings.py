"""What one ``rigbench cloud run`` was asked to do, kept in its record so ``--resume`` does the same."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from core.lists import DEFAULT_USER_STEPS, SWEEP_MEASURE, SWEEP_WARMUP_SECONDS, parse_counts
from core.load_file import load_fields_text
from core.profile import RequestDefaults
from core.quality_settings import QualityEvalSettings, QualityLadderSettings
from core.rundir import LoadSettings
from core.strict import Strict
from rigbench.load_options import settle_load

# the load where none is given: rigbench sweep's default steps and windows
SWEEP_LOAD = {"user_steps": parse_counts(DEFAULT_USER_STEPS, "--steps"), "warmup_seconds": SWEEP_WARMUP_SECONDS,
              "measure_seconds": float(SWEEP_MEASURE)}


class CloudSettings(Strict):

    stacks: list[str]
    profile: str
    studies: list[str]
    load: dict[str, Any] = Field(default_factory=lambda: dict(SWEEP_LOAD), description="the sweep's load as a "
                                 "load file's fields (core.load_file), checked when the loop began; every rig "
                                 "sweeps it")
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
    ladder: QualityLadderSettings | None = Field(None, description="the ladder's settings (`--ladder FILE`), "
                                                 "handed to every rig as a file")
    eval: QualityEvalSettings | None = Field(None, description="the eval's settings (`--eval FILE`), handed to "
                                             "every rig as a file")
    with_local: str | None = Field(None, description="a ladder of this machine for the grids, absolute")
    plan_users: int | None = None
    plan_min_tok_s: float = 10.0
    plan_ttft_p90_s: float = 2.0

    @property
    def sweep_load(self) -> LoadSettings:
        """The load every rig sweeps, as it runs (request settings aside: each rig's profile gives those)."""
        return settle_load(self.load, request=RequestDefaults(), request_from="profile",
                           where="the loop's recorded load").settings

    @property
    def users_to_plan(self) -> int:
        return self.plan_users or max(self.sweep_load.user_steps)


def sent_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A load's fields as the record keeps them: what its load file holds, plain JSON."""
    return json.loads(load_fields_text(fields))
