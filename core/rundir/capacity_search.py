"""A capacity search's record: the most load that met the service-level targets, and how it was found.

``rigbench sweep --find-max users|rate --slo ...`` runs one probe after another, each a normal one-step
run directory, and keeps this record beside them, so every tool that reads a run reads a probe and
the report, the plan and a program can read the search::

    runs/<search-id>/
      capacity_search.json   CapacitySearch: mode, targets, resolution, every probe, the result
      <probe-run-id>/        one run directory per probe (manifest.json, records/, ...)

The record is rewritten after each probe (atomically), so a search that stops part-way still says
what it found; ``result`` is None only while a probe runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from core.errors import RunDirError
from core.rundir.files import write_json_atomic
from core.rundir.models import RunStatus, slo_keys
from core.strict import Strict
from core.validation import describe_validation_error
from core.wording import counted

SEARCH_FILE = "capacity_search.json"
SEARCH_VERSION = 1
SearchMode = Literal["users", "rate"]
# A step against one target: the percentile's whole 95% interval within it, only its point estimate
# within it (or no interval: too few requests), or the point estimate over it.
SloVerdict = Literal["meets", "unclear", "misses"]
# Why a search stopped: the bracket is within the resolution; the largest load allowed met every target;
# the first probe already missed; a probe failed (its run did not give a measured window, or stopped).
StopReason = Literal["resolution", "max_load_met", "first_missed", "probe_failed"]
STOP_REASONS: dict[str, str] = {
    "resolution": "the largest meeting and the smallest missing load are within the resolution",
    "max_load_met": "the largest load allowed (--max-load) met every target",
    "first_missed": "the first probe already missed a target",
    "probe_failed": "a probe failed or was stopped",
}


def slo_quantile(key: str) -> tuple[str, float]:
    """``ttft_p90`` -> ("ttft", 0.9): the figure a target names and the share of requests it promises."""
    figure, _, percentile = key.partition("_")
    return figure, int(percentile.removeprefix("p")) / 100.0


class TargetReading(Strict):
    """One target read off a probe's step: the percentile with its 95% interval, and the verdict."""

    target_s: float = Field(gt=0)
    value: float | None = Field(description="the step's percentile of the figure (seconds)")
    low: float | None
    high: float | None
    n: int = Field(ge=0, description="requests behind it")
    verdict: SloVerdict


class SearchProbe(Strict):
    """One probe: a one-step run at one load, and what it gave."""

    load: float = Field(gt=0, description="users (mode users) or offered requests/s (mode rate)")
    run_id: str = Field(description="its run directory, inside the search's folder")
    status: RunStatus
    meets: bool = Field(description="every target's verdict is meets and no measured request failed")
    targets: dict[str, TargetReading] = Field(default_factory=dict)
    requests: int = Field(0, ge=0, description="measured requests")
    errors: int = Field(0, ge=0, description="measured requests that failed")
    met_share: float | None = Field(None, description="share of measured ok requests meeting every target")
    goodput_req_s: float | None = None
    goodput_tok_s: float | None = None
    aggregate_tok_s: float | None = None
    aggregate_tok_s_low: float | None = Field(None, description="lower end of its 95% interval")
    detail: str | None = Field(None, description="why it did not meet, or why it failed")


class SearchResult(Strict):
    largest_meeting: float | None = Field(description="the largest probed load meeting every target")
    smallest_missing: float | None = Field(description="the smallest probed load that did not")
    reason: StopReason
    detail: str


class CapacitySearch(Strict):
    schema_version: Literal[1] = SEARCH_VERSION
    search_id: str
    created_at: str
    ended_at: str | None = None
    mode: SearchMode
    targets: dict[str, float] = Field(description="service-level targets in seconds, keyed like ttft_p90")
    first_load: float = Field(gt=0)
    resolution: float = Field(gt=0, description="users or requests/s; a share of the bracket's low end when "
                              "resolution_relative")
    resolution_relative: bool = False
    max_load: float | None = Field(None, gt=0)
    url: str | None = None
    probes: list[SearchProbe] = Field(default_factory=list)
    result: SearchResult | None = None

    @model_validator(mode="after")
    def _known_targets(self) -> CapacitySearch:
        if not self.targets:
            raise ValueError("a capacity search needs at least one target")
        unknown = [key for key in self.targets if key not in slo_keys()]
        if unknown:
            raise ValueError(f"unknown target {unknown[0]!r}; expected one of {', '.join(slo_keys())}")
        return self

    @property
    def unit(self) -> str:
        return "users" if self.mode == "users" else "req/s"

    def load_text(self, load: float | None) -> str:
        if load is None:
            return "-"
        return counted(float(load), "user") if self.unit == "users" else f"{load:g} {self.unit}"

    def probe(self, load: float | None) -> SearchProbe | None:
        """The probe at ``load`` (the last one, should a load have been probed twice)."""
        found = [probe for probe in self.probes if probe.load == load]
        return found[-1] if found else None


def write_search(folder: Path, search: CapacitySearch) -> Path:
    path = folder / SEARCH_FILE
    write_json_atomic(path, search.model_dump_json(indent=2) + "\n")
    return path


def read_search(folder: Path | str) -> CapacitySearch:
    """A search folder's record, validated; a damaged or foreign file is one line naming it."""
    path = Path(folder) / SEARCH_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirError(f"{folder}: no {SEARCH_FILE}; is this a capacity search's folder?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunDirError(f"{path}: not valid JSON ({error})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SEARCH_VERSION:
        raise RunDirError(f"{path}: schema_version {version!r} is not supported (this rigbench reads version "
                          f"{SEARCH_VERSION})")
    try:
        return CapacitySearch.model_validate(data)
    except ValidationError as error:
        raise RunDirError(describe_validation_error(error, path)) from None


def is_search(folder: Path | str) -> bool:
    return (Path(folder) / SEARCH_FILE).is_file()


def probe_paths(folder: Path | str, search: CapacitySearch) -> list[Path]:
    """The probes' run directories that exist, in order of load (each load once: its last probe)."""
    last = {probe.load: probe for probe in search.probes}
    paths = [Path(folder) / last[load].run_id for load in sorted(last)]
    return [path for path in paths if (path / "manifest.json").is_file()]


def expand_searches(paths: list[Path] | list[str]) -> list[Path]:
    """Run directories, with each capacity search's folder replaced by its probes' runs (in order of load)."""
    expanded: list[Path] = []
    for path in map(Path, paths):
        if is_search(path) and not (path / "manifest.json").exists():
            probes = probe_paths(path, read_search(path))
            if not probes:
                raise RunDirError(f"{path}: the capacity search has no probe run yet; nothing to read")
            expanded += probes
        else:
            expanded.append(path)
    return expanded


def search_of_run(run: Path | str) -> tuple[Path, CapacitySearch] | None:
    """The search a probe's run directory belongs to (the record in the folder above names it), if any."""
    folder = Path(run).resolve().parent
    if not is_search(folder):
        return None
    try:
        search = read_search(folder)
    except RunDirError:
        return None
    return (folder, search) if any(probe.run_id == Path(run).resolve().name for probe in search.probes) else None
