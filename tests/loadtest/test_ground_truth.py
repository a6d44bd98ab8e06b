"""The ground-truth server itself: what it sends is what its log says, chunked, jittered and queued."""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from loadtest.ground_truth import GroundTruthApp, GroundTruthConfig, GroundTruthServer, read_truth_log

pytestmark = pytest.mark.integration


def stream(base_url: str, body: dict, request_id: str = "") -> list[dict]:
    headers = {"X-Request-Id": request_id} if request_id else {}
    events = []
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line.removeprefix("data: ")))
    return events


def content(events: list[dict]) -> list[str]:
    return [e["choices"][0]["delta"]["content"] for e in events if e["choices"] and e["choices"][0]["delta"]]


def test_chunks_carry_k_tokens_and_the_counts_the_client_asked_for(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=2, itl_ms=1, tokens=8, tokens_per_chunk=3, model="m")
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        plain = stream(server.base_url, {"model": "m", "messages": []}, "plain")
        timed = stream(server.base_url, {"model": "m", "messages": [], "timings_per_token": True}, "timed")
        used = stream(server.base_url, {"model": "m", "stream_options": {"continuous_usage_stats": True}})
    assert content(plain) == ["t0 t1 t2 ", "t3 t4 t5 ", "t6 t7 "]
    assert all("timings" not in e and "usage" not in e for e in plain[:3]), "no running counts unasked"
    assert [e["timings"]["predicted_n"] for e in timed[:3]] == [3, 6, 8]
    assert [e["usage"]["completion_tokens"] for e in used[:3]] == [3, 6, 8]
    assert plain[-1]["usage"]["completion_tokens"] == 8
    log = read_truth_log(tmp_path / "truth.jsonl")
    assert log["plain"]["tokens"] == [3, 3, 2] and len(log["plain"]["sends"]) == 3
    assert "gt-0" in log, "a client that sends no X-Request-Id is logged under an id of the server's"


def test_jitter_spreads_gaps_but_keeps_their_mean() -> None:
    app = GroundTruthApp(GroundTruthConfig(ttft_ms=0, itl_ms=10, jitter=0.5, seed=3), None)
    plan = app.chunk_plan(2001, request_index=7)
    gaps = [b[0] - a[0] for a, b in zip(plan, plan[1:], strict=False)]
    assert min(gaps) >= 0.005 - 1e-9 and max(gaps) <= 0.015 + 1e-9 and statistics.pstdev(gaps) > 0.002
    assert statistics.mean(gaps) == pytest.approx(0.010, rel=0.02)
    assert app.chunk_plan(2001, request_index=7) == plan, "seeded: the same request gets the same gaps"


@pytest.mark.timing
def test_queue_lets_only_slots_stream_and_logs_the_arrival(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=100, itl_ms=1, tokens=2, slots=2, queue=True, model="m")
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server, ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: stream(server.base_url, {"model": "m"}, f"r{i}"), range(4)))
    logged = read_truth_log(tmp_path / "truth.jsonl").values()
    starts, ends = sorted(e["sends"][0] for e in logged), sorted(e["sends"][-1] for e in logged)
    assert starts[2] >= ends[0] + 0.09, "the third reply waited for a slot, then made its first token"
    assert max(e["sends"][0] - e["t_received"] for e in logged) > 0.15, "the wait counts from the arrival"


def test_no_done_streams_every_token_then_hangs_until_the_client_leaves(tmp_path: Path) -> None:
    """The reply's tokens come at their pace, then nothing: no finish chunk, no [DONE], no end of the chunked body.
    Only the client's read timeout ends it; the server logs the reply once the client has closed the connection."""
    config = GroundTruthConfig(ttft_ms=2, itl_ms=1, tokens=4, model="m", fault_cycle=["no_done", "none"])
    lines: list[str] = []
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        with pytest.raises(httpx.ReadTimeout), httpx.stream(
                "POST", f"{server.base_url}/v1/chat/completions", json={"model": "m"},
                headers={"X-Request-Id": "hung"}, timeout=httpx.Timeout(5, read=0.3)) as response:
            lines.extend(line for line in response.iter_lines() if line)
        log_path = tmp_path / "truth.jsonl"
        for _ in range(100):  # the server sees the client's close a moment after it
            if "hung" in read_truth_log(log_path):
                break
            time.sleep(0.02)
        healthy = stream(server.base_url, {"model": "m"}, "next")
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    assert content(events) == ["t0 ", "t1 ", "t2 ", "t3 "] and "data: [DONE]" not in lines
    assert all(event["choices"][0]["finish_reason"] is None for event in events), "no finish chunk"
    logged = read_truth_log(log_path)
    assert logged["hung"]["fault"] == "no_done" and logged["hung"]["tokens"] == [1, 1, 1, 1]
    assert content(healthy) == ["t0 ", "t1 ", "t2 ", "t3 "] and logged["next"]["fault"] == "none"
