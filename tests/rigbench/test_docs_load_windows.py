"""Every ``rigbench local`` and ``rigbench sweep`` line README.md and docs/*.md show runs, with the command's
own defaults, a load its windows can hold: an open-loop step's window (rates at every arrival law, a trace's
replay) holds at least ``FAIL_BELOW`` of the arrivals its rate names, so a load generator that keeps the
schedule never fails the step for a window too short; a closed-loop line (sessions too) settles into
settings its load processes can start. The lines are read as the commands read their load options; the
other options (the server, the profile, the report) play no part in the windows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from core.lists import SWEEP_MEASURE, SWEEP_WARMUP_SECONDS
from core.load_reached import FAIL_BELOW
from core.profile import RequestDefaults
from loadtest.arrivals import step_arrivals
from loadtest.schedule import stages_for
from loadtest.trace import trace_arrivals
from rigbench.load_options import LoadFlags, _options, load_fields, settle_load

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# each command's window defaults (rigbench/commands/local.py, sweep.py)
DEFAULTS = {"local": (1.0, "3"), "sweep": (SWEEP_WARMUP_SECONDS, SWEEP_MEASURE)}
TRACE = "".join(f'{{"offset_s": {n * 0.5}, "prompt_tokens": 64, "output_tokens": 32}}\n' for n in range(40))


def doc_lines() -> list[tuple[str, str, list[str]]]:
    """(where, command, arguments) of every command line a document shows in a code block, a line that
    ends in ``\\`` joined to the next."""
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for number, line in enumerate(lines):
            match = re.match(r"(?:\.venv/bin/)?rigbench (local|sweep)\b(.*)", line.strip())
            if not match:
                continue
            text, following = match.group(2), number + 1
            while text.rstrip().endswith("\\") and following < len(lines):
                text, following = text.rstrip()[:-1] + " " + lines[following].strip(), following + 1
            found.append((f"{doc.name}:{number + 1}", match.group(1), shlex.split(text, comments=True)))
    return found


def load_flags(command: str, args: list[str]) -> LoadFlags | None:
    """The line's load options as its command receives them (None: a ``--load`` file or ``--resume``,
    whose load is a file's or a run's, not the line's)."""
    warmup, measure = DEFAULTS[command]
    options = {f"--{name.replace('_', '-')}": name for name, _, _ in _options(warmup, measure, "")}
    values = {name: option.default for name, _, option in _options(warmup, measure, "")}
    given: set[str] = set()
    for position, arg in enumerate(args):
        if arg in ("--load", "--resume", "--find-max"):
            return None
        name = options.get(arg.split("=", 1)[0])
        if name is None or name in ("ignore_eos", "sessions", "pin_slots", "timeline"):
            if name is not None:
                values[name], given = True, given | {name}
            continue
        values[name] = arg.split("=", 1)[1] if "=" in arg else args[position + 1]
        given.add(name)
    for name in ("warmup", "trace_speed", "drain", "ride_out", "max_error_rate", "read_timeout"):
        values[name] = float(values[name])
    for name in ("arrival_seed", "workload_seed", "system_prompt_tokens", "repeats"):
        values[name] = int(values[name])
    return LoadFlags(values, given)


LINES = doc_lines()


def test_the_docs_show_lines_of_every_kind_of_load() -> None:
    shown = {arg for _, _, args in LINES for arg in args}
    assert {"--rates", "--steps", "--sessions", "--trace", "--arrival"} <= shown
    assert {command for _, command, _ in LINES} == {"local", "sweep"}


@pytest.mark.parametrize(("where", "command", "args"), LINES, ids=[where for where, _, _ in LINES])
def test_every_documented_line_runs_a_load_its_default_windows_can_hold(where: str, command: str, args: list[str],
                                                                         tmp_path: Path, monkeypatch) -> None:
    flags = load_flags(command, args)
    if flags is None:
        pytest.skip("the load is a file's or a run's")
    monkeypatch.chdir(tmp_path)
    if flags.values["trace"] is not None:  # a stand-in for the trace the line names: 2 arrivals a second
        Path(flags.values["trace"]).write_text(TRACE)
    fields, named = load_fields(flags)
    settings = settle_load(fields, request=RequestDefaults(), request_from="rigbench", named=named).settings
    for stage in stages_for(settings):
        if stage.rate is None:
            continue
        if settings.trace is not None:
            arrivals = trace_arrivals(settings.trace, stage.duration)
        else:
            arrivals = step_arrivals(stage.rate, stage.duration, settings.arrival, settings.arrival_seed,
                                     settings.arrival_shape)
        held = int((arrivals >= stage.warmup).sum())
        assert held >= FAIL_BELOW * stage.rate * stage.measure, (
            f"{where}: {stage.rate:g} req/s: {held} arrivals in a {stage.measure:g} s window")
