"""The loop's answer-quality studies: the same ladder (or eval) on every rig, checked before launch.

A ladder is hours of a rig's time, so everything it will be asked is read here first: the
question file line by line, the rung names against the types llama-quantize has (gguf's list,
so no build is needed here), and ``--ladder-args``/``--eval-args`` parsed by the very commands
the rigs will run (the commands' own parser, nothing executed), so an unknown or mistyped option stops the
loop before a rig exists. The loop owns the options that must be the same on every rig (the
questions, the rungs, the folder) and refuses them inside the free-form arguments.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import gguf
import typer

from core.digest import file_sha256
from core.errors import CloudError, RigbenchError
from core.gpus import find_gpu
from core.instance_types import get_instance_type
from core.lists import parse_choices
from core.rundir.quality_files import LadderDir, read_questions
from provision.quality import shots_from_file, shots_from_on_rig
from rigbench.cloud.settings import CloudSettings
from rigbench.commands import quality as quality_commands
from rigbench.prompt_mode import prompt_settings

QUALITY_STUDIES = ("ladder", "eval")
WIDE_TYPES = ("F32", "F16", "BF16")
# What the loop sets itself, the same on every rig: given inside the free-form arguments they are refused.
LOOP_OWNED = {"ladder": ("--questions", "--out", "--rungs", "--file", "--backend"),
              "eval": ("--questions", "--out", "--url", "--model-file", "--profile", "--backend", "--arm",
                       "--server-arg")}

# The estimate's reading of a ladder's time on a type. A small model's decode at one request is bound by
# kernel launches, not by the card's bandwidth: the real Gemma 3 270M decodes 942 tok/s (tg128) on an H200
# whose bandwidth alone would allow twenty times that, so the rate is the bandwidth-bound one at half the
# datasheet peak, capped there. A type whose GPU the table lacks is read as this project's 2-core CPU runs
# (20-28 tok/s for the same model).
DECODE_CAP_TOK_S = 1000.0
BANDWIDTH_EFFICIENCY = 0.5
UNKNOWN_DECODE_TOK_S = 20.0
QUANTIZE_S = 30.0        # llama-quantize of one rung of a small model
RUNG_SERVER_START_S = 20.0
RUNG_BENCH_S = 60.0      # llama-bench pp512/tg128, five repetitions


@dataclass(frozen=True)
class LadderRequest:
    """One loop's ladder, read and checked: what every rig runs."""

    rungs: list[str]
    args: list[str]          # the free-form options, with the loop's determinism rung added
    max_tokens: int
    concurrency: int
    repeat_rungs: list[str]
    bench: bool
    questions: int


def _command(name: str):
    return typer.main.get_command(quality_commands.app).commands[name]  # type: ignore[attr-defined]


def parse_options(name: str, argv: list[str], flag: str) -> dict:
    """The options as the rig's ``rigbench quality NAME`` will read them; a bad one is one line naming
    ``flag`` (nothing runs: click parses and converts, the command's body is not called)."""
    try:
        with _command(name).make_context(f"rigbench quality {name}", argv, resilient_parsing=False) as context:
            return dict(context.params)
    except typer.TyperException as error:  # click's parse errors (typer carries its own click)
        raise CloudError(f"{flag}: {error.format_message()}") from None  # type: ignore[attr-defined]


def split_args(text: str, flag: str, study: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError as error:
        raise CloudError(f"{flag}: cannot split {text!r} ({error})") from None
    aliases = {alias for param in _command(study).params if set(getattr(param, "opts", [])) & set(LOOP_OWNED[study])
               for alias in param.opts}  # -p is --profile too
    owned = [word.split("=")[0] for word in argv if word.split("=")[0] in aliases]
    if owned:
        raise CloudError(f"{flag}: {owned[0]} is set by the loop, the same on every rig (the questions and rungs "
                         "through `rigbench cloud run --questions/--rungs`, the rig's own server and folder); "
                         "leave it out")
    return argv


def known_rung_types() -> list[str]:
    names = [name.removeprefix("MOSTLY_") for name in gguf.LlamaFileType.__members__ if name != "GUESSED"]
    return ["F32" if name == "ALL_F32" else name for name in names]


def parse_rungs(text: str) -> list[str]:
    try:
        return parse_choices(text, "--rungs", tuple(known_rung_types()), example="F16,Q8_0,Q4_K_M")
    except RigbenchError as error:
        raise CloudError(str(error)) from None


def read_question_file(path: Path) -> int:
    if not path.is_file():
        raise CloudError(f"--questions: {path} is not a file here")
    try:
        return len(read_questions(path))
    except RigbenchError as error:
        raise CloudError(f"--questions: {error}") from None


def check_ladder(questions: Path, rungs_text: str, ladder_args: str) -> LadderRequest:
    """The ladder every rig will run, or one line saying what is wrong with it."""
    count = read_question_file(questions)
    rungs = parse_rungs(rungs_text)
    argv = split_args(ladder_args, "--ladder-args", "ladder")
    params = parse_options("ladder", ["SOURCE", "--questions", str(questions), "--out", "LADDER", "--rungs",
                                      rungs_text, *argv], "--ladder-args")
    graded = read_questions(questions)
    try:
        prompt_settings(params["mode"], params["shots"], params["shot_seed"], params["shots_from"], graded)
    except RigbenchError as error:
        raise CloudError(f"--ladder-args: {error}") from None
    repeat = [name for name in (params["repeat_rungs"] or "").split(",") if name]
    missing = [name for name in repeat if name not in rungs]
    if missing:
        raise CloudError(f"--ladder-args --repeat-rungs: {missing[0]} is not one of the rungs ({', '.join(rungs)})")
    if not repeat:  # determinism is checked on a rung per rig: the top one, unless the user named others
        repeat = [rungs[0]]
        argv = [*argv, "--repeat-rungs", rungs[0]]
    return LadderRequest(rungs=rungs, args=argv, max_tokens=params["max_tokens"],
                         concurrency=params["concurrency"], repeat_rungs=repeat, bench=not params["no_bench"],
                         questions=count)


def check_eval(questions: Path, eval_args: str) -> list[str]:
    """The eval's free-form options, parsed as ``rigbench quality eval`` on the rig will read them."""
    read_question_file(questions)
    argv = split_args(eval_args, "--eval-args", "eval")
    params = parse_options("eval", ["--questions", str(questions), "--out", "EVAL", "--url",
                                    "http://127.0.0.1:8080", *argv], "--eval-args")
    try:
        prompt_settings(params["mode"], params["shots"], params["shot_seed"], params["shots_from"],
                        read_questions(questions), system=params["system"])
    except RigbenchError as error:
        raise CloudError(f"--eval-args: {error}") from None
    return argv


def check_local_ladder(folder: Path, questions: Path) -> None:
    """``--with-local``: a ladder folder of this machine that asked the same question file."""
    try:
        manifest = LadderDir(folder).read_manifest()
    except RigbenchError as error:
        raise CloudError(f"--with-local: {folder} is not a ladder folder ({error})") from None
    digest = file_sha256(questions)
    if manifest.questions.sha256 != digest:
        raise CloudError(f"--with-local: {folder} asked {manifest.questions.name} (sha256 "
                         f"{manifest.questions.sha256[:12]}), the loop asks {questions.name} ({digest[:12]}); a grid "
                         "compares one question set")


def decode_tok_s(instance_type: str, model_bytes: int | None) -> float:
    """The estimate's decode rate of one request on the type (see the constants above)."""
    gpu = find_gpu(get_instance_type(instance_type).gpu_name)
    if gpu is None or not model_bytes:
        return UNKNOWN_DECODE_TOK_S
    return min(DECODE_CAP_TOK_S, BANDWIDTH_EFFICIENCY * gpu.memory_bandwidth_gb_s * 1e9 / model_bytes)


def ladder_seconds(request: LadderRequest, instance_type: str, model_bytes: int | None) -> float:
    """Every rung quantized, served, benchmarked and asked every question, each reply as long as allowed
    (``--max-tokens``): an upper reading, as an estimate that holds ``--max-usd`` should be. A widened top rung
    is read at twice the source's bytes."""
    total = 0.0
    for rung in request.rungs:
        wide = rung in WIDE_TYPES
        rate = decode_tok_s(instance_type, model_bytes * 2 if wide and model_bytes else model_bytes)
        asked = request.questions * (2 if rung in request.repeat_rungs else 1)
        total += QUANTIZE_S + RUNG_SERVER_START_S + (RUNG_BENCH_S if request.bench else 0.0)
        total += asked * request.max_tokens / (rate * request.concurrency)
    return total


def eval_seconds(settings: CloudSettings, instance_type: str, model_bytes: int | None) -> float:
    """The eval of the served model: every question (times ``--repeat``), each reply as long as allowed."""
    questions = Path(settings.questions or "")
    params = parse_options("eval", ["--questions", str(questions), "--out", "EVAL", "--url", "http://127.0.0.1:8080",
                                    *settings.eval_args], "--eval-args")
    asked = read_question_file(questions) * params["repeat"]
    return asked * params["max_tokens"] / (decode_tok_s(instance_type, model_bytes) * params["concurrency"])


def ladder_name(settings: CloudSettings) -> str:
    """The ladder's folder on every rig (and home, under the rig's runs): named after the question file."""
    return f"ladder-{Path(settings.questions or 'questions').stem}"


def eval_name(settings: CloudSettings) -> str:
    return f"eval-{Path(settings.questions or 'questions').stem}"


def absolute_shots_from(argv: list[str]) -> list[str]:
    """``--shots-from FILE`` made absolute: the rig's step runs from the project folder, not from here."""
    found = shots_from_file(argv)
    return argv if found is None else shots_from_on_rig(argv, str(found.resolve()))


def quality_settings(studies: list[str], questions: Path | None, rungs: str, ladder_args: str, eval_args: str,
                     with_local: Path | None) -> dict:
    """The loop settings' quality fields, every one checked; empty when no quality study is asked."""
    asked = [study for study in studies if study in QUALITY_STUDIES]
    if not asked:
        given = [flag for flag, value in (("--questions", questions), ("--ladder-args", ladder_args),
                                          ("--eval-args", eval_args), ("--with-local", with_local)) if value]
        if given:
            raise CloudError(f"{given[0]}: only the ladder and eval studies use it; add them to --study "
                             "(e.g. --study sweep,ladder)")
        return {}
    if questions is None:
        raise CloudError(f"--questions: the {asked[0]} study asks a question file's questions on every rig; give one "
                         "(rigbench quality questions generate --out questions.jsonl)")
    read_question_file(questions)
    fields: dict = {"questions": str(questions.resolve()), "questions_sha256": file_sha256(questions)}
    if "ladder" in asked:
        request = check_ladder(questions, rungs, ladder_args)
        fields |= {"rungs": request.rungs, "ladder_args": absolute_shots_from(request.args)}
    elif ladder_args or with_local:
        raise CloudError(f"{'--ladder-args' if ladder_args else '--with-local'}: only the ladder study uses it; "
                         "add ladder to --study")
    if "eval" in asked:
        fields["eval_args"] = absolute_shots_from(check_eval(questions, eval_args))
    elif eval_args:
        raise CloudError("--eval-args: only the eval study uses it; add eval to --study")
    if with_local is not None:
        check_local_ladder(with_local, questions)
        fields["with_local"] = str(with_local.resolve())
    return fields


def check_unchanged(settings_questions: str | None, digest: str | None) -> None:
    """A resumed loop asks the file the first one asked, byte for byte."""
    if settings_questions is None:
        return
    path = Path(settings_questions)
    if not path.is_file() or file_sha256(path) != digest:
        raise CloudError(f"--resume: {path} is gone or changed since the loop began (sha256 then "
                         f"{(digest or '')[:12]}); the rigs' answers would not be comparable: put it back")
