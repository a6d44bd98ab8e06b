"""Question files, eval folders and ladder folders on disk: read strictly, write atomically.

A question file is JSONL of ``id``, ``question``, ``answer``; a bad line is refused naming the
file, the line and the field, before any request is sent. Answer files are append-only and
read back line by line, so an eval stopped half way keeps every graded answer.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from core.digest import file_sha256
from core.errors import RunDirError
from core.rundir.files import write_json_atomic
from core.rundir.quality import AnswerRecord, EvalManifest, LadderManifest, Question, RepeatMismatch
from core.validation import describe_validation_error

EVAL_MANIFEST = "eval.json"
LADDER_MANIFEST = "ladder.json"
QUESTIONS = "questions.jsonl"
ANSWERS = "answers.jsonl"
REPEATS = "repeats.jsonl"

Model = TypeVar("Model", bound=BaseModel)


def read_questions(path: Path) -> list[Question]:
    """Every question of a JSONL file; the first bad line is one error naming file, line and field."""
    if not path.is_file():
        raise RunDirError(f"{path}: no such question file")
    questions: list[Question] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                question = Question.model_validate_json(line)
            except ValidationError as error:
                raise RunDirError(describe_validation_error(error, where)) from None
            if question.id in seen:
                raise RunDirError(f"{where}: id {question.id!r} appears twice; every question needs its own id")
            seen.add(question.id)
            questions.append(question)
    if not questions:
        raise RunDirError(f"{path}: holds no questions")
    return questions


def source_path(path: Path) -> Path:
    """The sidecar that says where a question file came from (``FILE.source``)."""
    return path.with_name(path.name + ".source")


def question_source(path: Path) -> str | None:
    sidecar = source_path(path)
    return sidecar.read_text(encoding="utf-8").strip() if sidecar.is_file() else None


def write_question_file(path: Path, questions: list[Question], source: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, questions)
    write_json_atomic(source_path(path), source + "\n")


def questions_sha256(path: Path) -> str:
    return file_sha256(path)


def write_jsonl(path: Path, items: Iterable[BaseModel]) -> None:
    lines = "".join(item.model_dump_json() + "\n" for item in items)
    write_json_atomic(path, lines)


def drop_partial_line(path: Path) -> None:
    """Cut a half-written last line (a killed run) so the next line starts clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(-1, 2)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        handle.truncate(handle.read().rfind(b"\n") + 1)


def append_jsonl(path: Path, item: BaseModel) -> None:
    drop_partial_line(path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(item.model_dump_json() + "\n")
        handle.flush()


def read_jsonl(path: Path, model: type[Model]) -> list[Model]:
    """Each line as ``model`` (from ``path`` or its committed ``.gz``); a half-written last line
    (a killed run) is dropped, any other bad line refused."""
    packed = path.with_name(path.name + ".gz")
    if path.exists():
        text = path.read_text(encoding="utf-8")
    elif packed.exists():
        text = gzip.decompress(packed.read_bytes()).decode("utf-8")
        path = packed
    else:
        return []
    items: list[Model] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(model.model_validate_json(line))
        except ValidationError as error:
            if number == len(lines) and not line.endswith("}"):
                break
            raise RunDirError(describe_validation_error(error, f"{path}:{number}")) from None
    return items


def _read_manifest(path: Path, model: type[Model]) -> Model:
    if not path.is_file():
        raise RunDirError(f"{path.parent}: no {path.name}; not a rigbench {path.stem} folder")
    try:
        return model.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as error:
        raise RunDirError(f"{path}: not valid JSON ({error})") from None
    except ValidationError as error:
        raise RunDirError(describe_validation_error(error, path)) from None


class EvalDir:
    """One eval run's folder."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def manifest_path(self) -> Path:
        return self.path / EVAL_MANIFEST

    def read_manifest(self) -> EvalManifest:
        return _read_manifest(self.manifest_path, EvalManifest)

    def write_manifest(self, manifest: EvalManifest) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.manifest_path, manifest.model_dump_json(indent=2) + "\n")

    def questions(self) -> list[Question]:
        return read_questions(self.path / QUESTIONS)

    def answers(self) -> list[AnswerRecord]:
        return read_jsonl(self.path / ANSWERS, AnswerRecord)

    def add_answer(self, record: AnswerRecord) -> None:
        append_jsonl(self.path / ANSWERS, record)

    def mismatches(self) -> list[RepeatMismatch]:
        return read_jsonl(self.path / REPEATS, RepeatMismatch)


class LadderDir:
    """One ladder's folder: its manifest and an eval folder per rung."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def manifest_path(self) -> Path:
        return self.path / LADDER_MANIFEST

    def read_manifest(self) -> LadderManifest:
        return _read_manifest(self.manifest_path, LadderManifest)

    def write_manifest(self, manifest: LadderManifest) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.manifest_path, manifest.model_dump_json(indent=2) + "\n")

    def rung_eval(self, rung: str) -> EvalDir:
        return EvalDir(self.path / "rungs" / rung)
