"""The locustfile's options against ``LoadSettings``: every field Locust takes has its option, wired.

Locust's own parser is asked in a child process (importing Locust monkey-patches with gevent),
after the locustfile has added the project's options to it, as a hand run's would be.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pydantic_core import PydanticUndefined

from core.lists import DEFAULT_USER_STEPS, parse_counts
from core.rundir import LoadSettings
from core.rundir.models import LengthDistribution, SessionSettings
from loadtest.locust_options import hand_run_flags
from loadtest.trace import trace_rate, trace_source

ROOT = Path(__file__).resolve().parents[2]
TRACE = Path(__file__).resolve().parent / "data" / "short_trace.jsonl"
# A sweep's arm is rigbench sweep's (one Locust run is one arm): the one field no Locust option sets.
NOT_LOCUST_OPTIONS = {"arm", "repeats"}  # the run names its arm; one Locust run is one repeat
# field -> (its option, a command line that sets it, the value the settings then hold)
WIRING = {
    "user_steps": ("--steps", ["--steps", "3,5"], [3, 5]),
    "rate_steps": ("--rates", ["--rates", "0.5,2"], [0.5, 2.0]),
    "arrival": ("--arrival", ["--rates", "1", "--arrival", "constant"], "constant"),
    "arrival_seed": ("--arrival-seed", ["--arrival-seed", "7"], 7),
    "warmup_seconds": ("--warmup", ["--warmup", "2.5"], 2.5),
    "measure_seconds": ("--measure", ["--measure", "12"], 12.0),
    "max_tokens": ("--max-tokens", ["--max-tokens", "9"], 9),
    "temperature": ("--temperature", ["--temperature", "0.7"], 0.7),
    "cache_prompt": ("--cache-prompt", ["--cache-prompt"], True),
    "ignore_eos": ("--ignore-eos", ["--ignore-eos"], True),
    "prompts": ("--prompts", ["--prompts", "code"], "code"),
    "context_tokens": ("--context-tokens", ["--context-tokens", "64"], 64),
    "processes": ("--processes", ["--processes", "3"], 3),  # Locust's own option
    "pin_slots": ("--pin-slots", ["--steps", "4", "--pin-slots"], True),
    "drain_seconds": ("--drain", ["--drain", "12.5"], 12.5),
    "arrival_shape": ("--arrival", ["--rates", "1", "--arrival", "gamma:0.5"], 0.5),
    "sessions": ("--sessions", ["--sessions", "--turns", "2-3", "--think", "constant:1.5",
                                "--system-prompt-tokens", "40"],
                 SessionSettings(turns_min=2, turns_max=3, think="constant", think_seconds=1.5,
                                 system_prompt_tokens=40)),
    "prompt_length": ("--prompt-length", ["--prompt-length", "uniform:10-20"],
                      LengthDistribution(kind="uniform", minimum=10, maximum=20)),
    "output_length": ("--output-length", ["--output-length", "normal:mean=30,sd=5,max=60"],
                      LengthDistribution(kind="normal", mean=30, sd=5, maximum=60)),
    "trace": ("--trace", ["--trace", str(TRACE), "--trace-speed", "2"], trace_source(TRACE, 2.0)),
    "workload_seed": ("--workload-seed", ["--workload-seed", "11"], 11),
    "slo": ("--slo", ["--slo", "ttft_p90=250ms,e2e_p99=4"], {"ttft_p90": 0.25, "e2e_p99": 4.0}),
    "max_error_rate": ("--max-error-rate", ["--max-error-rate", "0.2"], 0.2),
    "read_timeout_seconds": ("--read-timeout", ["--read-timeout", "7.5"], 7.5),
    "timeline": ("--timeline", ["--timeline"], True),
    "outage_seconds": ("--ride-out", ["--ride-out", "4.5"], 4.5),
}
PARSE_AND_SETTLE = """
import json, sys
from locust import argument_parser
import loadtest.locustfile  # the project's options on Locust's parser
from loadtest.locust_options import settings_from

parser = argument_parser.get_parser()
lines = json.loads(sys.argv[1])
print(json.dumps({
    "options": sorted(option for action in parser._actions for option in action.option_strings),
    "settings": [settings_from(parser.parse_args(line)).model_dump(mode="json") for line in lines],
}))
"""


def locust_settings(lines: list[list[str]]) -> tuple[set[str], list[LoadSettings]]:
    """Locust's options, and the settings each command line makes (each checked as a LoadSettings)."""
    done = subprocess.run([sys.executable, "-c", PARSE_AND_SETTLE, json.dumps(lines)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return set(answer["options"]), [LoadSettings.model_validate(settings) for settings in answer["settings"]]


def test_every_load_setting_locust_takes_has_its_option_and_the_options_make_the_settings() -> None:
    assert set(LoadSettings.model_fields) - NOT_LOCUST_OPTIONS == set(WIRING), (
        "a LoadSettings field without its Locust option (or one the wiring names that LoadSettings lacks)")
    options, (defaults, *given) = locust_settings([[]] + [line for _, line, _ in WIRING.values()])
    missing = sorted(option for option, _, _ in WIRING.values() if option not in options)
    assert not missing, f"Locust has no option {missing}"

    assert defaults.user_steps == parse_counts(DEFAULT_USER_STEPS, "--steps") and defaults.rate_steps == []
    for name, field in LoadSettings.model_fields.items():
        if name not in NOT_LOCUST_OPTIONS and field.default is not PydanticUndefined:
            assert getattr(defaults, name) == field.default, f"{WIRING[name][0]}'s default is not LoadSettings' {name}"

    for (name, (option, line, value)), settings in zip(WIRING.items(), given, strict=True):
        assert option in line and getattr(settings, name) == value != getattr(defaults, name), (
            f"{option} ({' '.join(line)}) does not set {name}")


def test_settings_written_as_hand_run_options_read_back_to_the_same_settings() -> None:
    """A sweep's log shows the hand-run options of its load; Locust reads them back to the very settings."""
    base = {"warmup_seconds": 1.5, "measure_seconds": 4.0, "max_tokens": 12}
    loads = [
        LoadSettings(user_steps=[1, 3], measure_seconds=[2.0, 3.5], warmup_seconds=0.5, max_tokens=7,
                     temperature=0.3, cache_prompt=True, ignore_eos=True, prompts="code", context_tokens=64,
                     drain_seconds=2.0, max_error_rate=0.1, read_timeout_seconds=9.0, timeline=True, pin_slots=True),
        LoadSettings(rate_steps=[0.5, 2.25], arrival="gamma", arrival_shape=0.5, arrival_seed=3, processes=2,
                     slo={"ttft_p90": 0.25}, workload_seed=4, **base),
        LoadSettings(user_steps=[2], sessions=SessionSettings(turns_min=2, turns_max=3, think="constant",
                                                              think_seconds=1.5, system_prompt_tokens=40),
                     prompt_length=LengthDistribution(kind="uniform", minimum=10, maximum=20), cache_prompt=True,
                     **base),
        LoadSettings(rate_steps=[trace_rate(trace_source(TRACE, 2.0))], trace=trace_source(TRACE, 2.0), **base),
    ]
    _, read = locust_settings([hand_run_flags(load) for load in loads])
    assert read == loads
