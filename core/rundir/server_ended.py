"""A server's end, said from the process that started it to the sweep in the Locust process.

An outage is ridden out (``--ride-out``) because a supervised server comes back. A llama-server the
local rig started is supervised by nobody: once its process has exited, nothing will answer again,
and waiting out the ride-out only delays a failure already known. The local rig, which owns the
process and alone can read its exit code, writes this record into the run directory the moment the
process ends; the sweep's controller reads it there and stops at once with the same line. A server
started elsewhere (a rig over SSH, one the user started) writes none, so its outages are ridden out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from core.rundir.files import write_json_atomic
from core.strict import Strict

SERVER_ENDED = "server-ended.json"


class ServerEnded(Strict):
    """A server process that exited on its own while the load ran."""

    schema_version: Literal[1] = 1
    name: str = Field(description="the server as lines name it: llama-server, or replica N")
    url: str = Field(description="its root URL")
    exit_code: int = Field(description="the process's exit status (negative: the signal that ended it)")
    log: str | None = Field(description="its log file")
    ended_at: float = Field(description="unix seconds when its end was seen (within a fraction of a second of it)")

    def said(self) -> str:
        """``NAME (URL) exited with code N; its log: PATH``."""
        return f"{self.name} ({self.url}) exited with code {self.exit_code}; its log: {self.log}"

    def write(self, run_path: Path) -> None:
        """Written whole: the controller polls for it and must never read half of it."""
        write_json_atomic(run_path / SERVER_ENDED, self.model_dump_json(indent=1) + "\n")

    @classmethod
    def read(cls, run_path: Path) -> ServerEnded | None:
        """The record in a run directory; None when its server has not ended (or there is no record to read)."""
        try:
            return cls.model_validate_json((run_path / SERVER_ENDED).read_text())
        except (OSError, ValidationError):
            return None
