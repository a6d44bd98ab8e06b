"""Decode bytes for runs: recorded by the local rig, given with --gguf, or the synthetic writer's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.prices import PriceBook
from analysis.report_model import build_section
from core.errors import UsageError
from core.profile import load_profile
from core.rundir import RunDir
from llamacpp.decode_bytes import gguf_decode_bytes
from rigbench.decode_bytes import decode_bytes_for_runs
from rigbench.local_rig import model_file

ROOT = Path(__file__).resolve().parents[2]
H200_E2B = ROOT / "runs/gpu-h200-profiles-2026-11-30/runs/20261130T083256Z-gemma4-e2b-many-e2b-profile-d469"


def test_the_local_rig_records_the_decode_bytes_of_the_file_it_serves(tiny_model, tmp_path):
    path, info = model_file(load_profile("tiny"), tiny_model, tmp_path)
    assert path == tiny_model
    assert info.decode_bytes == gguf_decode_bytes(tiny_model)
    assert info.decode_bytes is not None and info.decode_bytes.weights_bytes > 0


def test_a_committed_h200_run_gets_the_writer_q4_0_table_and_its_roofline():
    manifest = RunDir(H200_E2B).read_manifest()
    assert manifest.model is not None and manifest.model.decode_bytes is None
    found = decode_bytes_for_runs([H200_E2B], [])
    decode = found[manifest.model.sha256]
    assert "rigbench-synthetic-e2b, Q4_0" in decode.source
    section = build_section(H200_E2B, PriceBook.default(), decode_bytes=found)
    roofline = section.roofline
    assert roofline is not None and roofline.left_out is None
    assert roofline.bandwidth is not None and roofline.bandwidth.gb_s == 4800
    assert [step.figures.users for step in roofline.steps] == [1, 2, 4, 8, 16, 32, 64]
    one, many = roofline.steps[0], roofline.steps[-1]
    assert one.per_user == section.figures.steps[0].client_tok_s.value
    assert one.per_user_fraction == pytest.approx(one.per_user * one.bytes_one / 4.8e12)
    assert many.batch == 64 and many.roof_batch > 40 * one.roof_one  # 64 sequences share one read of the weights
    assert 0 < many.aggregate_fraction < one.per_user_fraction < 1


def test_a_gguf_that_is_no_run_model_is_refused_naming_the_flag(tiny_model):
    with pytest.raises(UsageError, match=r"--gguf .*tiny\.gguf: sha256 \w{12} is not the model of any given run"):
        decode_bytes_for_runs([H200_E2B], [tiny_model])
    with pytest.raises(UsageError, match="--gguf nowhere.gguf: no such file"):
        decode_bytes_for_runs([H200_E2B], [Path("nowhere.gguf")])
