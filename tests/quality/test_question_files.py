"""Question and answer files: bad input is one line naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import RunDirError
from core.rundir.quality import AnswerRecord
from core.rundir.quality_files import append_jsonl, read_jsonl, read_questions


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_questions_read_with_gsm8k_answers(tmp_path: Path) -> None:
    file = write(tmp_path / "q.jsonl", '{"id": "a", "question": "1+1?", "answer": "1 + 1 = 2\\n#### 2"}', "",
                 '{"id": "b", "question": "2+2?", "answer": "4"}')
    assert [q.id for q in read_questions(file)] == ["a", "b"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "question": "1+1?"}'], "q.jsonl:1: answer: Field required"),
        (['{"id": "a", "question": "1+1?", "answer": "2"}', '{"id": "b", "answer": "2"}'],
         "q.jsonl:2: question: Field required"),
        (['{"id": "a", "question": "1+1?", "answer": "2", "level": 1}'], "q.jsonl:1: level: unknown key"),
        (['{"id": "a", "question": "1+1?", "answer": "2"}', '{"id": "a", "question": "?", "answer": "3"}'],
         "q.jsonl:2: id 'a' appears twice"),
        (["not json"], "q.jsonl:1: (top level): Invalid JSON"),
        ([""], "q.jsonl: holds no questions"),
    ],
)
def test_a_bad_question_file_is_refused_naming_line_and_field(tmp_path: Path, lines: list[str], message: str) -> None:
    file = write(tmp_path / "q.jsonl", *lines)
    before = file.read_bytes()
    with pytest.raises(RunDirError) as caught:
        read_questions(file)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert file.read_bytes() == before


def test_a_missing_question_file(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no such question file"):
        read_questions(tmp_path / "absent.jsonl")


def answer(question_id: str) -> AnswerRecord:
    return AnswerRecord(question_id=question_id, text="#### 2", extracted="2", expected="2", right=True, seconds=0.1)


def test_a_half_written_last_answer_is_dropped_any_other_bad_line_refused(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    append_jsonl(path, answer("a"))
    append_jsonl(path, answer("b"))
    with open(path, "a") as handle:
        handle.write('{"schema_version": 1, "question_id": "c", "te')  # killed mid-write
    assert [a.question_id for a in read_jsonl(path, AnswerRecord)] == ["a", "b"]
    append_jsonl(path, answer("c"))  # a resumed run writes after the cut, never onto it
    assert [a.question_id for a in read_jsonl(path, AnswerRecord)] == ["a", "b", "c"]
    path.write_text('{"question_id": "x"}\n' + answer("b").model_dump_json() + "\n")
    with pytest.raises(RunDirError, match="answers.jsonl:1"):
        read_jsonl(path, AnswerRecord)


def test_an_eval_folder_is_resumed_only_as_it_was_asked(tmp_path: Path) -> None:
    from core.rundir import ModelInfo
    from core.rundir.quality import EvalManifest, EvalSettings, Question, QuestionSetInfo
    from core.rundir.quality_files import EvalDir
    from quality.eval import prepare_eval_dir

    questions = [Question(id="a", question="1+1?", answer="2")]
    info = QuestionSetInfo(name="q.jsonl", count=1, sha256="ab" * 32)
    model = ModelInfo(name="m.gguf", sha256="cd" * 32, size_bytes=1)
    first = EvalManifest(run_id="r", created_at="2026-12-01T00:00:00+00:00", settings=EvalSettings(), questions=info,
                         model=model)
    folder = EvalDir(tmp_path / "eval")
    prepare_eval_dir(folder, first, questions, tmp_path / "q.jsonl")
    assert prepare_eval_dir(folder, first, questions, tmp_path / "q.jsonl").status == "running"
    other_model = first.model_copy(update={"model": model.model_copy(update={"sha256": "ef" * 32})})
    with pytest.raises(RunDirError, match="resumed with another model"):
        prepare_eval_dir(folder, other_model, questions, tmp_path / "q.jsonl")
    other_settings = first.model_copy(update={"settings": EvalSettings(max_tokens=64)})
    with pytest.raises(RunDirError, match="resumed with other settings"):
        prepare_eval_dir(folder, other_settings, questions, tmp_path / "q.jsonl")
    (folder.path / "answers.jsonl.gz").write_bytes(b"")
    with pytest.raises(RunDirError, match="answers are packed"):
        prepare_eval_dir(folder, first, questions, tmp_path / "q.jsonl")
