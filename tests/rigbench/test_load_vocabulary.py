"""One settings model: every command that takes a sweep's load names and types it as LoadSettings does.

``core.rundir.LoadSettings`` is the load a run records; ``core.lists.LOAD_FLAGS`` the option that fills
each of its fields. The local rig's options, the cloud loop's settings and the commands' options are held
to both here, so a field renamed or retyped in one place and not the others fails.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from core.lists import DEFAULT_USER_STEPS, LOAD_FLAGS, parse_counts
from core.rundir import LoadSettings
from rigbench.cli import load_command
from rigbench.cloud.settings import CloudSettings
from rigbench.local_rig import LocalRigOptions

FROM_THE_PROFILE_OR_THE_RUN = {"temperature", "cache_prompt", "arm"}
# what a command leaves out, and why
NOT_TAKEN = {
    "sweep": set(),
    "local": {"--ignore-eos"},  # the local rig serves the profile as it is, end of sequence included
}
# local's options that hold a field under another type: None means "choose for me"
CHOOSE_FOR_ME = {"max_tokens": "the profile's", "processes": "as many as the demand needs"}


def test_every_field_is_filled_by_an_option_or_by_the_profile() -> None:
    assert set(LoadSettings.model_fields) == set(LOAD_FLAGS) | FROM_THE_PROFILE_OR_THE_RUN


def option_flags(command) -> set[str]:
    return {flag for param in command.params for flag in (*param.opts, *getattr(param, "secondary_opts", []))}


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_a_sweeping_command_takes_every_load_option(name: str) -> None:
    missing = set(LOAD_FLAGS.values()) - option_flags(load_command(name)) - NOT_TAKEN[name]
    assert not missing, f"rigbench {name} lacks {sorted(missing)}"


def test_the_cloud_loop_takes_the_sweep_options_it_records() -> None:
    run = load_command("cloud").commands["run"]
    recorded = set(CloudSettings.model_fields) & set(LOAD_FLAGS)
    assert recorded == {"user_steps", "warmup_seconds", "measure_seconds"}
    assert {LOAD_FLAGS[field] for field in recorded} <= option_flags(run)


def load_type(field: str) -> object:
    return typing.get_type_hints(LoadSettings)[field]


def test_the_cloud_settings_name_and_type_the_load_as_load_settings_does() -> None:
    hints = typing.get_type_hints(CloudSettings)
    for field in set(hints) & set(LoadSettings.model_fields):
        assert hints[field] == load_type(field), field
    assert CloudSettings(stacks=["a"], profile="tiny", studies=["sweep"]).user_steps == parse_counts(
        DEFAULT_USER_STEPS, "--steps")


def test_the_local_rig_options_name_and_type_the_load_as_load_settings_does() -> None:
    fields = {field.name: field for field in dataclasses.fields(LocalRigOptions)}
    hints = typing.get_type_hints(LocalRigOptions)
    shared = set(fields) & set(LoadSettings.model_fields)
    assert shared >= set(LOAD_FLAGS) - {"ignore_eos"}
    for name in shared:
        expected = load_type(name)
        if name in CHOOSE_FOR_ME:
            expected = expected | None
        assert hints[name] == expected, name
    assert LocalRigOptions().user_steps == parse_counts(DEFAULT_USER_STEPS, "--steps")
