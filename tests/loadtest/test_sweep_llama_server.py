"""A short sweep against the real llama-server serving the tiny synthetic model."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from core.profile import load_profile
from core.rundir import LoadSettings, RunDir, RunManifest, ServerInfo, new_manifest, new_run_id, server_at, utc_now
from loadtest.long_context import context_for_tokens
from loadtest.streaming import RequestMeta, build_payload, make_client, stream_chat
from loadtest.sweep import run_sweep
from loadtest.telemetry import ServerTelemetry, parse_metrics

pytestmark = pytest.mark.integration


def predicted_total(base_url: str) -> float:
    return parse_metrics(httpx.get(f"{base_url}/metrics", timeout=10).text)["llamacpp:tokens_predicted_total"]


def busy_slots(base_url: str) -> int | None:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        return ServerTelemetry(client).snapshot(0, 0, "end").slots_busy


def test_sweep_records_agree_with_server_usage_and_metrics(llama_server, tmp_path: Path) -> None:
    profile = load_profile("tiny")
    settings = LoadSettings(
        user_steps=[1, 2],
        warmup_seconds=1.0,
        measure_seconds=4.0,  # longer than the 1-2.4 s stalls a busy 2-core machine gives llama-server
        max_tokens=profile.request.max_tokens,
        ignore_eos=True,
    )
    manifest = RunManifest(
        run_id=new_run_id("tiny"),
        created_at=utc_now(),
        profile=profile.name,
        load=settings,
        server=ServerInfo(
            args=list(llama_server.args),
            host="127.0.0.1",
            port=llama_server.port,
            parallel_slots=profile.server.parallel_slots,
        ),
    )
    run = RunDir.create(tmp_path, manifest)
    before = predicted_total(llama_server.base_url)
    result = run_sweep(run, llama_server.base_url, progress=False)
    deadline = time.monotonic() + 10  # the server counts a cancelled request once it has noticed
    while time.monotonic() < deadline and (busy_slots(llama_server.base_url) or 0) > 0:
        time.sleep(0.1)
    after = predicted_total(llama_server.base_url)

    assert result.status == "complete", result.status_detail
    all_records = run.read_records()
    # requests still streaming when the sweep ended were stopped by the harness: no error, partial chunks
    stopped = [r for r in all_records if r.interrupted]
    records = [r for r in all_records if not r.interrupted]
    assert records and all(r.ok for r in all_records)
    assert all(r.content_chunks <= settings.max_tokens for r in stopped)
    for record in records:
        # ignore_eos: every reply is exactly max_tokens long, by usage and by the server's timings
        assert record.completion_tokens == settings.max_tokens == record.timings.predicted_n
        assert record.prompt_tokens == record.timings.prompt_n  # cache_prompt off: the whole prompt is processed
        assert record.prompt_tokens > 0 and record.timings.predicted_per_second > 0
        assert record.t_start < record.t_first_token <= record.t_last_token <= record.t_end
        assert 1 <= record.content_chunks <= record.completion_tokens
    # every token the server counted during the sweep is in exactly one record: a finished request's
    # usage, or a stopped one's chunks (the server may have made a few more before it saw the stop)
    finished_tokens = sum(r.completion_tokens for r in records)
    received = finished_tokens + sum(r.content_chunks for r in stopped)
    assert received <= after - before <= finished_tokens + len(stopped) * settings.max_tokens
    assert {r.users for r in all_records if r.phase == "measure"} == {1, 2}
    snapshots = run.read_telemetry()
    assert len(snapshots) == 6 and all(s.error is None for s in snapshots)
    assert snapshots[0].slots_total == profile.server.parallel_slots


def test_long_context_prefix_is_counted_exactly_by_the_server(llama_server) -> None:
    text, count = context_for_tokens(llama_server.base_url, 300)
    assert count == 300
    tokens = httpx.post(f"{llama_server.base_url}/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    assert len(tokens) == 300
    meta = RequestMeta(shard="t", step=0, users=1, phase="measure", category="facts", context_tokens=count)
    payload = build_payload(
        [{"role": "user", "content": f"{text}\n\nSummarise."}],
        model="default",
        max_tokens=4,
        temperature=0.0,
        cache_prompt=False,
        ignore_eos=True,
    )
    with make_client(llama_server.base_url, read_timeout=120) as client:
        record = stream_chat(client, payload, meta).record
    assert record.ok and record.prompt_tokens > 300 and record.context_tokens == 300


def sweep_tiny_server(server, tmp_path: Path, name: str, settings: LoadSettings):
    """A sweep against the session's tiny llama-server; returns (run, final manifest)."""
    profile = load_profile("tiny")
    manifest = new_manifest(name, profile.name, load=settings, server=server_at(server.base_url, slots=4))
    run = RunDir.create(tmp_path, manifest)
    result = run_sweep(run, server.base_url, progress=False)
    assert result.status == "complete", result.status_detail
    return run, result


def test_long_context_sweep_records_the_exact_prefix_length(llama_server, tmp_path: Path) -> None:
    settings = LoadSettings(
        user_steps=[1], warmup_seconds=0.5, measure_seconds=1.5, max_tokens=4, ignore_eos=True, context_tokens=200
    )
    run, result = sweep_tiny_server(llama_server, tmp_path, "ctx", settings)
    assert [s.context_tokens for s in result.steps] == [200]
    records = run.read_records()
    assert records and all(r.ok and r.context_tokens == 200 for r in records)
    # the request still streaming at the end is stopped by the harness, before its usage arrived
    finished = [r for r in records if not r.interrupted]
    assert finished and all(r.prompt_tokens > 200 for r in finished)


def test_long_context_with_load_processes_records_each_step_once(llama_server, tmp_path: Path) -> None:
    # Locust's master resets the shape's clock twice; a controller whose set-up waits on the
    # server (the context prefix is cut with /tokenize) must not leave two schedules running
    # (seen on the H200: every long-context step recorded twice).
    settings = LoadSettings(
        user_steps=[1, 2], warmup_seconds=1.0, measure_seconds=1.0, max_tokens=4, ignore_eos=True,
        context_tokens=150, processes=2,
    )
    run, result = sweep_tiny_server(llama_server, tmp_path, "ctx-procs", settings)
    assert [(s.index, s.context_tokens) for s in result.steps] == [(0, 150), (1, 150)]
    boundaries = [(t.step, t.boundary) for t in run.read_telemetry()]
    assert sorted(boundaries) == sorted(set(boundaries)), boundaries
    # both windows follow one clock (the shape's last reset): step 1 starts where step 0 ends
    first, second = result.steps
    assert second.started_at == pytest.approx(first.started_at + 1.0 + 1.0, abs=1e-6)


def test_pinned_users_ask_for_slots_zero_to_n_minus_one(llama_server, tmp_path: Path) -> None:
    """--pin-slots: user i sends id_slot i, so 3 users on a 4-slot server use slots 0, 1 and 2 only
    (llama-server logs each choice by id)."""
    profile = load_profile("tiny")
    settings = LoadSettings(user_steps=[3], warmup_seconds=0.5, measure_seconds=2.0, max_tokens=8, ignore_eos=True,
                            pin_slots=True)
    run = RunDir.create(tmp_path, new_manifest("pinned", profile.name, load=settings,
                                               server=server_at(llama_server.base_url, llama_server.args, 4)))
    logged = llama_server.log_path.stat().st_size
    result = run_sweep(run, llama_server.base_url, progress=False)
    assert result.status == "complete", result.status_detail
    with open(llama_server.log_path, errors="replace") as log:
        log.seek(logged)
        chosen = {int(line.split("selected slot by id (")[1].split(")")[0]) for line in log
                  if "selected slot by id (" in line}
    assert chosen == {0, 1, 2}
    with pytest.raises(ValueError, match="pin_slots needs a closed loop"):
        LoadSettings(rate_steps=[1.0], warmup_seconds=0, measure_seconds=1, max_tokens=8, pin_slots=True)
