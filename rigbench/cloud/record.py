"""The record of one cloud loop: ``runs/cloud-<id>/cloud-run.json``.

It is written after every change (attempt, phase, destroy), so a loop stopped by anything
— Ctrl-C, a lost laptop, a kill — leaves a true account of what ran, what it cost and what
may still be up, and ``--resume`` continues from it: finished rigs are skipped, a study
whose runs came home is not run again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from core.errors import CloudError
from core.rundir.files import write_json_atomic
from core.strict import Strict
from core.validation import describe_validation_error

RECORD_FILE = "cloud-run.json"
SCHEMA_VERSION = 1
# Phases on the rig, in order; studies come after them, then fetch; destroy ends every rig.
RIG_PHASES = ("up", "setup", "toolkit", "build", "download", "serve", "project")
STUDIES = ("sweep", "bench", "ladder", "eval")


class AttemptRecord(Strict):
    """One ``pulumi up`` of a rig: where it asked for capacity and what came of it."""

    number: int
    instance_type: str
    market: Literal["spot", "on-demand"]
    zone: str | None = Field(None, description="the zone asked for; None leaves the stack's own az")
    placement_score: int | None = Field(None, description="EC2 spot placement score of the zone, 1-10")
    spot_usd_per_hour: float | None = Field(None, description="the zone's spot price when the loop planned")
    config_file: str = Field(description="the stack config this attempt ran with, beside the record")
    started_at: float
    seconds: float | None = None
    ok: bool | None = None
    failure_code: str | None = Field(None, description="the EC2 error code, when the failure names one")
    failure: str | None = Field(None, description="the last lines pulumi printed")
    destroyed: bool = Field(False, description="what the failed attempt left was destroyed before the next")


class PhaseRecord(Strict):
    name: str
    started_at: float
    seconds: float | None = None
    ok: bool | None = None
    detail: str | None = Field(None, description="what the phase found, e.g. where the build came from")
    error: str | None = None


class RigRecord(Strict):
    """One stack's rig from launch to destroy."""

    stack: str
    status: Literal["pending", "running", "finished", "failed", "cancelled"] = "pending"
    attempts: list[AttemptRecord] = Field(default_factory=list)
    phases: dict[str, PhaseRecord] = Field(default_factory=dict)
    instance_id: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    market: str | None = None
    usd_per_hour: float | None = Field(None, description="the price it ran at: spot at launch, else on-demand")
    launched_at: float | None = Field(None, description="when the successful up returned")
    destroyed_at: float | None = None
    up: bool = Field(False, description="whether the stack may hold billable resources now")
    kept: bool = False
    ttl_hours: int | None = None
    runs: list[str] = Field(default_factory=list, description="run folders copied home, relative to the record")
    error: str | None = None

    @property
    def hours(self) -> float | None:
        """Launch to destroy (or to now, for a rig still up)."""
        if self.launched_at is None:
            return None
        return ((self.destroyed_at or time.time()) - self.launched_at) / 3600

    @property
    def cost_usd(self) -> float | None:
        hours = self.hours
        return None if hours is None or self.usd_per_hour is None else hours * self.usd_per_hour


class RigEstimate(Strict):
    stack: str
    instance_type: str
    market: str
    usd_per_hour: float
    price_basis: str
    hours: float
    usd: float
    phases_s: dict[str, float]


class CloudRunRecord(Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    id: str
    created_at: float
    settings: dict = Field(description="the command's options, so --resume runs the same loop")
    estimate: list[RigEstimate] = Field(default_factory=list)
    rigs: dict[str, RigRecord]
    report: str | None = None
    plan: str | None = None
    finished_at: float | None = None


class CloudRunFolder:
    """``runs/cloud-<id>/``: the record, one folder per rig (log, attempt configs, runs), the report."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()

    @property
    def record_path(self) -> Path:
        return self.root / RECORD_FILE

    def rig_folder(self, stack: str) -> Path:
        folder = self.root / "rigs" / stack
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def save(self, record: CloudRunRecord) -> None:
        """Write the whole record; the rigs' threads share it, so one writer at a time."""
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.record_path, record.model_dump_json(indent=2) + "\n")

    def load(self) -> CloudRunRecord:
        if not self.record_path.is_file():
            raise CloudError(f"--resume: no {RECORD_FILE} in {self.root}; expected the folder of an earlier "
                             "`rigbench cloud run` (runs/cloud-<id>)")
        try:
            return CloudRunRecord.model_validate_json(self.record_path.read_text())
        except ValidationError as error:
            raise CloudError(describe_validation_error(error, str(self.record_path))) from None

    def relative(self, path: Path | str) -> str:
        path = Path(path).resolve()
        try:
            return str(path.relative_to(self.root.resolve()))
        except ValueError:
            return str(path)
