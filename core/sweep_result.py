"""What a sweep made, as ``rigbench sweep --result FILE`` writes it: read by whoever started the sweep (the
rig's sweep step, a study) instead of its printed lines."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from core.strict import Strict
from core.whole_files import write_whole


class SweepResult(Strict):
    """The runs made, in order (a search's probes, with its folder), and why any did not complete."""

    runs: list[str] = Field(default_factory=list, description="the run directories made, as paths")
    search: str | None = Field(None, description="the capacity search's folder (--find-max)")
    failures: list[str] = Field(default_factory=list, description="'RUN: status (detail)' of each run not complete")

    def write(self, path: Path) -> None:
        """Written whole or not at all (a reader never sees half a file, a full disk leaves no part of one)."""
        write_whole(path, self.model_dump_json(indent=1) + "\n")

    @classmethod
    def read(cls, path: Path) -> SweepResult:
        return cls.model_validate_json(path.read_text())
