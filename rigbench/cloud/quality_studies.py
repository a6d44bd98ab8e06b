"""The loop's answer-quality studies: the same ladder (or eval) on every rig, checked before launch.

A ladder is hours of a rig's time, so everything it will be asked is read here first: the
question file line by line, the rung names against the types llama-quantize has (gguf's list,
so no build is needed here), and the ``--ladder``/``--eval`` settings files (the models of
``rigbench quality ladder|eval --settings``, with their exemplar pool drawn from), so a
mistyped key stops the loop before a rig exists. The settings travel in the loop's record and
reach each rig as a file; what must be the same on every rig (the questions, the rungs, the
folder) is the loop's own and no key of those files.
"""

from __future__ import annotations

from pathlib import Path

import gguf

from core.digest import file_sha256
from core.errors import CloudError, RigbenchError
from core.gpus import find_gpu
from core.instance_types import get_instance_type
from core.lists import parse_choices
from core.quality_settings import (
    AskSettings,
    QualityEvalSettings,
    QualityLadderSettings,
    Settings,
    read_settings,
    settings_file_text,
)
from core.rundir.quality_files import LadderDir, read_questions
from core.whole_files import write_whole
from rigbench.cloud.settings import CloudSettings
from rigbench.prompt_mode import prompt_settings

QUALITY_STUDIES = ("ladder", "eval")
SETTINGS: dict[str, type[AskSettings]] = {"ladder": QualityLadderSettings, "eval": QualityEvalSettings}
WIDE_TYPES = ("F32", "F16", "BF16")

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


def read_checked(kind: type[Settings], file: Path | None, flag: str, questions: Path) -> Settings:
    """A study's settings file read, and its exemplars drawn as the rigs will draw them (the pool read, large
    enough); a mistake is one line naming ``flag``."""
    try:
        asked = read_settings(kind, file, option=flag)
        prompt_settings(asked.mode, asked.shots, asked.shot_seed, asked.shots_from, read_questions(questions),
                        system=asked.system if isinstance(asked, QualityEvalSettings) else None)
    except RigbenchError as error:
        message = str(error)
        raise CloudError(message if message.startswith(flag) else f"{flag}: {message}") from None
    return asked


def check_ladder(questions: Path, rungs: list[str], file: Path | None) -> QualityLadderSettings:
    """The ladder every rig will run, or one line saying what is wrong with it; the top rung is asked twice
    for determinism unless the settings name the rungs to repeat."""
    asked = read_checked(QualityLadderSettings, file, "--ladder", questions)
    named = [("repeat_rungs", name) for name in asked.repeat_rungs] + [("reference", asked.reference)] * bool(
        asked.reference)
    for key, name in named:
        if name not in rungs:
            raise CloudError(f"--ladder {file}: {key}: {name} is not one of the rungs ({', '.join(rungs)})")
    if not asked.repeat_rungs:
        asked = asked.model_copy(update={"repeat_rungs": [rungs[0]]})
    return asked


def check_eval(questions: Path, file: Path | None) -> QualityEvalSettings:
    """The eval every rig will run against its own server, or one line saying what is wrong with it."""
    return read_checked(QualityEvalSettings, file, "--eval", questions)


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


def ladder_seconds(settings: CloudSettings, instance_type: str, model_bytes: int | None) -> float:
    """Every rung quantized, served, benchmarked and asked every question, each reply as long as allowed
    (``max_tokens``): an upper reading, as an estimate that holds ``--max-usd`` should be. A widened top rung
    is read at twice the source's bytes."""
    asked = settings.ladder or QualityLadderSettings()
    questions = read_question_file(Path(settings.questions or ""))
    total = 0.0
    for rung in settings.rungs:
        wide = rung in WIDE_TYPES
        rate = decode_tok_s(instance_type, model_bytes * 2 if wide and model_bytes else model_bytes)
        asked_times = questions * (2 if rung in asked.repeat_rungs else 1)
        total += QUANTIZE_S + RUNG_SERVER_START_S + (RUNG_BENCH_S if asked.bench else 0.0)
        total += asked_times * asked.max_tokens / (rate * asked.concurrency)
    return total


def eval_seconds(settings: CloudSettings, instance_type: str, model_bytes: int | None) -> float:
    """The eval of the served model: every question (times ``repeat``), each reply as long as allowed."""
    asked = settings.eval or QualityEvalSettings()
    questions = read_question_file(Path(settings.questions or "")) * asked.repeat
    return questions * asked.max_tokens / (decode_tok_s(instance_type, model_bytes) * asked.concurrency)


def ladder_name(settings: CloudSettings) -> str:
    """The ladder's folder on every rig (and home, under the rig's runs): named after the question file."""
    return f"ladder-{Path(settings.questions or 'questions').stem}"


def eval_name(settings: CloudSettings) -> str:
    return f"eval-{Path(settings.questions or 'questions').stem}"


def write_settings_file(folder: Path, study: str, settings: CloudSettings) -> Path:
    """The study's settings as the file its provision step reads, written from the loop's record (so a resumed
    loop hands each rig the same)."""
    asked = getattr(settings, study) or SETTINGS[study]()
    path = folder / f"{study}-settings.json"
    write_whole(path, settings_file_text(asked))
    return path


def quality_settings(studies: list[str], questions: Path | None, rungs: str, ladder: Path | None,
                     evaluation: Path | None, with_local: Path | None) -> dict:
    """The loop settings' quality fields, every one checked; empty when no quality study is asked."""
    asked = [study for study in studies if study in QUALITY_STUDIES]
    if not asked:
        given = [flag for flag, value in (("--questions", questions), ("--ladder", ladder), ("--eval", evaluation),
                                          ("--with-local", with_local)) if value]
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
        names = parse_rungs(rungs)
        fields |= {"rungs": names, "ladder": check_ladder(questions, names, ladder)}
    elif ladder or with_local:
        raise CloudError(f"{'--ladder' if ladder else '--with-local'}: only the ladder study uses it; "
                         "add ladder to --study")
    if "eval" in asked:
        fields["eval"] = check_eval(questions, evaluation)
    elif evaluation:
        raise CloudError("--eval: only the eval study uses it; add eval to --study")
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
