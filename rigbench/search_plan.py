"""What ``--find-max`` asks for, read from the options before anything runs: the search's plan.

Apart from the search itself (``rigbench.capacity_search``, which judges probes with the analysis
stage) so that a command that only checks the options, as the rig's sweep step does here before it
asks the rig to search, loads no analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from core.errors import UsageError
from core.lists import DECIMAL
from core.rundir import LoadSettings
from core.rundir.capacity_search import SearchMode
from core.wording import counted
from rigbench.load_options import LoadFlags, LoadRequest

FIND_MAX_HELP = ("search for the most load meeting the --slo targets: users (closed loop, from 1 user) or rate "
                 "(open loop, from 1 req/s); users:N or rate:R starts there. Each probe is a one-step run in one "
                 "search folder; instead of --steps, --rates and --trace")
RESOLUTION_HELP = ("with --find-max: stop when the bracket is this narrow: users (whole, default 1) or req/s, or a "
                   "share of its low end (10%, the default for rate)")
MAX_LOAD_HELP = "with --find-max: probe no more than this load (users or req/s)"
DEFAULT_FIRST = {"users": 1.0, "rate": 1.0}
DEFAULT_RATE_RESOLUTION = 0.10
_NUMBER = re.compile(rf"\s*({DECIMAL})\s*")
Outcome = Literal["meets", "misses", "failed"]


@dataclass(frozen=True)
class SearchPlan:
    """What a search looks for, read from the options before anything is created."""

    mode: SearchMode
    first_load: float
    targets: dict[str, float]
    resolution: float
    relative: bool = False
    max_load: float | None = None

    @property
    def unit(self) -> str:
        return "users" if self.mode == "users" else "req/s"

    def load_text(self, load: float) -> str:
        return counted(float(load), "user") if self.unit == "users" else f"{load:g} {self.unit}"

    def tolerance(self, low: float) -> float:
        """How narrow a bracket whose low end is ``low`` must get."""
        return self.resolution * low if self.relative else self.resolution

    def probe_settings(self, template: LoadSettings, load: float) -> LoadSettings:
        """The template's settings at one load: a one-step run."""
        steps = {"user_steps": [int(load)], "rate_steps": []} if self.mode == "users" else {
            "user_steps": [], "rate_steps": [load]}
        measure = template.measure_seconds
        return LoadSettings.model_validate({**template.model_dump(), **steps, "slo": self.targets,
                                            "measure_seconds": measure[0] if isinstance(measure, list) else measure})


def _number(text: str, option: str, what: str) -> float:
    match = _NUMBER.fullmatch(text)
    if match is None or float(match[1]) <= 0:
        raise UsageError(f"{option}: cannot read {text!r}: expected {what}")
    return float(match[1])


def parse_find_max(text: str) -> tuple[SearchMode, float]:
    """``users`` -> ("users", 1); ``rate:0.2`` -> ("rate", 0.2)."""
    mode, _, first = text.strip().partition(":")
    if mode not in ("users", "rate"):
        raise UsageError(f"--find-max: cannot read {text!r}: expected users or rate (users:N or rate:R to start at "
                         "another load)")
    if not first:
        return mode, DEFAULT_FIRST[mode]  # type: ignore[return-value]
    load = _number(first, "--find-max", "users:N (whole users) or rate:R (requests/s above 0)")
    if mode == "users" and load != int(load):
        raise UsageError(f"--find-max: {text!r}: a first load of users is whole users, e.g. users:4")
    return mode, load  # type: ignore[return-value]


def parse_resolution(text: str | None, mode: SearchMode) -> tuple[float, bool]:
    """(resolution, relative): ``2`` users or req/s, ``10%`` of the bracket's low end; the mode's default."""
    if text is None or not text.strip():
        return (1.0, False) if mode == "users" else (DEFAULT_RATE_RESOLUTION, True)
    if text.strip().endswith("%"):
        share = _number(text.strip()[:-1], "--resolution", "a share of the bracket's low end, e.g. 10%") / 100.0
        if share >= 1:
            raise UsageError(f"--resolution: {text!r}: a share of the bracket's low end is below 100%, e.g. 10%")
        return share, True
    value = _number(text, "--resolution", "users (whole) or req/s above 0, or a share such as 10%")
    if mode == "users" and value != int(value):
        raise UsageError(f"--resolution: {text!r}: users are whole; give 1 or more, or a share such as 10%")
    return value, False


def check_search_flags(find_max: str | None, flags: LoadFlags) -> None:
    """The load flags a search cannot take, refused before the load is read (its default steps would
    otherwise be judged against them)."""
    if find_max is None:
        return
    clashes = [flags.flag(name) for name in ("steps", "rates", "trace") if name in flags.given]
    if clashes:
        raise UsageError(f"--find-max with {' and '.join(clashes)}: a search chooses its own loads; leave "
                         f"{'it' if len(clashes) == 1 else 'them'} out")
    measure = str(flags.values.get("measure", ""))
    if "," in measure:
        raise UsageError(f"--find-max: --measure {measure!r}: give one window; every probe is one step")


def search_plan(find_max: str | None, request: LoadRequest, flags: LoadFlags, *, resolution: str | None,
                max_load: float | None, urls: list[str]) -> SearchPlan | None:
    """The search ``--find-max`` asks for, or None; every mistake refused in one line before anything is made."""
    if find_max is None:
        if resolution is not None or max_load is not None:
            raise UsageError("--resolution and --max-load belong to --find-max; give --find-max users|rate, or "
                             "leave them out")
        return None
    mode, first = parse_find_max(find_max)
    check_search_flags(find_max, flags)
    slo = request.settings.slo
    if not slo:
        raise UsageError("--find-max needs --slo: the targets a load must meet, e.g. --slo ttft_p90=0.5,tpot_p90=50ms")
    if len(urls) > 1:
        raise UsageError("--find-max: give one --url; a search probes one server (run one search per server)")
    measure = request.settings.measure_seconds
    if isinstance(measure, list) and len(measure) > 1:
        raise UsageError(f"--find-max: --measure {','.join(f'{m:g}' for m in measure)}: give one window; every "
                         "probe is one step")
    if len(request.contexts) > 1:
        raise UsageError(f"--find-max: --context-tokens {','.join(map(str, request.contexts))}: give one context "
                         "length; one search per length")
    step, relative = parse_resolution(resolution, mode)
    if max_load is not None:
        if mode == "users" and max_load != int(max_load):
            raise UsageError(f"--max-load: {max_load:g} users: give whole users")
        if max_load <= first:
            raise UsageError(f"--max-load {max_load:g} is not above the first load {first:g}: nothing to search")
        span = max_load - first
        tolerance = step * first if relative else step
        if tolerance >= span:
            said = f"{resolution}" if relative else f"{step:g}"
            raise UsageError(f"--resolution {said} is as coarse as the whole range {first:g}..{max_load:g} "
                             f"({span:g} {'users' if mode == 'users' else 'req/s'}): give a finer --resolution or "
                             "a higher --max-load")
    return SearchPlan(mode, first, dict(slo), step, relative, max_load)
