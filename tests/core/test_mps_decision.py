"""When replicas run under CUDA MPS: the decision from a profile's setting, the GPUs and the control program."""

from __future__ import annotations

import pytest

from core.errors import ProfileError, UsageError
from core.mps import decide_mps, find_control_program, parse_mps, shared_gpus
from core.profile import RigProfile

CONTROL = "/usr/local/nvidia/bin/nvidia-cuda-mps-control"


def test_auto_runs_mps_only_where_two_replicas_share_a_gpu_and_the_control_program_is_found():
    assert decide_mps("auto", [0, 0, 0, 0], CONTROL).run
    assert decide_mps("auto", [0, 1, 0, 1], CONTROL).reason == '[server] mps = "auto": replicas share GPU 0, 1'
    one_each = decide_mps("auto", [0, 1, 2, 3], CONTROL)
    assert not one_each.run and "one per GPU" in one_each.reason
    assert not decide_mps("auto", [None], CONTROL).run  # one server
    assert not decide_mps("auto", [None, None], CONTROL).run  # replicas on no GPU (the CPU build)
    missing = decide_mps("auto", [0, 0], None)
    assert not missing.run and "not found, so they take turns on it" in missing.reason


def test_true_runs_it_wherever_asked_and_is_refused_in_one_line_without_the_control_program():
    assert decide_mps(True, [None], CONTROL).run
    assert decide_mps(True, [0, 1], CONTROL).run
    with pytest.raises(ProfileError, match=r"^--mps on, but nvidia-cuda-mps-control was found neither on the "
                                           r"PATH nor in /usr/local/nvidia/bin or /usr/bin;"):
        decide_mps(True, [0, 0], None, "--mps")
    with pytest.raises(ProfileError, match=r"^profile 'x': \[server\] mps = true, but"):
        decide_mps(True, [None], None, "profile 'x': [server] mps")
    assert not decide_mps(False, [0, 0, 0], CONTROL).run


def test_shared_gpus_and_the_words_the_option_takes():
    assert shared_gpus([0, 1, 1, None, None, 2, 2, 2]) == [1, 2]
    assert [parse_mps(word) for word in ("auto", "on", "OFF")] == ["auto", True, False]
    with pytest.raises(UsageError, match="--mps 'yes': give auto, on or off"):
        parse_mps("yes")


def test_a_profile_says_mps_as_auto_true_or_false_and_nothing_else():
    base = {"name": "p", "model": {"synthetic": {}}}
    assert RigProfile.model_validate(base).server.mps == "auto"
    assert RigProfile.model_validate({**base, "server": {"mps": True}}).server.mps is True
    with pytest.raises(ValueError, match="mps"):
        RigProfile.model_validate({**base, "server": {"mps": "sometimes"}})


def test_the_control_program_is_found_on_the_path_before_the_drivers_folders(tmp_path):
    program = tmp_path / "nvidia-cuda-mps-control"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert find_control_program(str(tmp_path)) == str(program)
