"""What ``rigbench quality eval`` and ``rigbench quality ladder`` are asked to do: one model each.

A command builds its model once — a ``--settings`` file's fields (TOML or JSON), the flags given
on the command line over them, the model's defaults where neither says — and runs from it. The
cloud loop and the provision steps hand the same model to a rig as a file, which the rig's command
reads back with ``--settings``: the settings are checked here, once, and never parsed again from
words. What says where a run happens (the question file, the server, the folder, the rungs, the
build) is not a setting: the command and the loop own it.

Every mistake is one line naming the key, as the user wrote it: ``--shots`` for a flag,
``FILE: shots`` for a key of the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from core.errors import UsageError
from core.rundir.quality import PromptMode
from core.strict import Strict
from core.table_file import read_table

MODES: tuple[str, ...] = get_args(PromptMode)


def _written(info: ValidationInfo, key: str, value: object) -> str:
    """``key`` set to ``value`` where the user writes it: ``--mode completion`` on a command line, ``mode =
    "completion"`` in a file (the validation context's ``flags`` names the flags of a command line)."""
    flag = ((info.context or {}).get("flags") or {}).get(key)
    return f"{flag} {value}" if flag else f"{key} = {json.dumps(value)}"


def _set(info: ValidationInfo, key: str, value: object) -> str:
    """``add --mode completion``, or ``set mode = "completion"``."""
    written = _written(info, key, value)
    return f"{'set' if written.startswith(key) else 'add'} {written}"


def _completion_only(value: object, unset: object, info: ValidationInfo, key: str) -> None:
    """Worked examples belong to completion mode (a chat model is asked through its own template), and
    are drawn only when there are some to draw."""
    if value == unset or "mode" not in info.data:
        return
    if info.data["mode"] == "chat":
        raise ValueError(f"worked examples are asked in completion mode only; {_set(info, 'mode', 'completion')} "
                         "(a chat model is asked through its own template)")
    if key != "shots" and info.data.get("shots") == 0:
        raise ValueError(f"no exemplar is drawn with {_written(info, 'shots', 0)}; give a number of shots")


class AskSettings(Strict):
    """How every question is asked: the same for an eval and for each rung of a ladder."""

    max_tokens: int = Field(1024, gt=0, description="token limit of each reply")
    concurrency: int = Field(1, gt=0, description="requests in flight (batching can change answers)")
    seed: int = Field(0, description="sampling seed sent with every request")
    mode: PromptMode = Field("chat", description="chat (the server's chat template) or completion (a few-shot "
                             "prompt, for base models)")
    shots: int = Field(0, ge=0, description="worked examples before each question (completion mode)")
    shot_seed: int = Field(0, description="seed of the exemplars' draw: same seed, same prompt")
    shots_from: Path | None = Field(None, description="question file the exemplars are drawn from (default: the "
                                    "project's generator); in a file, relative to the file's folder")

    @field_validator("mode", mode="before")
    @classmethod
    def _known_mode(cls, value: object) -> object:
        if value not in MODES:
            raise ValueError(f"must be one of {', '.join(MODES)}, found {value!r}")
        return value

    @field_validator("shots")
    @classmethod
    def _shots(cls, value: int, info: ValidationInfo) -> int:
        _completion_only(value, 0, info, "shots")
        return value

    @field_validator("shot_seed")
    @classmethod
    def _shot_seed(cls, value: int, info: ValidationInfo) -> int:
        _completion_only(value, 0, info, "shot_seed")
        return value

    @field_validator("shots_from")
    @classmethod
    def _shots_from(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        _completion_only(value, None, info, "shots_from")
        return value


class QualityEvalSettings(AskSettings):
    """``rigbench quality eval``: how the served model is asked (the server and folder are the command's)."""

    repeat: int = Field(1, gt=0, description="ask each question this many times (2: determinism)")
    system: str | None = Field(None, description="a system prompt before each question (chat mode)")

    @field_validator("system")
    @classmethod
    def _system(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("mode") == "completion":
            raise ValueError(f"a completion prompt has no system message; leave it out with "
                             f"{_written(info, 'mode', 'completion')}")
        return value


class QualityLadderSettings(AskSettings):
    """``rigbench quality ladder``: how each rung is asked, benchmarked and reported (the source, the rungs,
    the question file and the folder are the command's)."""

    reference: str | None = Field(None, min_length=1, description="rung the others are compared with (default: "
                                  "the first)")
    repeat_rungs: list[str] = Field(default_factory=list, description="rungs asked twice for determinism")
    bench: bool = Field(True, description="llama-bench pp512/tg128 per rung")
    within: int = Field(2, ge=0, description="the report names the fastest rung within N answers")
    server_args: list[str] = Field(default_factory=list, description="llama-server flags replacing the default "
                                   "ones, one word each, e.g. [\"-t\", \"1\"]")

    @field_validator("repeat_rungs")
    @classmethod
    def _distinct_rungs(cls, value: list[str]) -> list[str]:
        if any(not name.strip() for name in value):
            raise ValueError("a rung name is empty; expected names such as F16, Q4_K_M")
        doubled = sorted({name for name in value if value.count(name) > 1})
        if doubled:
            raise ValueError(f"{', '.join(doubled)} named twice")
        return value


Settings = TypeVar("Settings", bound=AskSettings)


def read_settings_file(path: Path, option: str = "--settings") -> dict[str, Any]:
    """A settings file's fields as written (checked with the flags later), ``shots_from`` read from the file's
    folder and made absolute (the file can be handed on); a file that cannot be read is one line naming it."""
    fields = read_table(path, option, "settings")
    if isinstance(fields.get("shots_from"), str):
        fields["shots_from"] = str((path.parent / fields["shots_from"]).resolve())
    return fields


def _problem(error: ValidationError, kind: type[Settings], file: Path | None, option: str,
             given: Mapping[str, Any], flags: Mapping[str, str]) -> str:
    """The first problem, one line: where the key was written (its flag, or the file and the key) and why."""
    problem = error.errors()[0]
    key = str(problem["loc"][0]) if problem["loc"] else ""
    message = problem["msg"].removeprefix("Value error, ")
    if problem["type"] == "extra_forbidden":
        message = f"unknown key; a settings file holds {', '.join(kind.model_fields)}"
    if key in given and key in flags:
        return f"{flags[key]}: {message}"
    return f"{option} {file}: {key}: {message}" if file is not None else f"{flags.get(key, key)}: {message}"


def read_settings(kind: type[Settings], file: Path | None = None, given: Mapping[str, Any] | None = None,
                     flags: Mapping[str, str] | None = None, *, option: str = "--settings") -> Settings:
    """The settings ``file`` (given with ``option``) and the flags ``given`` over its fields describe; ``flags``
    names each key's flag, so a mistake is said the way it was written."""
    given, flags = dict(given or {}), dict(flags or {})
    fields = {**(read_settings_file(file, option) if file is not None else {}), **given}
    try:
        return kind.model_validate(fields, context={"flags": flags if file is None else {}})
    except ValidationError as error:
        raise UsageError(_problem(error, kind, file, option, given, flags)) from None


def settings_file_text(settings: AskSettings) -> str:
    """The settings as a file (JSON) the rig's command reads back with ``--settings``."""
    return settings.model_dump_json(indent=1) + "\n"
