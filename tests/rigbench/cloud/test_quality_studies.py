"""The loop's ladder and eval, read before anything is created: every bad setting one line naming its file and
key, the settings carried through the loop's record to the file each rig reads, and the estimate's ladder time
from the questions, rungs and each type's decode rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import CloudError
from core.quality_settings import QualityEvalSettings, QualityLadderSettings, read_settings
from rigbench.cloud.loop import new_record, study_seconds
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
    write_settings_file,
)
from rigbench.cloud.record import CloudRunFolder
from rigbench.cloud.settings import CloudSettings


def question_file(folder: Path, count: int = 4, name: str = "questions.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps({"id": f"{name[:2]}{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(count)))
    return path


def settings_file(folder: Path, text: str, name: str = "ladder.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_the_ladder_is_read_as_the_rigs_will_read_it_and_the_top_rung_is_asked_twice(tmp_path: Path) -> None:
    asked = check_ladder(question_file(tmp_path), ["F16", "Q8_0", "Q4_K_M"],
                         settings_file(tmp_path, "max_tokens = 96\nconcurrency = 2\n"))
    assert (asked.max_tokens, asked.concurrency, asked.bench, asked.repeat_rungs) == (96, 2, True, ["F16"])
    named = check_ladder(question_file(tmp_path), ["F16", "Q8_0"],
                         settings_file(tmp_path, 'repeat_rungs = ["Q8_0"]\nbench = false\n'))
    assert named.repeat_rungs == ["Q8_0"] and not named.bench
    assert check_ladder(question_file(tmp_path), ["Q8_0"], None).repeat_rungs == ["Q8_0"]


@pytest.mark.parametrize(("rungs", "text", "message"), [
    ("F16,Q9_0", "", "--rungs: cannot read 'F16,Q9_0': 'Q9_0' is not one of F32, F16"),
    ("F16,,Q8_0", "", "--rungs: cannot read 'F16,,Q8_0'"),
    ("F16,F16", "", "--rungs: F16 is given twice"),
    ("F16,Q8_0", "max_token = 96", "--ladder {file}: max_token: unknown key"),
    ("F16,Q8_0", 'max_tokens = "many"', "--ladder {file}: max_tokens: Input should be a valid integer"),
    ("F16,Q8_0", 'out = "elsewhere"', "--ladder {file}: out: unknown key"),
    ("F16,Q8_0", "shots = 3", "--ladder {file}: shots: worked examples are asked in completion mode only"),
    ("F16,Q8_0", 'repeat_rungs = ["Q2_K"]', "--ladder {file}: repeat_rungs: Q2_K is not one of the rungs (F16, Q8_0)"),
    ("F16,Q8_0", 'reference = "Q2_K"', "--ladder {file}: reference: Q2_K is not one of the rungs (F16, Q8_0)"),
    ("F16,Q8_0", 'mode = "completion"\nshots = 500', "--ladder: --shots 500: the exemplar pool"),
    ("F16,Q8_0", "'unclosed", "--ladder {file}: not TOML"),
])
def test_a_bad_ladder_setting_is_one_line_naming_its_file_and_key(tmp_path: Path, rungs: str, text: str,
                                                                   message: str) -> None:
    questions = question_file(tmp_path, 4)
    file = settings_file(tmp_path, text + "\n")
    with pytest.raises(CloudError) as caught:
        quality_settings(["ladder"], questions, rungs, file, None, None)
    assert str(caught.value).startswith(message.format(file=file)), str(caught.value)
    assert "\n" not in str(caught.value)


def test_quality_options_without_their_study_and_a_study_without_questions_are_refused(tmp_path: Path) -> None:
    questions = question_file(tmp_path)
    evaluation = settings_file(tmp_path, "max_tokens = 8\n", "eval.toml")
    with pytest.raises(CloudError, match="^--questions: only the ladder and eval studies use it"):
        quality_settings(["sweep"], questions, "F16", None, None, None)
    with pytest.raises(CloudError, match="^--questions: the ladder study asks a question file's questions"):
        quality_settings(["sweep", "ladder"], None, "F16", None, None, None)
    with pytest.raises(CloudError, match="^--eval: only the eval study uses it"):
        quality_settings(["ladder"], questions, "F16", None, evaluation, None)
    with pytest.raises(CloudError, match="^--ladder: only the ladder study uses it"):
        quality_settings(["eval"], questions, "F16", evaluation, None, None)
    with pytest.raises(CloudError, match="^--eval .*eval.toml: url: unknown key"):
        quality_settings(["eval"], questions, "F16", None, settings_file(tmp_path, 'url = "x"\n', "eval.toml"), None)
    with pytest.raises(CloudError, match="^--questions: .*missing.jsonl is not a file here"):
        quality_settings(["eval"], tmp_path / "missing.jsonl", "F16", None, None, None)
    with pytest.raises(CloudError, match=f"^--with-local: {tmp_path} is not a ladder folder"):
        quality_settings(["ladder"], questions, "F16", None, None, tmp_path)


def test_the_settings_go_through_the_record_to_the_file_each_rig_reads(tmp_path: Path, monkeypatch) -> None:
    """The question file pinned, the exemplar file made absolute (the rig's step runs from the project folder),
    and the settings the same after the record is saved, loaded (--resume) and written for a rig."""
    monkeypatch.chdir(tmp_path)
    question_file(tmp_path)
    question_file(tmp_path, 8, "exemplars.jsonl")
    settings_file(tmp_path, 'mode = "completion"\nshots = 2\nshots_from = "exemplars.jsonl"\n')
    fields = quality_settings(["ladder", "eval"], Path("questions.jsonl"), "Q8_0,Q4_0", Path("ladder.toml"),
                              settings_file(tmp_path, '{"max_tokens": 32}', "eval.json"), None)
    assert fields["questions"] == str(tmp_path / "questions.jsonl") and len(fields["questions_sha256"]) == 64
    exemplars = tmp_path / "exemplars.jsonl"
    assert fields["ladder"] == QualityLadderSettings(mode="completion", shots=2, shots_from=exemplars,
                                                     repeat_rungs=["Q8_0"])
    assert fields["rungs"] == ["Q8_0", "Q4_0"] and fields["eval"] == QualityEvalSettings(max_tokens=32)
    settings = CloudSettings(stacks=["a"], profile="tiny", studies=["ladder", "eval"], **fields)
    folder = CloudRunFolder(tmp_path / "cloud-x")
    folder.save(new_record(settings, "x", []))
    resumed = CloudSettings.model_validate(folder.load().settings)
    assert resumed == settings
    for study, kind in (("ladder", QualityLadderSettings), ("eval", QualityEvalSettings)):
        handed = write_settings_file(folder.rig_folder("a"), study, resumed)
        assert read_settings(kind, handed) == fields[study]


def test_the_estimate_counts_every_rung_question_and_reply_at_the_types_decode_rate(tmp_path: Path) -> None:
    questions = question_file(tmp_path, 10)
    ladder = settings_file(tmp_path, "max_tokens = 100\nbench = false\n")
    settings = CloudSettings(stacks=["a"], profile="tiny", studies=["sweep", "ladder", "eval"],
                             **quality_settings(["ladder", "eval"], questions, "F16,Q4_0", ladder,
                                                settings_file(tmp_path, "max_tokens = 50\nrepeat = 2\n", "e.toml"),
                                                None))
    small = 100_000_000
    # an L4 (300 GB/s at half its peak over 100 MB: 1,500 tok/s) is capped; twice the bytes for the widened F16
    assert decode_tok_s("g6.xlarge", small) == DECODE_CAP_TOK_S
    assert decode_tok_s("g6.xlarge", 2_000_000_000) == pytest.approx(0.5 * 300e9 / 2e9)
    assert decode_tok_s("g6.xlarge", None) == UNKNOWN_DECODE_TOK_S
    per_rung = QUANTIZE_S + RUNG_SERVER_START_S
    expected = (2 * per_rung + 10 * 2 * 100 / 750  # F16 asked twice (determinism)
                + 10 * 100 / DECODE_CAP_TOK_S)
    assert ladder_seconds(settings, "g6.xlarge", small) == pytest.approx(expected)
    benched = settings.model_copy(update={"ladder": settings.ladder.model_copy(update={"bench": True})})
    assert ladder_seconds(benched, "g6.xlarge", small) == pytest.approx(expected + 2 * RUNG_BENCH_S)
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
                             **quality_settings(["ladder"], questions, "F16,Q4_K_M", None, None,
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
                             **quality_settings(["ladder"], questions, "F16,Q4_K_M", None, None,
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
