"""One load description: every command that runs a sweep reads its load into LoadSettings the same way.

``core.rundir.LoadSettings`` is the load a run records; ``rigbench.load_options`` the one option set that
fills it (``OPTION_FIELDS``), and a load file holds the same fields. The commands, the file, the flags
beside it and the local rig's options are held to it here.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.errors import UsageError
from core.lists import DEFAULT_USER_STEPS, parse_counts
from core.load_file import load_fields_text
from core.load_reached import FAIL_BELOW
from core.profile import RequestDefaults
from core.rundir import LoadSettings
from loadtest.arrivals import step_arrivals
from loadtest.schedule import stages_for
from rigbench.cli import app, load_command
from rigbench.load_options import OPTION_FIELDS, LoadFlags, load_request, settle_load, with_load_options
from rigbench.local_rig import LocalRigOptions

FROM_THE_PROFILE_OR_THE_RUN = {"temperature", "cache_prompt", "arm"}
TRACE = Path(__file__).resolve().parents[1] / "loadtest" / "data" / "short_trace.jsonl"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_field_is_filled_by_an_option_or_by_the_profile() -> None:
    filled = {name for fields in OPTION_FIELDS.values() for name in fields}
    assert set(LoadSettings.model_fields) == filled | FROM_THE_PROFILE_OR_THE_RUN


def option_flags(command) -> set[str]:
    return {flag for param in command.params for flag in (*param.opts, *getattr(param, "secondary_opts", []))}


def test_sweep_and_local_take_the_one_load_option_set() -> None:
    sweep, local = option_flags(load_command("sweep")), option_flags(load_command("local"))
    load = {"--load", *(flag for name in OPTION_FIELDS for flag in (f"--{name.replace('_', '-')}",))}
    assert load <= sweep and load <= local
    assert "--no-ignore-eos" in sweep & local


def read(tmp_path: Path, text: str, *flags: str, suffix: str = ".toml") -> LoadSettings:
    """The settings ``rigbench sweep`` reads from a load file and the flags given beside it."""
    captured = {}

    @with_load_options(warmup=10.0, measure="30")
    def command(load: LoadFlags) -> None:
        captured["request"] = load_request(load, request=RequestDefaults(), request_from="rigbench")

    import typer
    one = typer.Typer()
    one.command()(command)
    path = tmp_path / f"load{suffix}"
    path.write_text(text)
    result = CliRunner().invoke(one, ["--load", str(path), *flags])
    if result.exception is not None:
        raise result.exception
    return captured["request"].settings


def test_a_load_file_gives_the_load_and_flags_beside_it_override_it(tmp_path: Path) -> None:
    text = 'rate_steps = [0.5, 2]\nmeasure_seconds = [4, 6]\nmax_tokens = 32\ntemperature = 0.5\n' \
           'slo = {ttft_p90 = 0.5}\n'
    settings = read(tmp_path, text)
    assert settings.rate_steps == [0.5, 2.0] and settings.user_steps == [], "the file's kind of load, not the default"
    assert settings.measure_seconds == [4.0, 6.0] and settings.warmup_seconds == 10.0
    assert (settings.max_tokens, settings.temperature, settings.slo) == (32, 0.5, {"ttft_p90": 0.5})
    flagged = read(tmp_path, text, "--steps", "1,2,4", "--measure", "3", "--max-tokens", "8")
    assert flagged.user_steps == [1, 2, 4] and flagged.rate_steps == [] and flagged.measure_seconds == 3.0
    assert flagged.max_tokens == 8 and flagged.temperature == 0.5
    # a flag typed at its default still overrides the file
    assert read(tmp_path, "warmup_seconds = 2\n", "--warmup", "10").warmup_seconds == 10.0
    # JSON, and a trace named by its path next to the file
    (tmp_path / "trace.jsonl").write_text(TRACE.read_text())
    traced = read(tmp_path, json.dumps({"trace": "trace.jsonl", "trace_speed": 2}), suffix=".json")
    assert traced.trace is not None and traced.trace.speed == 2.0 and len(traced.rate_steps) == 1


def test_a_load_file_s_mistakes_are_one_line_naming_the_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"load\.toml: unknown key 'user_step'"):
        read(tmp_path, "user_step = [1]\n")
    with pytest.raises(UsageError, match=r"load\.toml with the flags: max_tokens: Input should be greater than or"):
        read(tmp_path, "max_tokens = 0\n")
    with pytest.raises(UsageError, match=r"load\.toml: not TOML"):
        read(tmp_path, "steps = [1,\n")
    with pytest.raises(UsageError, match="sessions need a closed loop"):
        read(tmp_path, "rate_steps = [1]\n", "--sessions")


def test_what_rigbench_writes_as_a_load_file_reads_back_whole(tmp_path: Path) -> None:
    settings = settle_load({"rate_steps": [1.5], "arrival": "gamma", "arrival_shape": 0.5, "warmup_seconds": 1,
                            "measure_seconds": 2, "slo": {"e2e_p99": 4.0}}, request=RequestDefaults(),
                           request_from="rigbench").settings
    assert read(tmp_path, load_fields_text(settings.model_dump(mode="json")), suffix=".json") == settings


def test_the_local_rig_reads_its_load_as_a_load_file_does() -> None:
    assert LocalRigOptions().load_fields()["user_steps"] == parse_counts(DEFAULT_USER_STEPS, "--steps")
    options = LocalRigOptions().changed(rate_steps=[2.0], label="x")
    assert options.label == "x" and "user_steps" not in options.load_fields()
    assert options.load_value("rate_steps") == [2.0] and options.load_value("drain_seconds") == 60.0


def test_resume_takes_no_load_flags(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", "--resume", str(tmp_path), "--measure", "3"])
    assert isinstance(result.exception, UsageError)
    assert "--resume with --measure: a resumed run keeps its own load settings" in str(result.exception)


REFUSED_WITH_RESUME = [
    ("--profile", "local-cpu", "a resumed run keeps the profile and request settings it ran with"),
    ("--replicas-file", "replicas.json", "a resumed run sends to the replicas its manifest lists"),
    ("--find-max", "users", "a resumed run runs a sweep's remaining steps, not a search"),
    ("--resolution", "2", "a resumed run runs a sweep's remaining steps, not a search"),
    ("--max-load", "8", "a resumed run runs a sweep's remaining steps, not a search"),
    ("--runs-dir", "elsewhere", "a resumed run goes beside the run it continues"),
    ("--runs-dir", "runs", "a resumed run goes beside the run it continues"),  # typed, though it is the default
    ("--repeats", "3", "a resumed run keeps its own load settings"),
    ("--steps", "1,2", "a resumed run keeps its own load settings"),
]


@pytest.mark.parametrize(("flag", "value", "why"), REFUSED_WITH_RESUME,
                         ids=[" ".join(item[:2]) for item in REFUSED_WITH_RESUME])
def test_resume_refuses_every_option_it_would_not_honour(flag: str, value: str, why: str, tmp_path: Path) -> None:
    """Refused in one line naming the option, before the run is read (``tmp_path`` is no run)."""
    result = CliRunner().invoke(app, ["sweep", "--resume", str(tmp_path), flag, value])
    assert isinstance(result.exception, UsageError), result.output
    assert str(result.exception) == f"--resume with {flag}: {why}; leave it out"


def test_resume_names_every_refused_option_at_once(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", "--resume", str(tmp_path), "--measure", "3", "--profile", "x",
                                      "--find-max", "rate"])
    assert str(result.exception) == (
        "--resume with --profile, --find-max, --measure: a resumed run keeps the profile and request settings it "
        "ran with; a resumed run runs a sweep's remaining steps, not a search; a resumed run keeps its own load "
        "settings; leave them out")


def test_resume_takes_the_options_it_honours(tmp_path: Path) -> None:
    """The options a resume honours pass the refusal: the error is the run's own (``tmp_path`` is no run)."""
    result = CliRunner().invoke(app, ["sweep", "--resume", str(tmp_path), "--url", "http://127.0.0.1:9",
                                      "--model-name", "m", "--no-preflight", "--no-progress", "--interruption-marker",
                                      str(tmp_path / "marker"), "--result", str(tmp_path / "made.json")])
    assert result.exception is not None and "--resume with" not in str(result.exception)
    assert json.loads((tmp_path / "made.json").read_text())["runs"] == []


def doc_local_lines() -> list[list[str]]:
    """The ``rigbench local`` command lines the docs show (their arguments)."""
    lines = []
    for doc in ("local.md", "sweeps.md", "workloads.md"):
        for line in (DOCS / doc).read_text().splitlines():
            found = re.match(r"(?:\.venv/bin/)?rigbench local\b(.*)", line.strip())
            if found:
                lines.append(shlex.split(found.group(1), comments=True))
    return lines


@pytest.mark.parametrize("args", doc_local_lines(), ids=lambda args: " ".join(args) or "(defaults)")
def test_every_local_line_the_docs_show_runs_a_load_its_windows_can_hold(args: list[str], monkeypatch) -> None:
    """``rigbench local --rates 1,2,4`` with local's 3 s windows ran 33 % of its first step's load (one arrival
    where 1 req/s names three): left out, a rate step's window is as long as 30 of its arrivals need, so a
    load generator that keeps the schedule reaches the load named in every documented line."""
    import rigbench.commands.local as local_command

    ran = []
    monkeypatch.setattr(local_command, "run_local_rig", lambda options: ran.append(options) or "report")
    result = CliRunner().invoke(app, ["local", *args])
    assert result.exit_code == 0 and len(ran) == 1, (result.output, result.exception)
    settings = settle_load(ran[0].load_fields(), request=RequestDefaults(), request_from="rigbench").settings
    stages = stages_for(settings)
    for stage in stages:
        if stage.rate is None:
            continue
        arrivals = step_arrivals(stage.rate, stage.duration, settings.arrival, settings.arrival_seed,
                                 settings.arrival_shape)
        held = int((arrivals >= stage.warmup).sum())
        assert held >= FAIL_BELOW * stage.rate * stage.measure, (
            f"{stage.rate:g} req/s: {held} arrivals in a {stage.measure:g} s window")
    if "--rates" in args and "--measure" not in args:
        assert settings.measure_seconds == [30.0, 15.0, 8.0]


def test_a_result_file_that_cannot_be_written_is_one_line_naming_the_runs_made(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", "--url", "http://127.0.0.1:9", "--steps", "1", "--result",
                                      str(tmp_path / "missing-folder" / "made.json")])
    assert isinstance(result.exception, UsageError), result.output
    assert "missing-folder/made.json: cannot write it (No such file or directory); the runs made: none" in str(
        result.exception)
