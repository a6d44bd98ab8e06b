"""The loop's ladder and eval, read before anything is created: every bad option one line naming its flag,
and the estimate's ladder time from the questions, rungs and each type's decode rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import CloudError
from rigbench.cloud.loop import study_seconds
from rigbench.cloud.quality_studies import (
    DECODE_CAP_TOK_S,
    QUANTIZE_S,
    RUNG_BENCH_S,
    RUNG_SERVER_START_S,
    UNKNOWN_DECODE_TOK_S,
    check_ladder,
    decode_tok_s,
    ladder_seconds,
    quality_settings,
)
from rigbench.cloud.settings import CloudSettings


def question_file(folder: Path, count: int = 4, name: str = "questions.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps({"id": f"{name[:2]}{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(count)))
    return path


def test_the_ladder_is_read_as_the_rigs_will_read_it_and_the_top_rung_is_asked_twice(tmp_path: Path) -> None:
    request = check_ladder(question_file(tmp_path), "F16,Q8_0,Q4_K_M", "--max-tokens 96 --concurrency 2")
    assert request.rungs == ["F16", "Q8_0", "Q4_K_M"] and request.questions == 4
    assert (request.max_tokens, request.concurrency, request.bench) == (96, 2, True)
    assert request.repeat_rungs == ["F16"] and request.args[-2:] == ["--repeat-rungs", "F16"]
    named = check_ladder(question_file(tmp_path), "F16,Q8_0", "--repeat-rungs Q8_0 --no-bench")
    assert named.repeat_rungs == ["Q8_0"] and named.args.count("--repeat-rungs") == 1 and not named.bench


@pytest.mark.parametrize(("rungs", "ladder_args", "message"), [
    ("F16,Q9_0", "", "--rungs: cannot read 'F16,Q9_0': 'Q9_0' is not one of F32, F16"),
    ("F16,,Q8_0", "", "--rungs: cannot read 'F16,,Q8_0'"),
    ("F16,F16", "", "--rungs: F16 is given twice"),
    ("F16,Q8_0", "--max-token 96", "--ladder-args: No such option: --max-token"),
    ("F16,Q8_0", "--max-tokens many", "--ladder-args: Invalid value for '--max-tokens'"),
    ("F16,Q8_0", "--out elsewhere", "--ladder-args: --out is set by the loop"),
    ("F16,Q8_0", "--questions=other.jsonl", "--ladder-args: --questions is set by the loop"),
    ("F16,Q8_0", "--shots 3", "--ladder-args: --shots: worked examples are asked in completion mode only"),
    ("F16,Q8_0", "--repeat-rungs Q2_K", "--ladder-args --repeat-rungs: Q2_K is not one of the rungs (F16, Q8_0)"),
    ("F16,Q8_0", "'unclosed", "--ladder-args: cannot split"),
])
def test_a_bad_ladder_option_is_one_line_naming_its_flag(tmp_path: Path, rungs: str, ladder_args: str,
                                                          message: str) -> None:
    question_file(tmp_path, 4)
    with pytest.raises(CloudError) as caught:
        check_ladder(tmp_path / "questions.jsonl", rungs, ladder_args)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_quality_options_without_their_study_and_a_study_without_questions_are_refused(tmp_path: Path) -> None:
    questions = question_file(tmp_path)
    with pytest.raises(CloudError, match="^--questions: only the ladder and eval studies use it"):
        quality_settings(["sweep"], questions, "F16", "", "", None)
    with pytest.raises(CloudError, match="^--questions: the ladder study asks a question file's questions"):
        quality_settings(["sweep", "ladder"], None, "F16", "", "", None)
    with pytest.raises(CloudError, match="^--eval-args: only the eval study uses it"):
        quality_settings(["ladder"], questions, "F16", "", "--max-tokens 8", None)
    with pytest.raises(CloudError, match="^--eval-args: -p is set by the loop"):
        quality_settings(["eval"], questions, "F16", "", "-p tiny", None)
    with pytest.raises(CloudError, match="^--eval-args: --url is set by the loop"):
        quality_settings(["eval"], questions, "F16", "", "--url http://elsewhere:8080", None)
    with pytest.raises(CloudError, match="^--questions: .*missing.jsonl is not a file here"):
        quality_settings(["eval"], tmp_path / "missing.jsonl", "F16", "", "", None)
    with pytest.raises(CloudError, match=f"^--with-local: {tmp_path} is not a ladder folder"):
        quality_settings(["ladder"], questions, "F16", "", "", tmp_path)


def test_quality_settings_pin_the_question_file_and_make_the_exemplar_path_absolute(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    question_file(tmp_path)
    question_file(tmp_path, 8, "exemplars.jsonl")
    fields = quality_settings(["ladder", "eval"], Path("questions.jsonl"), "Q8_0,Q4_0",
                              "--mode completion --shots 2 --shots-from exemplars.jsonl", "--max-tokens 32", None)
    assert fields["questions"] == str(tmp_path / "questions.jsonl") and len(fields["questions_sha256"]) == 64
    assert fields["ladder_args"] == ["--mode", "completion", "--shots", "2", "--shots-from",
                                     str(tmp_path / "exemplars.jsonl"), "--repeat-rungs", "Q8_0"]
    assert fields["rungs"] == ["Q8_0", "Q4_0"] and fields["eval_args"] == ["--max-tokens", "32"]


def test_the_estimate_counts_every_rung_question_and_reply_at_the_types_decode_rate(tmp_path: Path) -> None:
    questions = question_file(tmp_path, 10)
    request = check_ladder(questions, "F16,Q4_0", "--max-tokens 100 --no-bench")
    small = 100_000_000
    # an L4 (300 GB/s at half its peak over 100 MB: 1,500 tok/s) is capped; twice the bytes for the widened F16
    assert decode_tok_s("g6.xlarge", small) == DECODE_CAP_TOK_S
    assert decode_tok_s("g6.xlarge", 2_000_000_000) == pytest.approx(0.5 * 300e9 / 2e9)
    assert decode_tok_s("g6.xlarge", None) == UNKNOWN_DECODE_TOK_S
    per_rung = QUANTIZE_S + RUNG_SERVER_START_S
    expected = (2 * per_rung + 10 * 2 * 100 / 750  # F16 asked twice (determinism)
                + 10 * 100 / DECODE_CAP_TOK_S)
    assert ladder_seconds(request, "g6.xlarge", small) == pytest.approx(expected)
    benched = check_ladder(questions, "F16,Q4_0", "--max-tokens 100")
    assert ladder_seconds(benched, "g6.xlarge", small) == pytest.approx(expected + 2 * RUNG_BENCH_S)
    settings = CloudSettings(stacks=["a"], profile="tiny", studies=["sweep", "ladder", "eval"],
                             **quality_settings(["ladder", "eval"], questions, "F16,Q4_0", "--max-tokens 100 "
                                                "--no-bench", "--max-tokens 50 --repeat 2", None))
    seconds = study_seconds(settings, "g6.xlarge", small)
    assert set(seconds) == {"sweep", "ladder", "eval"}
    assert seconds["ladder"] == pytest.approx(expected)
    assert seconds["eval"] == pytest.approx(10 * 2 * 50 / DECODE_CAP_TOK_S)


def test_the_answers_page_lines_up_each_rigs_ladder_with_this_machines(tmp_path: Path) -> None:
    """A loop's record whose rig brought the committed CPU ladder home, and --with-local naming the committed
    H200 ladder of the same questions: the rig's ladder report priced at its rate, the grid, the page."""
    import io
    import shutil

    from rich.console import Console

    from rigbench.cloud.record import CloudRunFolder, CloudRunRecord, RigRecord
    from rigbench.cloud.results import write_quality_report

    runs = Path(__file__).resolve().parents[3] / "runs"
    folder = CloudRunFolder(tmp_path / "cloud-x")
    ladder = shutil.copytree(runs / "quality-cpu-gemma3-2026-12-03" / "ladder",
                             folder.rig_folder("g6-xlarge") / "runs" / "ladder-questions")
    questions = runs / "quality-cpu-gemma3-2026-12-03" / "questions.jsonl"
    settings = CloudSettings(stacks=["g6-xlarge"], profile="gemma3-270m", studies=["ladder"],
                             **quality_settings(["ladder"], questions, "F16,Q4_K_M", "", "",
                                                runs / "quality-h200-gemma3-2026-12-03" / "ladder"))
    rig = RigRecord(stack="g6-xlarge", status="finished", instance_type="g6.xlarge", market="spot",
                    usd_per_hour=0.5, runs=[folder.relative(ladder)])
    record = CloudRunRecord(id="x", created_at=0.0, settings=settings.model_dump(), rigs={"g6-xlarge": rig})
    write_quality_report(settings, folder, record, Console(file=io.StringIO()))
    page = (folder.root / record.report).read_text()
    assert record.report == "report/answers.md", "no sweep ran: the answers are the loop's report"
    assert "g6-xlarge (g6.xlarge): right" in page and "this machine: right" in page
    assert "**g6-xlarge (g6.xlarge) vs this machine**" in page
    assert (folder.root / "report" / "grids" / "g6-xlarge-g6.xlarge-vs-this-machine" / "grid.md").is_file()
    assert "× $0.5000/h (g6.xlarge spot)" in (ladder / "report.md").read_text()


def test_a_loop_that_swept_too_answers_both_questions_in_its_reports_glance(tmp_path: Path) -> None:
    """The speed report's "At a glance" gains the answers' paragraph as its last, before the first table."""
    import io
    import shutil

    from rich.console import Console

    from rigbench.cloud.record import CloudRunFolder, CloudRunRecord, RigRecord
    from rigbench.cloud.results import write_quality_report

    runs = Path(__file__).resolve().parents[3] / "runs"
    folder = CloudRunFolder(tmp_path / "cloud-x")
    ladder = shutil.copytree(runs / "quality-h200-gemma3-2026-12-03" / "ladder",
                             folder.rig_folder("p5en") / "runs" / "ladder-questions")
    speed = runs / "real-gemma-h200-2026-12-03" / "autotune" / (
        "20261203T074752Z-gemma3-270m-many-patched-gpu-sampling-ubatch-128-5c94") / "report.md"
    (folder.root / "report").mkdir(parents=True)
    shutil.copyfile(speed, folder.root / "report" / "report.md")
    questions = runs / "quality-cpu-gemma3-2026-12-03" / "questions.jsonl"
    settings = CloudSettings(stacks=["p5en"], profile="gemma3-270m", studies=["sweep", "ladder"],
                             **quality_settings(["ladder"], questions, "F16,Q4_K_M", "", "",
                                                runs / "quality-cpu-gemma3-2026-12-03" / "ladder"))
    rig = RigRecord(stack="p5en", status="finished", instance_type="p5en.48xlarge", market="spot",
                    usd_per_hour=8.0, runs=[folder.relative(ladder)])
    record = CloudRunRecord(id="x", created_at=0.0, settings=settings.model_dump(), rigs={"p5en": rig},
                            report="report/report.md")
    console = io.StringIO()
    write_quality_report(settings, folder, record, Console(file=console, width=400))
    report = (folder.root / "report" / "report.md").read_text()
    glance_section = report.split("## At a glance\n\n")[1].split("\n## ")[0]
    speed_line, answers_line = [line for line in glance_section.split("\n") if line]
    assert speed_line.startswith("Best aggregate output 2361.4 [1498.4, 3027.6] tok/s at 64 users")
    assert answers_line.startswith("Answers: Best trade (") and "p5en (p5en.48xlarge): Q8_0, 71/100 right" in (
        answers_line) and "this machine: Q4_K_M, 74/100 right" in answers_line, answers_line
    assert report.count("# Answers on every rig") == 1 and "### At a glance" in report
    assert speed.read_text() in report.replace(f"{answers_line}\n\n", ""), "nothing of the speed report is lost"
    assert "answers: Best trade" in console.getvalue()


def test_the_answers_paragraph_finds_its_place_in_any_report() -> None:
    from rigbench.cloud.results import with_answers_glance

    assert with_answers_glance("# T\n\n## At a glance\n\nFast.\n\n## Run\n\nrows", "Right.") == (
        "# T\n\n## At a glance\n\nFast.\n\nAnswers: Right.\n\n## Run\n\nrows")
    assert with_answers_glance("# T\n\n## At a glance\n\nFast.", "Right.") == (
        "# T\n\n## At a glance\n\nFast.\n\nAnswers: Right.")
    assert with_answers_glance("# T\n\n## Run\n\nrows", "Right.") == (
        "# T\n\n## At a glance\n\nAnswers: Right.\n\n## Run\n\nrows")
    assert with_answers_glance("rows", "Right.") == "## At a glance\n\nAnswers: Right.\n\nrows"
