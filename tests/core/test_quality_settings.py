"""The eval's and the ladder's settings: a file's keys with the flags over them, each mistake one line naming
the key as it was written (the flag, or the file and the key), and the file a rig reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import UsageError
from core.quality_settings import QualityEvalSettings, QualityLadderSettings, read_settings, settings_file_text

FLAGS = {"mode": "--mode", "shots": "--shots", "shot_seed": "--shot-seed", "shots_from": "--shots-from",
         "system": "--system", "max_tokens": "--max-tokens"}


def write(tmp_path: Path, text: str, name: str = "eval.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_flags_given_override_the_files_keys_and_its_exemplar_file_is_read_from_its_folder(
        tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    file = write(tmp_path / "sub", 'max_tokens = 96\nrepeat = 2\nmode = "completion"\nshots = 5\n'
                 'shots_from = "exemplars.jsonl"\n')
    asked = read_settings(QualityEvalSettings, file, {"max_tokens": 24}, FLAGS)
    assert (asked.max_tokens, asked.repeat, asked.mode, asked.shots) == (24, 2, "completion", 5)
    assert asked.shots_from == tmp_path / "sub" / "exemplars.jsonl"
    assert read_settings(QualityEvalSettings) == QualityEvalSettings()


@pytest.mark.parametrize(("text", "given", "refusal"), [
    ("max_tokenz = 96\n", {}, "--settings {file}: max_tokenz: unknown key; a settings file holds max_tokens,"),
    ("max_tokens = 0\n", {}, "--settings {file}: max_tokens: Input should be greater than 0"),
    ("shots = 3\n", {}, '--settings {file}: shots: worked examples are asked in completion mode only; set mode = '
                        '"completion"'),
    ('mode = "completion"\n', {"system": "Be brief."}, "--system: a completion prompt has no system message"),
    ("max_tokens = [\n", {}, "--settings {file}: not TOML (name it .json for JSON)"),
])
def test_a_bad_key_is_refused_in_one_line_naming_the_file_and_the_key(tmp_path: Path, text: str, given: dict,
                                                                       refusal: str) -> None:
    file = write(tmp_path, text)
    with pytest.raises(UsageError) as refused:
        read_settings(QualityEvalSettings, file, given, FLAGS)
    assert str(refused.value).startswith(refusal.format(file=file)), str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("given", "refusal"), [
    ({"shots": 3}, "--shots: worked examples are asked in completion mode only; add --mode completion"),
    ({"mode": "base"}, "--mode: must be one of chat, completion, found 'base'"),
    ({"mode": "completion", "shot_seed": 2}, "--shot-seed: no exemplar is drawn with --shots 0"),
])
def test_flags_alone_are_refused_naming_the_flags(given: dict, refusal: str) -> None:
    with pytest.raises(UsageError, match=f"^{refusal}"):
        read_settings(QualityEvalSettings, None, given, FLAGS)


def test_the_ladders_rungs_to_repeat_are_named_once_and_the_file_a_rig_reads_back_is_the_same(
        tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^--repeat-rungs: F16 named twice"):
        read_settings(QualityLadderSettings, None, {"repeat_rungs": ["F16", "F16"]}, {"repeat_rungs": "--repeat-rungs"})
    asked = QualityLadderSettings(repeat_rungs=["F16"], bench=False, server_args=["-t", "1"], mode="completion",
                                  shots=2, shots_from=tmp_path / "x.jsonl")
    handed = write(tmp_path, settings_file_text(asked), "ladder.json")
    assert json.loads(handed.read_text())["server_args"] == ["-t", "1"]
    assert read_settings(QualityLadderSettings, handed) == asked
