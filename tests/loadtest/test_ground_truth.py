"""The ground-truth server itself: what it sends is what its log says, chunked, jittered and queued."""

from __future__ import annotations

import json
import statistics
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
