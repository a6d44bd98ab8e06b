"""The GPU study (``rigbench study gpu``): its plumbing, dry-run on the CPU with tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.study_report import write_study_report
from core.errors import LlamaCppError, StudyError, UsageError
from rigbench.commands.study import app
from rigbench.local_rig import LocalRigOptions
from rigbench.studies import gpu_study
from rigbench.studies.gpu_study import GpuStudy, divergence

DRY_RUN = ["--presets", "tiny-gemma4", "--scale", "0.1", "--processes", "1", "--backend", "cpu"]


def cache_beside(tmp_path: Path, llama_build, monkeypatch) -> None:
    """A cache of the test's own for the models, its builds those the other tests share (same key)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "builds").symlink_to(Path(llama_build.binary("llama-server")).parents[3])
    monkeypatch.setenv("RIGBENCH_CACHE", str(cache))


def test_divergence_names_the_token_where_texts_part_and_the_margin_there() -> None:
    reference = {"text": "ab cd ef", "tokens": ["ab", " cd", " ef"], "top2": [[-1, -2], [-1.0, -1.25], [-1, -3]]}
    assert divergence(reference, {"text": "ab cd ef"}) is None
    assert divergence(reference, {"text": "ab cX ef"}) == {"token_index": 1, "top2_margin": 0.25}
    assert divergence(reference, {"text": "ab"})["token_index"] == 1  # a shorter text parts where it ends


@pytest.mark.timing  # llama-batched-bench prints its results only with a core free
@pytest.mark.integration
def test_cpu_dry_run_writes_every_phase_and_a_report(tmp_path: Path, llama_build, monkeypatch) -> None:
    out = tmp_path / "study"
    cache_beside(tmp_path, llama_build, monkeypatch)
    done = CliRunner().invoke(app, ["gpu", str(out), *DRY_RUN, "--phases", "models,bench,greedy,longctx"])
    assert done.exit_code == 0, done.output[-3000:]
    phases = [json.loads(line) for line in (out / "phases.jsonl").read_text().splitlines()]
    assert [(p["phase"], p["status"]) for p in phases if p["phase"] != "run"] == [
        ("models", "ok"), ("bench", "ok"), ("greedy", "ok"), ("longctx", "ok")]
    assert all(p["status"] == "complete" for p in phases if p["phase"] == "run")
    assert json.loads((out / "batched-bench-tiny-gemma4-per-slot-kv.json").read_text())["summary"]["tg@4"] > 0
    greedy = json.loads((out / "greedy.json").read_text())
    assert set(greedy["same_text_as_cpu_sampling"]) >= {"plain/backend-sampling", "favoured/backend-sampling+drafter"}
    assert greedy["median_top2_margin_cpu_sampling"] >= 0
    text = write_study_report(out).read_text()
    assert "## 1. llama-bench ceiling" in text and "## 6. Long context" in text


def test_past_the_deadline_runs_and_phases_are_skipped_and_said(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_CACHE", str(tmp_path / "cache"))
    study = GpuStudy(tmp_path / "out", ["e2b"], 1.0, 1, "cpu", deadline_seconds=50)
    run = LocalRigOptions(label="e2b-best", load={"user_steps": [1, 64], "warmup_seconds": 3, "measure_seconds": 15})
    assert study.local_run(run) is None  # 2 x 18 s + 20 s of start-up and report > 50 s left: not started
    called = []
    study.phase("bench", lambda: called.append(1))
    study.deadline_seconds = 10
    study.phase("sweep", lambda: called.append(2))
    assert called == [1]
    lines = [json.loads(line) for line in (tmp_path / "out" / "phases.jsonl").read_text().splitlines()]
    assert [(line["phase"], line["status"]) for line in lines][-1] == ("sweep", "skipped")
    assert "skipped" in (tmp_path / "out" / "study.log").read_text()


@pytest.mark.integration
def test_phases_without_models_use_the_cached_build_and_a_failure_sets_the_exit_code(
        tmp_path, llama_build, monkeypatch) -> None:
    out = tmp_path / "study"
    cache_beside(tmp_path, llama_build, monkeypatch)
    done = CliRunner().invoke(app, ["gpu", str(out), *DRY_RUN, "--phases", "longctx"])
    # the models were never written: every long-context run fails, and the study says so with exit code 1
    assert isinstance(done.exception, StudyError) and done.exception.exit_code == 1, done.output[-3000:]
    assert "phases.jsonl" in str(done.exception)
    phases = [json.loads(line) for line in (out / "phases.jsonl").read_text().splitlines()]
    assert ("build", "ok") in [(p["phase"], p.get("status")) for p in phases]
    assert [p["status"] for p in phases if p["phase"] == "run"] == ["failed", "failed"]
    assert (out / "DONE").exists() and "no build: stopping" not in (out / "study.log").read_text()


def test_an_unknown_phase_or_preset_is_refused_before_the_study_folder_is_made(tmp_path: Path) -> None:
    for wrong in (["--phases", "models,benhc"], ["--presets", "e2b,e9b"]):
        done = CliRunner().invoke(app, ["gpu", str(tmp_path / "study"), *wrong], env={"COLUMNS": "200"})
        assert isinstance(done.exception, UsageError) and wrong[0] in str(done.exception)
        assert done.exception.exit_code == 2  # what rigbench's CLI exits with
        assert not (tmp_path / "study").exists()


def test_with_repeats_a_phases_arms_run_in_rounds_each_run_one_repeat_of_the_phases_series(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_CACHE", str(tmp_path / "cache"))
    ran = []

    def local_rig(options: LocalRigOptions):
        ran.append(options.repeat)
        raise LlamaCppError("llama-server exited with code 1 during start-up")

    monkeypatch.setattr(gpu_study, "run_local_rig", local_rig)
    arms = [LocalRigOptions(label=label, load={"user_steps": [1], "warmup_seconds": 1, "measure_seconds": 1})
            for label in ("profile", "drafter2")]
    study = GpuStudy(tmp_path / "out", ["e2b"], 1.0, 1, "cpu", repeats=3)
    assert study.local_runs(arms, "sweep") == [None] * 6  # each failed, and said so
    assert [(repeat.arm, repeat.index, repeat.of, repeat.order) for repeat in ran] == [
        (arm, index, 3, order) for order, (index, arm) in enumerate((i, a) for i in (1, 2, 3)
                                                                     for a in ("profile", "drafter2"))]
    assert len({repeat.series for repeat in ran}) == 1 and "sweep-series" in ran[0].series
    lines = [json.loads(line) for line in (tmp_path / "out" / "phases.jsonl").read_text().splitlines()]
    assert [(line["label"], line["repeat"], line["status"]) for line in lines][:3] == [
        ("profile", 1, "failed"), ("drafter2", 1, "failed"), ("profile", 2, "failed")]
    # one repeat: the runs are made alone, as they always were
    ran.clear()
    GpuStudy(tmp_path / "alone", ["e2b"], 1.0, 1, "cpu").local_runs(arms, "sweep")
    assert ran == [None, None]
