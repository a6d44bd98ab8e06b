"""The report from a run directory written by the real producer: a headless Locust sweep
(loadtest.run_sweep) against loadtest's ground-truth streaming server on loopback, whose
first-token delay and token gap are known, so the figures can be checked against them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.report import write_report
from core.rundir import LoadSettings, RunDir, new_manifest, server_at
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.sweep import run_sweep

pytestmark = pytest.mark.integration

TTFT_MS = 40.0
ITL_MS = 10.0  # 100 tok/s per user
TOKENS = 24


@pytest.mark.timing
def test_report_figures_match_the_ground_truth_server(tmp_path: Path) -> None:
    settings = LoadSettings(user_steps=[1, 4], warmup_seconds=1.0, measure_seconds=3.0, max_tokens=TOKENS)
    config = GroundTruthConfig(ttft_ms=TTFT_MS, itl_ms=ITL_MS, tokens=TOKENS, model="default", slots=4)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        manifest = new_manifest("analysis-e2e", "tiny", load=settings, server=server_at(server.base_url, slots=4))
        run = RunDir.create(tmp_path / "runs", manifest)
        final = run_sweep(run, server.base_url, progress=False)
    assert final.status == "complete", final.status_detail

    report = write_report([run.path])
    text = report.read_text()
    assert text.startswith(f"# rigbench report: {final.run_id}")
    summary = json.loads((run.path / "summary.json").read_text())
    one, four = summary["runs"][0]["steps"]
    assert (one["users"], four["users"]) == (1, 4)
    for step in (one, four):
        assert step["errors"] == {}
        assert step["requests"] > 5
        # client decode rate: (24 - 1) tokens over 23 gaps of 10 ms -> 100 tok/s
        assert step["client_tok_s"]["value"] == pytest.approx(1000 / ITL_MS, rel=0.15)
        assert step["ttft_s"]["p50"]["value"] == pytest.approx(TTFT_MS / 1000, abs=0.02)
        assert step["itl_s"]["p50"]["value"] == pytest.approx(ITL_MS / 1000, rel=0.15)
        low, high = step["ttft_s"]["p50"]["low"], step["ttft_s"]["p50"]["high"]
        assert low <= step["ttft_s"]["p50"]["value"] <= high
    # one request cycle is about 40 ms + 230 ms (+ client overhead): 24 tokens per ~0.27 s per user
    assert one["aggregate_tok_s"]["value"] == pytest.approx(TOKENS / 0.27, rel=0.25)
    assert four["aggregate_tok_s"]["value"] == pytest.approx(4 * one["aggregate_tok_s"]["value"], rel=0.25)
    # the server's own token counter over the same windows agrees with the records
    for step in (one, four):
        assert step["server_counter_tok_s"] == pytest.approx(step["aggregate_tok_s"]["value"], rel=0.05)
    assert (run.path / "plots" / "ttft_p90.png").exists()
