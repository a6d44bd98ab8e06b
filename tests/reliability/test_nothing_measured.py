"""A sweep in which every request timed out, end to end: a real headless Locust sweep against the ground-truth
server's ``no_done`` fault (every token streamed, then no [DONE]: only the read timeout ends a request), then the
report. Nothing was measured, and every figure a reader sees says so: no aggregate and no headline figure, no
interval below what a figure can be, step tables that count the timed-out requests, warnings that name the
timeouts rather than a short window. The same branches on hand-built records: tests/analysis/test_figures.py and
tests/analysis/test_nothing_measured_branches.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.report import write_report_with_headline
from core.rundir import LoadSettings
from core.wording import counted
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.sweep import run_sweep
from tests.loadtest.test_sweep import new_run

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 0.5


def estimates(node: object) -> Iterator[dict]:
    """Every interval summary.json holds (an object with value, low and high), wherever it is."""
    if isinstance(node, dict):
        if {"value", "low", "high"} <= node.keys():
            yield node
        for child in node.values():
            yield from estimates(child)
    elif isinstance(node, list):
        for child in node:
            yield from estimates(child)


def test_a_sweep_whose_every_request_timed_out_claims_no_figure_and_counts_the_timeouts(tmp_path: Path) -> None:
    """Replies of 40 tokens over 2 s, then silence: each request times out 0.5 s after its last token. The first
    user's first request starts in step 0's warm-up and streams through its 1 s window, timing out after it (the
    issue's case: 0 requests started in the window, yet it ran there); at step 1 requests run into the window and
    start in it. The drain lets the last ones time out rather than be cut. Two steps, so the knee has something
    to compare, and no error-rate stop (every request fails by design)."""
    config = GroundTruthConfig(ttft_ms=5, itl_ms=50, tokens=40, model="default", slots=4, fault_cycle=["no_done"])
    settings = LoadSettings(user_steps=[1, 2], warmup_seconds=0.5, measure_seconds=1.0, max_tokens=40,
                            read_timeout_seconds=READ_TIMEOUT_S, max_error_rate=1.0, drain_seconds=2.5)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        run = new_run(tmp_path / "runs", settings, server.port, slots=4)
        manifest = run_sweep(run, server.base_url, progress=False)

    # the sweep: failed, naming the timeouts as the reason nothing was measured
    assert manifest.status == "failed"
    assert "so nothing was measured; its requests failed (" in manifest.status_detail, manifest.status_detail
    assert "timeout" in manifest.status_detail and "--measure" not in manifest.status_detail
    records = run.read_records()
    assert records and not any(record.ok for record in records)
    assert {record.error_kind for record in records if not record.interrupted} == {"timeout"}
    assert any(record.streamed_tokens for record in records if record.error_kind == "timeout"), "tokens came"
    assert {entry["fault"] for entry in read_truth_log(tmp_path / "truth.jsonl").values()} <= {
        "no_done", "server_stopped"}

    report, headline = write_report_with_headline([run.path], price_as=["g6.xlarge"])
    markdown = report.read_text()
    summary = json.loads((run.path / "summary.json").read_text())["runs"][0]

    # no aggregate, latency or cost figure is claimed: the glance says nothing was measured, step by step, and why
    glance = markdown.split("## At a glance\n\n", 1)[1].split("\n", 1)[0]
    assert headline.startswith("No step has an aggregate output rate: at 1 user every request running in the "
                               "window failed (timeout "), headline
    assert f"streams stalled past the read timeout ({READ_TIMEOUT_S:g} s, --read-timeout)" in headline
    assert "at 2 users every request running in the window failed (timeout " in headline
    assert glance.startswith("No step has an aggregate output rate:") and "Best aggregate" not in markdown
    for step in summary["steps"]:
        assert step["aggregate_tok_s"]["value"] is None, step["aggregate_tok_s"]
        assert step["ttft_s"]["p90"]["value"] is None and step["client_tok_s"]["value"] is None
    costs = [cost for row in summary["usd_per_mtok"] for cost in row.values()]
    assert costs and all(cost["value"] is None for cost in costs), "no $/Mtok on no tokens"

    # no interval crosses what a figure can be: none below 0, none with its value outside it
    found = list(estimates(summary))
    assert found
    for estimate in found:
        low, value, high = estimate["low"], estimate["value"], estimate["high"]
        assert low is None or low >= 0, estimate
        assert value is None or value >= 0, estimate
        if None not in (low, value, high):
            assert low <= value <= high, estimate

    # the step tables count the timed-out requests: never 0 requests and 0 errors
    for step in summary["steps"]:
        timed_out = step["errors"].get("timeout", 0) + (step["running_at_start"] or {}).get("timeout", 0)
        assert timed_out > 0, step
        assert step["ok"] == 0
    for users in (1, 2):
        row = next((line for line in markdown.splitlines()
                    if line.startswith("|") and line.strip("|").split("|")[0].strip() == str(users)
                    and "timeout" in line), None)
        assert row is not None, f"no step table row at {users} users counts a timeout"

    # the warnings name the timeouts, and no longer window is advised
    for users in (1, 2):
        name = f"step {users - 1} ({counted(users, 'user')})"
        [warning] = [w for w in summary["warnings"] if w.startswith(name) and "window failed" in w]
        assert "failed (timeout " in warning and "a longer window would not help" in warning, warning
    assert not any("measure longer" in w or "measure at least" in w for w in summary["warnings"])
