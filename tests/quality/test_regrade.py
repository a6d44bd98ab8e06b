"""Recorded replies graded again: a reading that improved moves grades, and says how many."""

from __future__ import annotations

import gzip
from pathlib import Path

from core.rundir.quality import AnswerRecord, EvalManifest, EvalSettings, Question, QuestionSetInfo
from core.rundir.quality_files import ANSWERS, QUESTIONS, EvalDir, append_jsonl, write_jsonl
from quality.regrade import regrade_eval


def test_a_reply_read_by_old_rules_is_graded_again(tmp_path: Path) -> None:
    folder = EvalDir(tmp_path / "eval")
    folder.write_manifest(EvalManifest(
        run_id="r", created_at="2026-12-01T00:00:00+00:00", settings=EvalSettings(),
        questions=QuestionSetInfo(name="q.jsonl", count=2, sha256="ab" * 32),
    ))
    write_jsonl(folder.path / QUESTIONS, [Question(id="a", question="15+1?", answer="#### 16"),
                                          Question(id="b", question="2+2?", answer="#### 4")])
    old = AnswerRecord(question_id="a", text="#### Step 1: add\n15 + 1 = 16\n#### Answer\n16", extracted="1",
                       expected="16", right=False, finish_reason="stop", http_status=200, seconds=0.1)
    fine = AnswerRecord(question_id="b", text="#### 4", extracted="4", expected="4", right=True,
                        finish_reason="stop", http_status=200, seconds=0.1)
    append_jsonl(folder.path / ANSWERS, old)
    append_jsonl(folder.path / ANSWERS, fine)
    moved = regrade_eval(folder.path)
    assert (moved.answers, moved.extracted_changed, moved.grade_changed) == (2, 1, 1)
    assert [(a.extracted, a.right) for a in folder.answers()] == [("16", True), ("4", True)]
    # a committed (packed) folder stays packed
    packed = folder.path / (ANSWERS + ".gz")
    packed.write_bytes(gzip.compress((folder.path / ANSWERS).read_bytes()))
    (folder.path / ANSWERS).unlink()
    assert regrade_eval(folder.path).grade_changed == 0
    assert packed.exists() and not (folder.path / ANSWERS).exists()
