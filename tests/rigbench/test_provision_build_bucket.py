"""The build step's S3 cache bucket: the option, else the stack's output, else none; the manifest is returned."""

from __future__ import annotations

import pytest

import rigbench.provision_steps as steps
from provision.rig_paths import RigPaths
from rigbench.provision_steps import STEPS, Rig, build, up


@pytest.fixture
def calls(monkeypatch) -> list[dict]:
    """What the build step was called with, instead of running it on a rig."""
    seen: list[dict] = []

    def fake_build(c, profile, paths, **kwargs):
        seen.append(kwargs)
        return "the manifest"

    monkeypatch.setattr(steps, "build_step", fake_build)
    return seen


def bucket_of(call: dict) -> str | None:
    store = call["cache_store"]
    return None if store is None else store.bucket


def rig(outputs: dict | None) -> Rig:
    return Rig(c=None, paths=RigPaths(), profile_name="tiny", stack_outputs=outputs)


def test_the_option_is_in_the_step_table():
    [step] = [s for s in STEPS if s.name == "build"]
    option = {o.name: o for o in step.options}["cache_bucket"]
    assert option.default == "" and "buildCacheBucket" in option.help and option.flag == "--cache-bucket"


@pytest.mark.parametrize(("outputs", "given", "expected"), [
    (None, "", None),
    ({"publicIp": "198.51.100.23"}, "", None),
    ({"buildCacheBucket": "stack-builds"}, "", "stack-builds"),
    ({"buildCacheBucket": "stack-builds"}, "other-builds", "other-builds"),
    (None, "other-builds", "other-builds"),
])
def test_the_bucket_is_the_option_else_the_stack_output(calls, monkeypatch, outputs, given, expected):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert build(rig(outputs), cache="", backend="auto", cache_bucket=given) == "the manifest"
    assert bucket_of(calls[0]) == expected


def test_up_builds_with_the_stack_bucket(calls, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(steps, "toolkit", lambda *args, **kwargs: None)
    monkeypatch.setattr(steps, "download", lambda *args, **kwargs: None)
    monkeypatch.setattr(steps, "serve_step", lambda *args, **kwargs: None)
    up(rig({"buildCacheBucket": "stack-builds"}), server_port=8080, cache="")
    assert bucket_of(calls[0]) == "stack-builds"
