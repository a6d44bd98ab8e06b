"""Grade recorded replies again with the current grader, without asking the server again.

Why: the reply text is the measurement; the extracted answer and the grade are a reading of
it. When the reading improves (a Markdown ``####`` heading is no longer taken for an answer),
every committed eval can be read again and say how many grades moved, instead of being
re-run or, worse, left graded by rules the documentation no longer describes.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from core.rundir.files import write_json_atomic
from core.rundir.quality import AnswerRecord, RepeatMismatch
from core.rundir.quality_files import ANSWERS, REPEATS, EvalDir
from core.whole_files import write_whole
from quality.grading import expected_answer, extract_answer, failure_kinds


@dataclass(frozen=True)
class Regraded:
    folder: Path
    answers: int
    extracted_changed: int
    grade_changed: int


def regrade_record(record: AnswerRecord, gold: str, thinking: bool) -> AnswerRecord:
    expected = expected_answer(gold)
    extracted = extract_answer(record.text) if record.http_status == 200 else None
    failures = failure_kinds(record.text, record.finish_reason, record.http_status, thinking=thinking)
    if "thinking_opened" in record.failures and "thinking_opened" not in failures:
        failures.append("thinking_opened")  # seen in the reply's reasoning content, which is not kept
    return record.model_copy(
        update={
            "extracted": extracted,
            "expected": expected,
            "right": extracted is not None and extracted == expected,
            "failures": failures,
        }
    )


def _write_lines(path: Path, lines: str) -> None:
    """Replace the file whole (a reader never sees half of it), packed again if it was packed."""
    if not path.name.endswith(".gz"):
        write_json_atomic(path, lines)
        return
    write_whole(path, gzip.compress(lines.encode("utf-8"), mtime=0))


def regrade_eval(folder: Path) -> Regraded:
    """Rewrite an eval folder's answers (and its repeat mismatches) with the current grader."""
    directory = EvalDir(folder)
    manifest = directory.read_manifest()
    gold = {question.id: question.answer for question in directory.questions()}
    before = directory.answers()
    after = [regrade_record(record, gold[record.question_id], manifest.settings.thinking) for record in before]
    packed = folder / (ANSWERS + ".gz")
    _write_lines(packed if packed.exists() else folder / ANSWERS, "".join(r.model_dump_json() + "\n" for r in after))
    by_key = {(r.question_id, r.repeat): r for r in after}
    mismatches = []
    for mismatch in directory.mismatches():
        first, other = (
            by_key[(mismatch.question_id, mismatch.repeats[0])],
            by_key[(mismatch.question_id, mismatch.repeats[1])],
        )
        mismatches.append(
            mismatch.model_copy(
                update={
                    "same_extracted": first.extracted == other.extracted,
                    "same_grade": first.right == other.right,
                }
            )
        )
    if (folder / REPEATS).exists():
        _write_lines(
            folder / REPEATS, "".join(RepeatMismatch.model_validate(m).model_dump_json() + "\n" for m in mismatches)
        )
    return Regraded(
        folder=folder,
        answers=len(after),
        extracted_changed=sum(a.extracted != b.extracted for a, b in zip(before, after, strict=True)),
        grade_changed=sum(a.right != b.right for a, b in zip(before, after, strict=True)),
    )
