"""The card's batched ceiling beside the served curve: found beside a committed H200 run (same
model file, same KV layout), named by hand, or refused in one line when the file is no such result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.ceiling import ceiling_for, ceiling_section, explicit_ceiling, read_ceiling
from analysis.figures import run_figures
from analysis.load import load_run
from core.errors import AnalysisError

STUDY = Path(__file__).resolve().parents[2] / "runs" / "gpu-h200-profiles-2026-11-30"
RUN = STUDY / "runs" / "20261130T083256Z-gemma4-e2b-many-e2b-profile-d469"  # per-slot KV, 1..64 users


def test_a_study_run_finds_its_cards_batched_ceiling_and_each_step_reads_against_it() -> None:
    run = load_run(RUN)
    ceiling = ceiling_for(run)
    assert ceiling is not None and ceiling.path.name == "batched-bench-e2b-per-slot-kv.json" and not ceiling.unified
    text = "\n".join(ceiling_section(run_figures(run), ceiling, "users"))
    assert "| 64      | 1,654.3                  | 5,904.3                | 0.28" in text
    assert "| 1       | 293.5                    | 336.0                  | 0.87" in text


def test_a_unified_cache_run_reads_against_the_unified_bench_and_another_model_against_none(tmp_path: Path) -> None:
    study = tmp_path / "study"
    shutil.copytree(RUN, study / "runs" / RUN.name, ignore=shutil.ignore_patterns("plots", "*.html", "*.csv"))
    for name in ("batched-bench-e2b-per-slot-kv.json", "batched-bench-e2b-unified-kv.json", "bench-e2b.json"):
        shutil.copy(STUDY / name, study / name)
    manifest_path = study / "runs" / RUN.name / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["server"]["args"] = [*manifest["server"]["args"], "-kvu"]
    manifest_path.write_text(json.dumps(manifest))
    ceiling = ceiling_for(load_run(study / "runs" / RUN.name))
    assert ceiling is not None and ceiling.unified and ceiling.path.name == "batched-bench-e2b-unified-kv.json"
    manifest["model"]["name"] = "another-model.gguf"
    manifest_path.write_text(json.dumps(manifest))
    assert ceiling_for(load_run(study / "runs" / RUN.name)) is None


def test_a_named_file_must_be_a_batched_bench_result() -> None:
    assert read_ceiling(STUDY / "bench-e2b.json") is None, "llama-bench's own report is no batched ceiling"
    with pytest.raises(AnalysisError, match=r"^--ceiling .*bench-e2b.json: not a llama-batched-bench report"):
        explicit_ceiling(STUDY / "bench-e2b.json")
    assert explicit_ceiling(STUDY / "batched-bench-e2b-unified-kv.json").decode_tok_s[64] > 0


def test_past_the_slots_a_step_reads_against_as_many_sequences_as_the_server_has_slots(tmp_path: Path) -> None:
    """128 users on 64 slots decode 64 at a time: their ceiling is llama-batched-bench's at 64, not at 128."""
    study = tmp_path / "study"
    shutil.copytree(RUN, study / "runs" / RUN.name, ignore=shutil.ignore_patterns("plots", "*.html", "*.csv"))
    bench = json.loads((STUDY / "batched-bench-e2b-per-slot-kv.json").read_text())
    manifest_path = study / "runs" / RUN.name / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["server"]["parallel_slots"] = 32  # as if the server had half the slots: 64 users wait for 32
    manifest_path.write_text(json.dumps(manifest))
    (study / "batched-bench-e2b-per-slot-kv.json").write_text(json.dumps(bench))
    run = load_run(study / "runs" / RUN.name)
    ceiling = ceiling_for(run)
    assert ceiling.at(64, 32) == ceiling.decode_tok_s[32] and ceiling.at(16, 32) == ceiling.decode_tok_s[16]
    text = "\n".join(ceiling_section(run_figures(run), ceiling, "users"))
    thirty_two = f"{ceiling.decode_tok_s[32]:,.1f} (32)"
    assert f"| 64      | 1,654.3                  | {thirty_two}" in text
    assert "Past the server's 32 slots the users beyond them wait" in text
