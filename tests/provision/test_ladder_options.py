"""A ladder's ``--shots-from`` file is a file here: the step finds it among the options and points the
option at the copy it puts on the rig, whichever way the option was written."""

from __future__ import annotations

from pathlib import Path

from provision.quality import shots_from_file, shots_from_on_rig

REMOTE = "/work/results/questions/shots.jsonl"


def test_the_exemplar_file_is_found_and_pointed_at_the_rig_copy() -> None:
    spaced = ["--mode", "completion", "--shots-from", "local/shots.jsonl", "--shots", "5"]
    joined = ["--mode", "completion", "--shots-from=local/shots.jsonl", "--shots", "5"]
    for options in (spaced, joined):
        assert shots_from_file(options) == Path("local/shots.jsonl")
        assert shots_from_on_rig(options, REMOTE) == ["--mode", "completion", "--shots-from", REMOTE, "--shots", "5"]
    assert shots_from_file(["--mode", "completion", "--shots", "5"]) is None
    assert shots_from_on_rig(["--no-bench"], REMOTE) == ["--no-bench"]
