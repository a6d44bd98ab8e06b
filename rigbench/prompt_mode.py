"""How an eval asks its questions: ``--mode``, ``--shots``, ``--shot-seed`` and ``--shots-from``.

One set of options for every command that asks questions (``quality eval``, ``quality ladder``,
``study ladder``), checked before a folder is made: worked examples belong to completion mode
(a chat model is asked through its own template, where exemplars would be a second, unrecorded
format), a pool too small for ``--shots`` is refused, and so is a ``--shots-from`` file with a
bad line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import typer

from core.errors import RunDirError, UsageError
from core.rundir.quality import PromptMode, Question
from quality.fewshot import STOP, few_shot_prompt, file_pool, generator_pool

MODES: tuple[str, ...] = get_args(PromptMode)


def mode_option() -> Any:
    return typer.Option(
        "chat", "--mode", help="chat (the server's chat template) or completion (a few-shot prompt, for base models)"
    )


def shots_option() -> Any:
    return typer.Option(0, "--shots", min=0, help="worked examples before each question (--mode completion)")


def shot_seed_option() -> Any:
    return typer.Option(0, "--shot-seed", help="seed of the exemplars' draw: same seed, same prompt")


def shots_from_option() -> Any:
    return typer.Option(
        None, "--shots-from", help="question file to draw exemplars from (default: the project's generator)"
    )


def prompt_settings(
    mode: str,
    shots: int,
    shot_seed: int,
    shots_from: Path | None,
    graded: list[Question],
    *,
    system: str | None = None,
) -> dict[str, Any]:
    """The :class:`EvalSettings` fields of the chosen prompt mode. Chat adds none, so a chat run
    records what it always did and a folder asked before these options resumes unchanged."""
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, found {mode!r}")
    if mode == "chat":
        used = {"--shots": shots > 0, "--shot-seed": shot_seed != 0, "--shots-from": shots_from is not None}
        given = [option for option, set_here in used.items() if set_here]
        if given:
            raise UsageError(
                f"{given[0]}: worked examples are asked in completion mode only; add --mode completion "
                "(a chat model is asked through its own template)"
            )
        return {}
    if system is not None:
        raise UsageError("--system: a completion prompt has no system message; leave it out with --mode completion")
    if shots == 0 and (shots_from is not None or shot_seed != 0):
        raise UsageError(f"{'--shots-from' if shots_from else '--shot-seed'}: no exemplar is drawn with --shots 0; "
                         "give --shots K")
    try:
        pool = file_pool(shots_from) if shots_from is not None else generator_pool()
    except RunDirError as error:
        raise UsageError(f"--shots-from: {error}") from None
    return {
        "mode": "completion",
        "shots": shots,
        "shot_seed": shot_seed,
        "stop": list(STOP),
        "prompt": few_shot_prompt(pool, graded, shots, shot_seed),
    }
